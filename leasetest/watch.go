package leasetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// The Watch section: lease.Watcher, for backends that offer it. Each
// subtest watches a prefix of its own, which holds the characters that are
// wildcards to LIKE and glob, and changes lookalike keys beside it that no
// event may name.

// WatchBuffer declares how many events a watcher of the backend may leave
// unread before the backend cuts it off (default 1024). The suite leaves
// twice as many and more unread and expects the break. It must be
// positive.
func WatchBuffer(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: leasetest: WatchBuffer needs a positive count, got %d", lease.ErrInvalid, n)
		}
		c.watchBuffer = n
		return nil
	}
}

// WatchExpiryBound declares how soon after a lease expires on the
// backend's clock its watchers hear of it (default 1 s). Timing on a busy
// test machine is noisy: pass the bound the backend states, generously. It
// must be positive.
func WatchExpiryBound(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: leasetest: WatchExpiryBound needs a positive duration, got %v", lease.ErrInvalid, d)
		}
		c.watchExpiryBound = d
		return nil
	}
}

// watchWait bounds every wait for an event that must come (other than an
// expiry, which has its bound) and for a stream's end.
const watchWait = 10 * time.Second

func (s *suite) watch(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, b lease.Backend, w lease.Watcher)
	}{
		{"InitialState", s.watchInitialState},
		{"Changes", s.watchChanges},
		{"SecondWatcher", s.watchSecondWatcher},
		{"ContextEnds", s.watchContextEnds},
		{"BadPrefix", s.watchBadPrefix},
		{"SlowReader", s.watchSlowReader},
		{"Expiry", s.watchExpiry},
		{"RenewedNotExpired", s.watchRenewedNotExpired},
		{"SnapshotConsistent", s.watchSnapshotConsistent},
		{"KeyExact", s.watchKeyExact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := s.newBackend(t)
			tc.f(t, b, b.(lease.Watcher))
		})
	}
}

// watchPrefix returns a prefix for this test, with wildcard characters in
// it, and keys that start like it but are outside it.
func watchPrefix(t *testing.T) (prefix string, lookalikes []string) {
	base := key(t, "w_%*?")
	prefix = base + "/"
	lookalikes = []string{
		base,       // the prefix without its last byte
		base + "x", // shares all but the last byte
		strings.Replace(base, "w_%*?", "wx%*?", 1) + "/k", // what "_" matches as a pattern
		strings.Replace(base, "w_%*?", "w_zz?", 1) + "/k", // what "%*" match as a pattern
	}
	return prefix, lookalikes
}

// watchItem is one item of a watch, with when the test received it.
type watchItem struct {
	ev  lease.Event
	err error
	at  time.Time
}

// stream is a watch read through a channel, so the test can wait for an
// item with a bound, or leave the watch unread (the goroutine then blocks
// in the loop body, as a slow reader does).
type stream struct {
	t      *testing.T
	prefix string
	exact  bool // a watch of the key prefix alone (lease.KeyWatcher)
	ch     chan watchItem
	cancel context.CancelFunc
	ended  bool
}

func startWatch(t *testing.T, w lease.Watcher, prefix string) *stream {
	t.Helper()
	return startSeq(t, &stream{t: t, prefix: prefix}, func(ctx context.Context) iter.Seq2[lease.Event, error] { return w.Watch(ctx, prefix) })
}

// startKeyWatch is startWatch of w.WatchKey(key).
func startKeyWatch(t *testing.T, w lease.KeyWatcher, key string) *stream {
	t.Helper()
	return startSeq(t, &stream{t: t, prefix: key, exact: true}, func(ctx context.Context) iter.Seq2[lease.Event, error] { return w.WatchKey(ctx, key) })
}

func startSeq(t *testing.T, st *stream, seq func(ctx context.Context) iter.Seq2[lease.Event, error]) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st.ch, st.cancel = make(chan watchItem), cancel
	go func() {
		defer close(st.ch)
		for ev, err := range seq(ctx) {
			st.ch <- watchItem{ev: ev, err: err, at: time.Now()}
		}
	}()
	t.Cleanup(func() { st.stop() })
	return st
}

// stop cancels the watch and reads it to its end, which must come.
func (st *stream) stop() {
	st.cancel()
	if st.ended {
		return
	}
	deadline := time.After(watchWait)
	for {
		select {
		case _, ok := <-st.ch:
			if !ok {
				st.ended = true
				return
			}
		case <-deadline:
			st.t.Errorf("watch of %q: still going %v after its context was cancelled", st.prefix, watchWait)
			return
		}
	}
}

