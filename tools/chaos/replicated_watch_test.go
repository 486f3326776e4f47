package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/leasehttp"
)

// etcdWatchExpiryBound is how soon after a lease's TTL a watch of
// etcdstore hears of its expiry: the bound etcdstore declares to leasetest
// (WatchExpiryBound in etcdstore_test.go; DESIGN.md, Watching), as etcd
// holds a lease of TTL ceil(TTL) + 1 s and checks expiries every 0.5 s.
const etcdWatchExpiryBound = 3 * time.Second

// replicaWait bounds every wait for something that must come through the
// replicas (an event, an election) other than an expiry, which has its
// bound.
const replicaWait = 20 * time.Second

// perReplica returns one client per replica, each listing only it.
func perReplica(t *testing.T, rs *replicaSet, opts ...leasehttp.ClientOption) []*leasehttp.Client {
	t.Helper()
	var via []*leasehttp.Client
	for i := range rs.ports {
		c, err := leasehttp.NewClient(rs.url(i), append([]leasehttp.ClientOption{leasehttp.WithAuthToken(replicaToken)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		via = append(via, c)
	}
	return via
}

// item is one value of an iter.Seq2 read in the background, with when it
// came.
type item[T any] struct {
	v   T
	err error
	at  time.Time
}

// stream reads seq in a goroutine of its own, so that the test waits for
// each value with a bound; the sequence ends with the test's cleanup.
type stream[T any] struct {
	t    *testing.T
	name string
	ch   chan item[T]
}

func follow[T any](t *testing.T, name string, seq func(context.Context) iter.Seq2[T, error]) *stream[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream[T]{t: t, name: name, ch: make(chan item[T], 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.ch)
		for v, err := range seq(ctx) {
			select {
			case s.ch <- item[T]{v, err, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// next returns the next value, failing the test if none comes within d or
// the sequence ends.
func (s *stream[T]) next(d time.Duration, what string) item[T] {
	s.t.Helper()
	select {
	case it, ok := <-s.ch:
		if !ok {
			s.t.Fatalf("%s ended while waiting for %s", s.name, what)
		}
		return it
	case <-time.After(d):
		s.t.Fatalf("%s: no %s within %v", s.name, what, d)
	}
	panic("unreachable")
}

// event returns the next watch event, failing on an error.
func (s *stream[T]) event(d time.Duration, what string) T {
	s.t.Helper()
	it := s.next(d, what)
	if it.err != nil {
		s.t.Fatalf("%s: %v while waiting for %s", s.name, it.err, what)
	}
	return it.v
}

// sameLease reports how ev differs from what an event of kind about l
// must be, or "" if it does not.
func sameLease(ev lease.Event, kind lease.EventKind, l lease.Lease) string {
	got := ev.Lease
	if ev.Kind != kind || got.Key != l.Key || got.Owner != l.Owner || got.Token != l.Token {
		return fmt.Sprintf("%v of %q owner %q token %d, want %v of %q owner %q token %d",
			ev.Kind, got.Key, got.Owner, got.Token, kind, l.Key, l.Owner, l.Token)
	}
	if !got.ID.IsZero() {
		return fmt.Sprintf("%v of %q carries the lease's ID (I4)", kind, l.Key)
	}
	if (kind == lease.Held || kind == lease.Acquired || kind == lease.Renewed) &&
		(got.TTL != l.TTL || got.Expires.Sub(l.Expires).Abs() > time.Millisecond) {
		return fmt.Sprintf("%v of %q: TTL %v, expires %v; want %v, %v", kind, l.Key, got.TTL, got.Expires, l.TTL, l.Expires)
	}
	return ""
}

// replicasWatch: watches opened through replicas 0 and 1 see the leases
// held when they start, then every change made through replicas 1 and 2
// (and 0), in the order made for each key, with zero IDs; and the two
// watches see the same events, key by key.
func replicasWatch(t *testing.T, rs *replicaSet) {
	via := perReplica(t, rs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix, ttl = "w/", 10 * time.Second
	pre, err := via[2].Acquire(ctx, prefix+"pre", "before", ttl)
	if err != nil {
		t.Fatal(err)
	}
	watchers := []int{0, 1}
	var streams []*stream[lease.Event]
	for _, i := range watchers {
		st := follow(t, fmt.Sprintf("the watch through replica %d", i), func(ctx context.Context) iter.Seq2[lease.Event, error] {
			return via[i].Watch(ctx, prefix)
		})
		if ev := st.event(replicaWait, "Held"); sameLease(ev, lease.Held, pre) != "" {
			t.Fatalf("%s began with %s", st.name, sameLease(ev, lease.Held, pre))
		}
		if ev := st.event(replicaWait, "Synced"); ev.Kind != lease.Synced {
			t.Fatalf("%s: %v of %q after the one lease held, want Synced", st.name, ev.Kind, ev.Lease.Key)
		}
		streams = append(streams, st)
	}

	// The changes, through every replica, and the events they must make.
	type change struct {
		kind lease.EventKind
		l    lease.Lease
	}
	want := map[string][]change{}
	acquire := func(r int, key, owner string) lease.Lease {
		t.Helper()
		l, err := via[r].Acquire(ctx, prefix+key, owner, ttl)
		if err != nil {
			t.Fatalf("Acquire %s through replica %d: %v", key, r, err)
		}
		want[l.Key] = append(want[l.Key], change{lease.Acquired, l})
		return l
	}
	renew := func(r int, l lease.Lease, ttl time.Duration) lease.Lease {
		t.Helper()
		n, err := via[r].Renew(ctx, l, ttl)
		if err != nil {
			t.Fatalf("Renew %s through replica %d: %v", l.Key, r, err)
		}
		want[l.Key] = append(want[l.Key], change{lease.Renewed, n})
		return n
	}
	release := func(r int, l lease.Lease) {
		t.Helper()
		if err := via[r].Release(ctx, l); err != nil {
			t.Fatalf("Release %s through replica %d: %v", l.Key, r, err)
		}
		want[l.Key] = append(want[l.Key], change{lease.Released, l})
	}
	a := acquire(1, "a", "one")
	a = renew(2, a, ttl+time.Second)
	b := acquire(2, "b", "two")
	release(1, a)
	a = acquire(2, "a", "three")
	b = renew(1, b, ttl+2*time.Second)
	b = renew(0, b, ttl)
	release(2, b)
	release(1, a)
	release(0, renew(1, pre, ttl+time.Second))
	acquire(2, "zz-last", "marker")

	got := make([]map[string][]lease.Event, len(streams))
	for w, st := range streams {
		got[w] = map[string][]lease.Event{}
		for key, changes := range want {
			for len(got[w][key]) < len(changes) {
				ev := st.event(replicaWait, fmt.Sprintf("one of the %d changes of %q", len(changes), key))
				got[w][ev.Lease.Key] = append(got[w][ev.Lease.Key], ev)
			}
		}
		select {
		case it := <-st.ch:
			t.Errorf("%s: after every change, one more: %v %+v, %v", st.name, it.v.Kind, it.v.Lease, it.err)
		default:
		}
		for key, changes := range want {
			if len(got[w][key]) != len(changes) {
				t.Errorf("%s: %d events of %q, want %d: %v", st.name, len(got[w][key]), key, len(changes), got[w][key])
				continue
			}
			for k, c := range changes {
				if diff := sameLease(got[w][key][k], c.kind, c.l); diff != "" {
					t.Errorf("%s: event %d of %q: %s", st.name, k, key, diff)
				}
			}
		}
	}
	// The two watches told the same events, to the instant of each expiry.
	for key := range want {
		for k, ev := range got[0][key] {
			if k < len(got[1][key]) && (ev.Kind != got[1][key][k].Kind || ev.Lease != got[1][key][k].Lease) {
				t.Errorf("event %d of %q: %v %+v through replica %d, %v %+v through replica %d",
					k, key, ev.Kind, ev.Lease, watchers[0], got[1][key][k].Kind, got[1][key][k].Lease, watchers[1])
			}
		}
	}
}

// replicasWatchExpiry: a lease acquired and renewed through replica 0
// whose holder then stops renewing is reported Expired to a watch through
// replica 1 once its TTL has passed and within etcdstore's bound after it.
func replicasWatchExpiry(t *testing.T, rs *replicaSet) {
	via := perReplica(t, rs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix, ttl = "x/", time.Second
	st := follow(t, "the watch through replica 1", func(ctx context.Context) iter.Seq2[lease.Event, error] {
		return via[1].Watch(ctx, prefix)
	})
	if ev := st.event(replicaWait, "Synced"); ev.Kind != lease.Synced {
		t.Fatalf("%v of %q, want Synced on an empty prefix", ev.Kind, ev.Lease.Key)
	}
	l, err := via[0].Acquire(ctx, prefix+"k", "quitter", ttl)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := via[0].Renew(ctx, l, ttl)
	end := time.Now()
	if err != nil {
		t.Fatalf("too slow: the renewal of a lease of TTL %v failed: %v", ttl, err)
	}
	for _, c := range []struct {
		kind lease.EventKind
		l    lease.Lease
	}{{lease.Acquired, l}, {lease.Renewed, r}} {
		if diff := sameLease(st.event(replicaWait, c.kind.String()), c.kind, c.l); diff != "" {
			t.Fatal(diff)
		}
	}
	it := st.next(ttl+etcdWatchExpiryBound+replicaWait, "Expired")
	if it.err != nil {
		t.Fatal(it.err)
	}
	if diff := sameLease(it.v, lease.Expired, r); diff != "" {
		t.Fatal(diff)
	}
	if it.at.Before(start.Add(ttl)) {
		t.Fatalf("Expired came %v after the last renewal, before its TTL of %v", it.at.Sub(start), ttl)
	}
	late := it.at.Sub(end.Add(ttl))
	if late > etcdWatchExpiryBound {
		t.Fatalf("Expired came %v after the TTL, beyond etcdstore's bound of %v", late, etcdWatchExpiryBound)
	}
	t.Logf("Expired told through replica 1 %v after the TTL (counted from the answer to the last renewal, through replica 0; bound %v)",
		late.Round(time.Millisecond), etcdWatchExpiryBound)
}

// replicasObserve: an observer whose multi-endpoint client lists replica
// 2 first sees every leader change made through replicas 0 and 1, with
// rising tokens: a resignation, and the expiry of a leader whose only
// replica is killed. When its own replica is killed its Observe ends with
// ErrUnavailable; observing again (the client moves on past the dead
// replicas) starts from the leader of that moment, elected meanwhile.
// Replicas killed here are started again at its end.
func replicasObserve(t *testing.T, cluster *etcdtest.Cluster, rs *replicaSet) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var killed []int
	defer func() {
		for _, i := range killed {
			if err := rs.start(i); err != nil {
				t.Errorf("starting replica %d again: %v", i, err)
			}
		}
	}()
	const key, ttl = "observed", 2 * time.Second
	via := perReplica(t, rs, leasehttp.WithTimeout(time.Second))
	elector := func(b lease.Backend) *election.Elector {
		lc, err := lease.NewClient(b)
		if err != nil {
			t.Fatal(err)
		}
		e, err := election.New(lc, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	observer := elector(rs.client(t, 2, leasehttp.WithTimeout(time.Second)))
	// breaks hears each break of an Observe's watch, which it follows
	// again (lease.FollowKey) instead of ending.
	breaks := make(chan error, 16)
	heard := lease.FollowOnBreak(func(err error, _ time.Duration) error {
		select {
		case breaks <- err:
		default:
		}
		return nil
	})
	observe := func(n int) *stream[election.Leader] {
		return follow(t, fmt.Sprintf("Observe #%d", n), func(ctx context.Context) iter.Seq2[election.Leader, error] {
			return observer.Observe(ctx, key, heard)
		})
	}
	var last lease.Token
	// leader waits for the observer's next report and checks it names
	// term (no leader if nil), with a token above every one before.
	leader := func(obs *stream[election.Leader], term *election.Term, what string) {
		t.Helper()
		l := obs.event(replicaWait, what)
		switch {
		case term == nil && (l.Value != "" || l.Token != 0):
			t.Fatalf("%s: %s reports %q (token %d), want no leader", what, obs.name, l.Value, l.Token)
		case term != nil && (l.Value != term.Value() || l.Token != term.Token()):
			t.Fatalf("%s: %s reports %q (token %d), want %q (token %d)", what, obs.name, l.Value, l.Token, term.Value(), term.Token())
		case l.Key != key:
			t.Fatalf("%s: %s reports key %q, want %q", what, obs.name, l.Key, key)
		case term != nil && l.Token <= last:
			t.Fatalf("%s: %s reports token %d after %d", what, obs.name, l.Token, last)
		}
		if term != nil {
			last = l.Token
		}
	}
	type won struct {
		term *election.Term
		err  error
	}
	campaign := func(e *election.Elector, value string) chan won {
		ch := make(chan won, 1)
		go func() {
			term, err := e.Campaign(ctx, key, value)
			ch <- won{term, err}
		}()
		return ch
	}
	elected := func(ch chan won, value string, within time.Duration) *election.Term {
		t.Helper()
		select {
		case w := <-ch:
			if w.err != nil || w.term.Value() != value {
				t.Fatalf("campaign of %s: %+v, %v", value, w.term, w.err)
			}
			return w.term
		case <-time.After(within):
			t.Fatalf("%s not elected within %v", value, within)
		}
		panic("unreachable")
	}

	obs := observe(1)
	leader(obs, nil, "the start, with no leader")
	// c0 campaigns through replica 0 alone, c1 through replica 1 alone.
	c0 := elected(campaign(elector(via[0]), "c0"), "c0", replicaWait)
	leader(obs, c0, "c0 elected through replica 0")
	c1ch := campaign(elector(via[1]), "c1")
	waitQueued(t, cluster, "shared", key, 1)

	// c0's replica dies: c0 cannot renew, etcd expires its term and
	// elects c1, queued through replica 1.
	rs.kill(t, 0)
	killed = append(killed, 0)
	c1 := elected(c1ch, "c1", ttl+etcdWatchExpiryBound+replicaWait)
	select {
	case <-c0.Done():
	case <-time.After(replicaWait):
		t.Fatalf("c0's term still live %v after its only replica died", replicaWait)
	}
	leader(obs, nil, "c0's term expired")
	leader(obs, c1, "c1 elected after c0's expiry")

	// The observer's replica dies: its Observe hears the break (matching
	// ErrUnavailable) and follows again through the next replica, without
	// ending.
	rs.kill(t, 2)
	killed = append(killed, 2)
	select {
	case err := <-breaks:
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("after the observer's replica died, Observe's break was %v; want an error matching ErrUnavailable", err)
		}
	case it := <-obs.ch:
		t.Fatalf("after the observer's replica died, Observe gave %+v, %v before any break was heard", it.v, it.err)
	case <-time.After(replicaWait):
		t.Fatalf("Observe #1 heard no break within %v of its replica's death", replicaWait)
	}
	// Meanwhile c1 resigns and c2, through the one replica left, is elected.
	c2ch := campaign(elector(rs.client(t, 1)), "c2")
	waitQueued(t, cluster, "shared", key, 1)
	if err := c1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := elected(c2ch, "c2", replicaWait)
	// The followed Observe reports c2 (after "no leader" if it saw c1's
	// resignation first), and a new one starts from c2.
	for deadline := time.Now().Add(replicaWait); ; {
		l := obs.event(time.Until(deadline), "c2, observed again past two dead replicas")
		if l.Value == "" && l.Token == 0 {
			continue
		}
		if l.Value != c2.Value() || l.Token != c2.Token() {
			t.Fatalf("the followed Observe reports %q (token %d), want c2 (token %d)", l.Value, l.Token, c2.Token())
		}
		break
	}
	obs = observe(2)
	leader(obs, c2, "observing again, past two dead replicas")
	if err := c2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	leader(obs, nil, "c2 resigned")
}