// next returns the next item; ok is false once the watch has ended. It
// fails the test if nothing comes within d.
func (st *stream) next(d time.Duration, what string) (watchItem, bool) {
	st.t.Helper()
	select {
	case it, ok := <-st.ch:
		if !ok {
			st.ended = true
		}
		return it, ok
	case <-time.After(d):
		st.t.Fatalf("watch of %q: no event within %v while waiting for %s", st.prefix, d, what)
		return watchItem{}, false
	}
}

// event returns the next event, failing on an error or the end.
func (st *stream) event(d time.Duration, what string) watchItem {
	st.t.Helper()
	it, ok := st.next(d, what)
	switch {
	case !ok:
		st.t.Fatalf("watch of %q ended while waiting for %s", st.prefix, what)
	case it.err != nil:
		st.t.Fatalf("watch of %q failed while waiting for %s: %v", st.prefix, what, it.err)
	case !it.ev.Lease.ID.IsZero():
		st.t.Fatalf("watch of %q: %v event of %q carries the lease's secret ID (I4)", st.prefix, it.ev.Kind, it.ev.Lease.Key)
	case !strings.HasPrefix(it.ev.Lease.Key, st.prefix) && it.ev.Kind != lease.Synced:
		st.t.Fatalf("watch of %q: %v event of %q, a key outside the prefix", st.prefix, it.ev.Kind, it.ev.Lease.Key)
	case st.exact && it.ev.Lease.Key != st.prefix && it.ev.Kind != lease.Synced:
		st.t.Fatalf("watch of exactly %q: %v event of %q, another key", st.prefix, it.ev.Kind, it.ev.Lease.Key)
	}
	return it
}

// synced reads the current state, which must be Held events in strictly
// rising key order and then Synced, whose lease is zero.
func (st *stream) synced() []lease.Lease {
	st.t.Helper()
	var held []lease.Lease
	for {
		it := st.event(watchWait, "the current state and Synced")
		switch it.ev.Kind {
		case lease.Held:
			if n := len(held); n > 0 && held[n-1].Key >= it.ev.Lease.Key {
				st.t.Fatalf("watch of %q: Held %q after Held %q, not in rising key order", st.prefix, it.ev.Lease.Key, held[n-1].Key)
			}
			held = append(held, it.ev.Lease)
		case lease.Synced:
			if it.ev.Lease != (lease.Lease{}) {
				st.t.Fatalf("watch of %q: Synced carries a lease %+v, want none", st.prefix, it.ev.Lease)
			}
			return held
		default:
			st.t.Fatalf("watch of %q: %v event of %q before Synced: the current state must come first, as Held events", st.prefix, it.ev.Kind, it.ev.Lease.Key)
		}
	}
}

// expect reads the next event and checks it is kind of l (as Acquire or
// Renew returned it; for Released and Expired, the lease that ended).
func (st *stream) expect(kind lease.EventKind, l lease.Lease) watchItem {
	st.t.Helper()
	it := st.event(watchWait, fmt.Sprintf("%v of %q token %d", kind, l.Key, l.Token))
	checkEvent(st.t, it.ev, kind, l)
	return it
}

// checkEvent checks that ev is kind of l, without its ID. The expiry of a
// lease that ended is its holder's business; those of leases held are
// checked to the millisecond the HTTP API carries.
func checkEvent(t *testing.T, ev lease.Event, kind lease.EventKind, l lease.Lease) {
	t.Helper()
	got := ev.Lease
	if ev.Kind != kind || got.Key != l.Key || got.Owner != l.Owner || got.Token != l.Token {
		t.Fatalf("event %v of %q owner %q token %d, want %v of %q owner %q token %d",
			ev.Kind, got.Key, got.Owner, got.Token, kind, l.Key, l.Owner, l.Token)
	}
	if !got.ID.IsZero() {
		t.Fatalf("%v event of %q carries the lease's secret ID (I4)", kind, l.Key)
	}
	if kind == lease.Held || kind == lease.Acquired || kind == lease.Renewed {
		if got.TTL != l.TTL || got.Expires.Sub(l.Expires).Abs() > time.Millisecond {
			t.Fatalf("%v event of %q: TTL %v, expires %v; want %v, %v", kind, l.Key, got.TTL, got.Expires, l.TTL, l.Expires)
		}
	}
}

// quiet checks that no event comes for what a change to key proves: it
// changes key (under the prefix) and the next event must be that change.
// Backends order events per key only, so an event of another key still on
// its way is not seen; this catches events that are already out.
func (st *stream) quiet(b lease.Backend, k, why string) {
	st.t.Helper()
	l := mustAcquire(st.t, b, k, "marker", longTTL)
	it := st.event(watchWait, "the marker's Acquired")
	if it.ev.Kind != lease.Acquired || it.ev.Lease.Key != k {
		st.t.Fatalf("watch of %q: %v event of %q (token %d), want none %s", st.prefix, it.ev.Kind, it.ev.Lease.Key, it.ev.Lease.Token, why)
	}
	if err := b.Release(ctxFor(st.t), l); err != nil {
		st.t.Fatal(err)
	}
	st.expect(lease.Released, l)
}

func (s *suite) watchInitialState(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, lookalikes := watchPrefix(t)
	for _, k := range lookalikes {
		mustAcquire(t, b, k, "lookalike", longTTL)
	}
	// Acquired out of key order; the prefix itself is a key under it.
	want := map[string]lease.Lease{}
	for _, k := range []string{prefix + "c", prefix, prefix + "a", prefix + "b"} {
		want[k] = mustAcquire(t, b, k, "owner-"+k[len(prefix):], longTTL)
	}
	r, err := b.Renew(ctxFor(t), want[prefix+"a"], longTTL+time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want[prefix+"a"] = r
	released := mustAcquire(t, b, prefix+"released", "gone", longTTL)
	if err := b.Release(ctxFor(t), released); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, b, prefix+"expired", "gone", s.cfg.expiryTTL)
	s.waitExpired(t, b, prefix+"expired", s.cfg.expiryTTL)

	st := startWatch(t, w, prefix)
	held := st.synced()
	var keys []string
	for _, l := range held {
		keys = append(keys, l.Key)
	}
	wantKeys := []string{prefix, prefix + "a", prefix + "b", prefix + "c"}
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("Held events name %q, want %q (in key order; not released, expired or lookalike keys)", keys, wantKeys)
	}
	for _, l := range held {
		checkEvent(t, lease.Event{Kind: lease.Held, Lease: l}, lease.Held, want[l.Key])
	}
	st.quiet(b, prefix+"zz-marker", "after Synced but the marker's own")
}

func (s *suite) watchChanges(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, lookalikes := watchPrefix(t)
	st := startWatch(t, w, prefix)
	if held := st.synced(); len(held) != 0 {
		t.Fatalf("watch of an unused prefix: Held %+v", held)
	}
	look := func() { // a change outside the prefix before each inside it
		for _, k := range lookalikes {
			l, err := b.Acquire(ctxFor(t), k, "lookalike", longTTL)
			if err == nil {
				err = b.Release(ctxFor(t), l)
			}
			if err != nil {
				t.Fatalf("lookalike %q: %v", k, err)
			}
		}
	}
	k := prefix + "k"
	look()
	l1 := mustAcquire(t, b, k, "worker-a", longTTL)
	st.expect(lease.Acquired, l1)
	look()
	r1, err := b.Renew(ctxFor(t), l1, longTTL+time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st.expect(lease.Renewed, r1)
	// A refused Acquire, Renew and Release change nothing, and say so.
	if _, err := b.Acquire(ctxFor(t), k, "worker-b", longTTL); !errIs(err, lease.ErrHeld) {
		t.Fatalf("Acquire of a held key: %v", err)
	}
	forged := r1
	forged.ID = lease.NewID()
	if _, err := b.Renew(ctxFor(t), forged, longTTL); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Renew with a wrong ID: %v", err)
	}
	if err := b.Release(ctxFor(t), forged); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Release with a wrong ID: %v", err)
	}
	look()
	if err := b.Release(ctxFor(t), r1); err != nil {
		t.Fatal(err)
	}
	st.expect(lease.Released, r1)
	look()
	l2 := mustAcquire(t, b, k, "worker-b", longTTL)
	it := st.expect(lease.Acquired, l2)
	if it.ev.Lease.Token <= l1.Token {
		t.Fatalf("Acquired token %d after %d: not rising", it.ev.Lease.Token, l1.Token)
	}
	if wa, ok := b.(lease.WaitAcquirer); ok { // a hand-over is a release and an acquire
		got := make(chan lease.Lease, 1)
		go func() {
			l, err := wa.AcquireWait(ctxFor(t), k, "waiter", longTTL)
			if err != nil {
				t.Errorf("AcquireWait: %v", err)
			}
			got <- l
		}()
		time.Sleep(100 * time.Millisecond) // let it queue
		if err := b.Release(ctxFor(t), l2); err != nil {
			t.Fatal(err)
		}
		st.expect(lease.Released, l2)
		l3 := <-got
		st.expect(lease.Acquired, l3)
		l2 = l3
	}
	if err := b.Release(ctxFor(t), l2); err != nil {
		t.Fatal(err)
	}
	st.expect(lease.Released, l2)
	look()
	st.quiet(b, prefix+"zz-marker", "for lookalike keys or refused calls")
}

func (s *suite) watchSecondWatcher(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, _ := watchPrefix(t)
	one, two := prefix+"one/x", prefix+"two/y"
	pre := mustAcquire(t, b, one, "before", longTTL)
	wide1, wide2 := startWatch(t, w, prefix), startWatch(t, w, prefix)
	narrow := startWatch(t, w, prefix+"one/")
	for _, st := range []*stream{wide1, wide2, narrow} {
		held := st.synced()
		if len(held) != 1 || held[0].Key != one {
			t.Fatalf("watch of %q: Held %+v, want only %q", st.prefix, held, one)
		}
		checkEvent(t, lease.Event{Kind: lease.Held, Lease: held[0]}, lease.Held, pre)
	}
	if err := b.Release(ctxFor(t), pre); err != nil {
		t.Fatal(err)
	}
	ly := mustAcquire(t, b, two, "y", longTTL)
	lx := mustAcquire(t, b, one, "x", longTTL)
	for _, st := range []*stream{wide1, wide2} {
		// One key's events in order; the two keys' in any order.
		var x, y []lease.Event
		for len(x)+len(y) < 3 {
			ev := st.event(watchWait, "the changes of both keys").ev
			if ev.Lease.Key == one {
				x = append(x, ev)
			} else {
				y = append(y, ev)
			}
		}
		if len(x) != 2 || len(y) != 1 {
			t.Fatalf("watch of %q: events %+v of %q and %+v of %q", st.prefix, x, one, y, two)
		}
		checkEvent(t, x[0], lease.Released, pre)
		checkEvent(t, x[1], lease.Acquired, lx)
		checkEvent(t, y[0], lease.Acquired, ly)
	}
	narrow.expect(lease.Released, pre)
	narrow.expect(lease.Acquired, lx)
	narrow.quiet(b, prefix+"one/zz-marker", fmt.Sprintf("for %q, outside the prefix", two))
}

func (s *suite) watchContextEnds(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, _ := watchPrefix(t)
	mustAcquire(t, b, prefix+"k", "holder", longTTL)
	st := startWatch(t, w, prefix)
	st.synced()
	st.cancel()
	for {
		it, ok := st.next(watchWait, "the end of a watch whose context was cancelled")
		if !ok {
			break
		}
		if it.err != nil {
			t.Fatalf("a watch whose context was cancelled yields %v, want its end without an error", it.err)
		}
	}
	// Cancelled before it starts: no error either.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range w.Watch(ctx, prefix) {
		if err != nil {
			t.Fatalf("a watch with a cancelled context yields %v, want its end without an error", err)
		}
	}
	// A caller that stops ranging ends the watch too; the backend goes on.
	for ev, err := range w.Watch(ctxFor(t), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == lease.Synced {
			break
		}
	}
	again := startWatch(t, w, prefix)
	if held := again.synced(); len(held) != 1 {
		t.Fatalf("a watch after others ended: Held %+v, want the one lease", held)
	}
}

func (s *suite) watchBadPrefix(t *testing.T, b lease.Backend, w lease.Watcher) {
	for _, p := range []string{"a\x00b", "a\nb", "\xff", "a\x7f", "a\u0085b", strings.Repeat("k", lease.MaxKeyLen+1)} {
		done := make(chan []error, 1)
		go func() {
			var errs []error
			for ev, err := range w.Watch(ctxFor(t), p) {
				if err == nil {
					err = fmt.Errorf("a %v event", ev.Kind)
				}
				errs = append(errs, err)
			}
			done <- errs
		}()
		select {
		case errs := <-done:
			if len(errs) != 1 || !errIs(errs[0], lease.ErrInvalid) {
				t.Errorf("Watch(%.40q) yields %v, want one error matching ErrInvalid and its end", p, errs)
			}
		case <-time.After(watchWait):
			t.Fatalf("Watch(%.40q) still going after %v, want one error matching ErrInvalid and its end", p, watchWait)
		}
	}
}

// watchSlowReader leaves a watch unread while the backend makes more
// changes than its watchers may leave unread. The backend must go on
// (its callers are not held up by a reader) and cut the watch off: the
// reader gets the changes it could keep, in order, then one error matching
// ErrUnavailable and the end; watching again gives the current state.
func (s *suite) watchSlowReader(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, _ := watchPrefix(t)
	const keys = 8
	last := make([]lease.Lease, keys)
	index := map[string]int{}
	for i := range last {
		last[i] = mustAcquire(t, b, fmt.Sprintf("%sk%d", prefix, i), "holder", longTTL)
		index[last[i].Key] = i
	}
	renewals := make([][]lease.Lease, keys) // per key, in the order made
	st := startWatch(t, w, prefix)
	if held := st.synced(); len(held) != keys {
		t.Fatalf("Held %d leases, want %d", len(held), keys)
	}
	// From here the test reads nothing until the changes are done.
	changes := 2*s.cfg.watchBuffer + 64
	var (
		wg   sync.WaitGroup
		done atomic.Int64
	)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range (changes + keys - 1) / keys {
				// Each renewal of a key asks a TTL of its own, so the
				// event of each is told apart from the others however
				// close together they come.
				r, err := b.Renew(ctxFor(t), last[i], longTTL+time.Duration(j)*time.Millisecond)
				if err != nil {
					t.Errorf("Renew while a watcher does not read: %v", err)
					return
				}
				last[i] = r
				renewals[i] = append(renewals[i], r)
				done.Add(1)
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	// However slow the backend, its renewals must go on: none for
	// watchWait is a backend held up by its reader.
	for seen, since := int64(-1), time.Now(); ; {
		select {
		case <-finished:
		case <-time.After(100 * time.Millisecond):
			if n := done.Load(); n != seen {
				seen, since = n, time.Now()
			} else if time.Since(since) > watchWait {
				t.Errorf("no renewal done for %v after %d of %d, while a watcher does not read: a slow reader holds the backend up", watchWait, n, changes)
				st.stop() // let them go, to end the test
				<-finished
				return
			}
			continue
		}
		break
	}
	// What the watch kept must be each key's first renewals, with no gap:
	// a change left out before the break is a change lost without a word.
	told := make([]int, keys)
	n := 0
	for {
		it, ok := st.next(watchWait, "the changes kept, then the break")
		if !ok {
			t.Fatalf("the watch ended without an error after %d of %d unread changes: the reader cannot tell it missed some", n, changes)
		}
		if it.err != nil {
			if !errIs(it.err, lease.ErrUnavailable) {
				t.Fatalf("a watch cut off for reading slowly: err = %v, want ErrUnavailable (and no other kind)", it.err)
			}
			break
		}
		ev := it.ev
		if ev.Kind != lease.Renewed || !ev.Lease.ID.IsZero() || !strings.HasPrefix(ev.Lease.Key, prefix) {
			t.Fatalf("while renewals went on: %v event of %q (ID zero: %v)", ev.Kind, ev.Lease.Key, ev.Lease.ID.IsZero())
		}
		i := index[ev.Lease.Key]
		if want := renewals[i][told[i]]; ev.Lease.TTL != want.TTL || ev.Lease.Expires.Sub(want.Expires).Abs() > time.Millisecond {
			t.Fatalf("renewal %d of %q told with TTL %v and expiry %v, want %v and %v: renewals before it were dropped (or reordered) without a break",
				told[i]+1, ev.Lease.Key, ev.Lease.TTL, ev.Lease.Expires, want.TTL, want.Expires)
		}
		told[i]++
		n++
		if n == changes {
			t.Fatalf("all %d changes were kept for a watcher that did not read: its buffer is not bounded as declared (WatchBuffer %d)", changes, s.cfg.watchBuffer)
		}
	}
	if it, ok := st.next(watchWait, "the end after the break"); ok {
		t.Fatalf("the watch goes on after its break: %v event, err %v", it.ev.Kind, it.err)
	}
	// Watching again starts from the current state: nothing is lost.
	again := startWatch(t, w, prefix)
	held := again.synced()
	if len(held) != keys {
		t.Fatalf("watching again: Held %d leases, want %d", len(held), keys)
	}
	for i, l := range held {
		checkEvent(t, lease.Event{Kind: lease.Held, Lease: l}, lease.Held, last[i])
	}
}

// watchExpiry: a lease held when the watch starts and one acquired after
// expire unrenewed; watchers hear of each within the backend's bound after
// its expiry, and not before it.
func (s *suite) watchExpiry(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, _ := watchPrefix(t)
	ttl, bound := s.cfg.expiryTTL, s.cfg.watchExpiryBound
	preStart := time.Now()
	pre := mustAcquire(t, b, prefix+"pre", "before", 2*ttl)
	preEnd := time.Now()
	st := startWatch(t, w, prefix)
	held := st.synced()
	if len(held) != 1 {
		t.Skipf("too slow to check: the lease of TTL %v expired before the watch began", 2*ttl)
	}
	checkEvent(t, lease.Event{Kind: lease.Held, Lease: held[0]}, lease.Held, pre)
	start := time.Now()
	l := mustAcquire(t, b, prefix+"new", "after", ttl)
	end := time.Now()
	type window struct{ from, to time.Time }
	expect := map[string]window{
		pre.Key: {preStart.Add(2 * ttl), preEnd.Add(2*ttl + bound)},
		l.Key:   {start.Add(ttl), end.Add(ttl + bound)},
	}
	leases := map[string]lease.Lease{pre.Key: pre, l.Key: l}
	acquired := false
	for len(expect) > 0 {
		it := st.event(2*ttl+bound+watchWait, "Expired")
		k := it.ev.Lease.Key
		if !acquired && it.ev.Kind == lease.Acquired && k == l.Key {
			checkEvent(t, it.ev, lease.Acquired, l)
			acquired = true
			continue
		}
		win, ok := expect[k]
		if !ok || it.ev.Kind != lease.Expired || (k == l.Key && !acquired) {
			t.Fatalf("%v event of %q (token %d), want Expired of %q", it.ev.Kind, k, it.ev.Lease.Token, slices.Sorted(maps.Keys(expect)))
		}
		checkEvent(t, it.ev, lease.Expired, leases[k])
		if it.at.Before(win.from) {
			t.Errorf("Expired of %q came %v before its TTL had passed", k, win.from.Sub(it.at))
		}
		if it.at.After(win.to) {
			t.Errorf("Expired of %q came %v after its expiry, beyond the bound of %v", k, it.at.Sub(win.to.Add(-bound)), bound)
		}
		delete(expect, k)
	}
	st.quiet(b, prefix+"zz-marker", "after each lease's one Expired")
}

// watchRenewedNotExpired: a lease renewed at once to a longer TTL is not
// reported expired at its first expiry, but at its renewed one.
func (s *suite) watchRenewedNotExpired(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, _ := watchPrefix(t)
	first := max(4*s.cfg.expiryTTL, 200*time.Millisecond)
	renewed, bound := first+max(6*s.cfg.expiryTTL, 300*time.Millisecond), s.cfg.watchExpiryBound
	st := startWatch(t, w, prefix)
	st.synced()
	k := prefix + "k"
	l := mustAcquire(t, b, k, "holder", first)
	st.expect(lease.Acquired, l)
	start := time.Now()
	r, err := b.Renew(ctxFor(t), l, renewed)
	end := time.Now()
	if err != nil {
		t.Skipf("too slow to check: the renewal of a lease of TTL %v failed: %v", first, err)
	}
	st.expect(lease.Renewed, r)
	it := st.event(renewed+bound+watchWait, "the renewed lease's Expired")
	checkEvent(t, it.ev, lease.Expired, r)
	if it.at.Before(start.Add(renewed)) {
		t.Fatalf("Expired of a lease renewed for %v came %v after the renewal: at its first expiry (TTL %v), not its renewed one", renewed, it.at.Sub(start), first)
	}
	if it.at.After(end.Add(renewed + bound)) {
		t.Errorf("Expired of %q came %v after its expiry, beyond the bound of %v", k, it.at.Sub(end.Add(renewed)), bound)
	}
}

// watchSnapshotConsistent starts watches while other goroutines change
// the keys under the prefix, and replays each watch's events over its
// current state: an Acquired of a key held, or a Renewed, Released or
// Expired of a lease not held, is a change missed or told twice around
// the snapshot. Once the changes stop, the replayed state must come to
// equal List's.
func (s *suite) watchSnapshotConsistent(t *testing.T, b lease.Backend, w lease.Watcher) {
	prefix, _ := watchPrefix(t)
	const (
		rounds   = 8
		churners = 2
		keys     = 6
	)
	// A witness watches through all the rounds: the watches that start
	// beside it must not disturb what it is told.
	wit := s.startWitness(t, w, prefix)
	conclusive := 0
	for round := range rounds {
		stop := make(chan struct{})
		var (
			wg   sync.WaitGroup
			once sync.Once
		)
		stopChurn := func() {
			once.Do(func() { close(stop) })
			wg.Wait()
		}
		for c := range churners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(c)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("%sk%d", prefix, rng.IntN(keys))
					l, err := b.Acquire(ctxFor(t), k, fmt.Sprintf("churner-%d", c), longTTL)
					if errIs(err, lease.ErrHeld) {
						continue
					}
					if err != nil {
						t.Errorf("churn: Acquire: %v", err)
						return
					}
					if rng.IntN(2) == 0 {
						if l, err = b.Renew(ctxFor(t), l, longTTL); err != nil {
							t.Errorf("churn: Renew: %v", err)
							return
						}
					}
					time.Sleep(200 * time.Microsecond)
					if err := b.Release(ctxFor(t), l); err != nil {
						t.Errorf("churn: Release: %v", err)
						return
					}
				}
			}()
		}
		time.Sleep(5 * time.Millisecond) // the watch starts in the thick of it
		if s.replay(t, b, w, prefix, stopChurn) {
			conclusive++
		}
		stopChurn()
		if t.Failed() {
			return
		}
		wit = wit.check(t, b, w)
		if t.Failed() {
			return
		}
	}
	if conclusive < 2 {
		t.Skipf("too slow to check: the watch fell behind and was cut off in %d of %d rounds", rounds-conclusive, rounds)
	}
}

// replay watches prefix while the churn goes on, then stops the churn and
// checks the replayed state against List. It reports false if the watch
// was cut off, which a reader that falls behind may see.
func (s *suite) replay(t *testing.T, b lease.Backend, w lease.Watcher, prefix string, stopChurn func()) bool {
	t.Helper()
	st := startWatch(t, w, prefix)
	defer st.stop()
	state := map[string]lease.Lease{}
	for _, l := range st.synced() {
		state[l.Key] = l
	}
	apply := func(it watchItem) {
		if err := replayEvent(state, it.ev); err != nil {
			t.Fatal(err)
		}
	}
	readFor := func(d time.Duration) (broke bool) {
		deadline := time.After(d)
		for {
			select {
			case it, ok := <-st.ch:
				if !ok {
					st.ended = true
					t.Fatal("the watch ended by itself")
				}
				if it.err != nil {
					if !errIs(it.err, lease.ErrUnavailable) {
						t.Fatalf("watch under churn: %v", it.err)
					}
					t.Logf("the watch was cut off under churn: %v", it.err)
					return true
				}
				if !it.ev.Lease.ID.IsZero() {
					t.Fatalf("%v event of %q carries the lease's secret ID (I4)", it.ev.Kind, it.ev.Lease.Key)
				}
				apply(it)
			case <-deadline:
				return false
			}
		}
	}
	if readFor(30 * time.Millisecond) {
		return false
	}
	stopChurn() // and let the last changes arrive
	want := map[string]lease.Token{}
	for _, l := range listAll(t, b, prefix) {
		want[l.Key] = l.Token
	}
	deadline := time.Now().Add(watchWait)
	for {
		got := map[string]lease.Token{}
		for k, l := range state {
			got[k] = l.Token
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch's state %v, replayed from its events, is not List's %v %v after the changes stopped", got, want, watchWait)
		}
		if readFor(10 * time.Millisecond) {
			return false
		}
	}
}

// replayEvent applies a change to state, the leases a watch has told are
// held, and says what is wrong with it: an Acquired of a key held, or a
// Renewed, Released or Expired of a lease not held, is a change missed or
// told twice; an Expired under the churn, whose leases all have longTTL, is
// a release or a change told as an expiry.
func replayEvent(state map[string]lease.Lease, ev lease.Event) error {
	k := ev.Lease.Key
	cur, held := state[k]
	switch ev.Kind {
	case lease.Acquired:
		if held {
			return fmt.Errorf("an Acquired of %q token %d while token %d holds it (replayed from the watch): a change missed or told twice", k, ev.Lease.Token, cur.Token)
		}
		state[k] = ev.Lease
	case lease.Renewed:
		if !held || cur.Token != ev.Lease.Token {
			return fmt.Errorf("a Renewed of %q token %d, but the watch told of token %d (held %v): a change missed or told twice", k, ev.Lease.Token, cur.Token, held)
		}
		state[k] = ev.Lease
	case lease.Released, lease.Expired:
		if !held || cur.Token != ev.Lease.Token {
			return fmt.Errorf("%v of %q token %d, but the watch told of token %d (held %v): a change missed or told twice", ev.Kind, k, ev.Lease.Token, cur.Token, held)
		}
		if ev.Kind == lease.Expired {
			return fmt.Errorf("an Expired of %q token %d, a lease of TTL %v that was released within milliseconds: a release told as an expiry", k, ev.Lease.Token, longTTL)
		}
		delete(state, k)
	default:
		return fmt.Errorf("%v event of %q after Synced", ev.Kind, k)
	}
	return nil
}

// witness is a watch replayed in the background across the rounds of
// watchSnapshotConsistent.
type witness struct {
	st     *stream
	prefix string
	suite  *suite
	mu     sync.Mutex
	state  map[string]lease.Lease
	err    error // a wrong event, or the break that ended it
	broke  bool  // cut off (ErrUnavailable): inconclusive, not wrong
	done   chan struct{}
}

func (s *suite) startWitness(t *testing.T, w lease.Watcher, prefix string) *witness {
	t.Helper()
	st := startWatch(t, w, prefix)
	wit := &witness{st: st, prefix: prefix, suite: s, state: map[string]lease.Lease{}, done: make(chan struct{})}
	for _, l := range st.synced() {
		wit.state[l.Key] = l
	}
	go func() {
		defer close(wit.done)
		for it := range st.ch {
			wit.mu.Lock()
			switch {
			case wit.err != nil || wit.broke:
			case it.err != nil && errIs(it.err, lease.ErrUnavailable):
				wit.broke = true
			case it.err != nil:
				wit.err = fmt.Errorf("the witness watch failed: %v", it.err)
			default:
				if err := replayEvent(wit.state, it.ev); err != nil {
					wit.err = fmt.Errorf("the witness watch, which started before the others: %v", err)
				}
			}
			wit.mu.Unlock()
		}
	}()
	return wit
}

// check waits until the witness's replayed state is List's, once the churn
// has stopped, and returns the witness to go on with: a new one if it was
// cut off.
func (wit *witness) check(t *testing.T, b lease.Backend, w lease.Watcher) *witness {
	t.Helper()
	want := map[string]lease.Token{}
	for l, err := range lease.All(ctxFor(t), b, wit.prefix) {
		if err != nil {
			t.Fatal(err)
		}
		want[l.Key] = l.Token
	}
	deadline := time.Now().Add(watchWait)
	for {
		wit.mu.Lock()
		err, broke := wit.err, wit.broke
		got := map[string]lease.Token{}
		for k, l := range wit.state {
			got[k] = l.Token
		}
		wit.mu.Unlock()
		switch {
		case err != nil:
			t.Fatal(err)
		case broke:
			t.Logf("the witness watch was cut off under churn; watching again")
			wit.st.stop()
			<-wit.done
			return wit.suite.startWitness(t, w, wit.prefix)
		case fmt.Sprint(got) == fmt.Sprint(want):
			return wit
		case time.Now().After(deadline):
			t.Fatalf("the witness watch's state %v, replayed from its events, is not List's %v %v after the changes stopped: the watches that started beside it disturbed it", got, want, watchWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// watchKeyExact: a lease.KeyWatcher's WatchKey(k) tells k alone — not the
// keys that extend it (k-cache/x, k2, k/slots/0), in its state or its
// changes — and their changes do not count against its buffer: far more
// renewals of them than the buffer holds leave it unbroken.
func (s *suite) watchKeyExact(t *testing.T, b lease.Backend, w lease.Watcher) {
	kw, ok := w.(lease.KeyWatcher)
	if !ok {
		t.Skip("not a lease.KeyWatcher")
	}
	k := key(t, "svc")
	var others []lease.Lease
	for _, o := range []string{k + "-cache/x", k + "2", k + "/slots/0"} {
		others = append(others, mustAcquire(t, b, o, "other", longTTL))
	}
	// Held through the renewals below, which take a while over HTTP.
	l := mustAcquire(t, b, k, "leader", time.Hour)
	st := startKeyWatch(t, kw, k)
	if held := st.synced(); len(held) != 1 || held[0].Key != k {
		t.Fatalf("WatchKey(%q) state %+v, want its one lease", k, held)
	}
	for i := range 2*s.cfg.watchBuffer + 100 {
		o := &others[i%len(others)]
		r, err := b.Renew(ctxFor(t), *o, longTTL)
		if err != nil {
			t.Fatal(err)
		}
		*o = r
	}
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	st.expect(lease.Released, l)
	again := mustAcquire(t, b, k, "next", longTTL)
	st.expect(lease.Acquired, again)
	for _, bad := range []string{"", strings.Repeat("k", lease.MaxKeyLen+1)} {
		for _, err := range kw.WatchKey(ctxFor(t), bad) {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("WatchKey(%.20q): %v, want ErrInvalid", bad, err)
			}
		}
	}
}
