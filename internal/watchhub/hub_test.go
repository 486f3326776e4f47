package watchhub

import (
	"context"
	"errors"
	"iter"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func lse(key string, tok lease.Token) lease.Lease {
	return lease.Lease{Key: key, Owner: "o", Token: tok, ID: lease.NewID(), TTL: time.Minute, Expires: time.Unix(100, 0)}
}

// pull starts a range over seq that the test steps through.
func pull(t *testing.T, seq iter.Seq2[lease.Event, error]) func() (lease.Event, error, bool) {
	next, stop := iter.Pull2(seq)
	t.Cleanup(stop)
	return next
}

type got struct {
	kind  lease.EventKind
	key   string
	token lease.Token
}

func want(t *testing.T, next func() (lease.Event, error, bool), w ...got) {
	t.Helper()
	for _, g := range w {
		ev, err, ok := next()
		if !ok || err != nil {
			t.Fatalf("want %v, got end=%v err=%v", g, !ok, err)
		}
		if ev.Kind != g.kind || ev.Lease.Key != g.key || ev.Lease.Token != g.token {
			t.Fatalf("got %v %q token %d, want %v", ev.Kind, ev.Lease.Key, ev.Lease.Token, g)
		}
		if !ev.Lease.ID.IsZero() {
			t.Fatalf("event %v %q carries an ID", ev.Kind, ev.Lease.Key)
		}
	}
}

// start subscribes and records the snapshot that snap gives, in order.
func start(h *Hub, snap func(s *Sub)) Start {
	return func(_ context.Context, sc Scope) (*Sub, error) {
		s, err := h.SubscribeScope(sc)
		if err != nil {
			return nil, err
		}
		if snap != nil {
			snap(s)
		}
		return s, nil
	}
}

func TestSnapshotThenChanges(t *testing.T) {
	h := New("test", DefaultBuffer)
	if h.Active() || h.Publish(lease.Acquired, lse("p/a", 1)) {
		t.Fatal("a hub nobody watches is active")
	}
	next := pull(t, Watch(context.Background(), "p/", start(h, func(s *Sub) {
		s.Held(lse("p/c", 3))
		s.Free("p/b")
		s.Held(lse("p/a", 1))
	})))
	want(t, next, got{lease.Held, "p/a", 1}, got{lease.Held, "p/c", 3}, got{lease.Synced, "", 0})
	if !h.Active() || !h.Watched("p/x") || h.Watched("q/x") || h.Watched("p") {
		t.Fatal("Watched does not follow the prefix")
	}
	if !h.Publish(lease.Renewed, lse("p/a", 1)) {
		t.Fatal("Publish to a watched key reports nobody")
	}
	if h.Publish(lease.Acquired, lse("p", 9)) || h.Publish(lease.Acquired, lse("q/a", 9)) {
		t.Fatal("Publish outside the prefix reports a watcher")
	}
	h.Publish(lease.Acquired, lse("p/b", 2))
	want(t, next, got{lease.Renewed, "p/a", 1}, got{lease.Acquired, "p/b", 2})
}

// TestChangesBeforeAKeysSnapshotDropped: a backend that locks per key
// records each key's snapshot while other keys change; changes a key had
// before its snapshot are in it and must not come again, and changes of
// keys that are in no snapshot all come.
func TestChangesBeforeAKeysSnapshotDropped(t *testing.T) {
	h := New("test", DefaultBuffer)
	next := pull(t, Watch(context.Background(), "", start(h, func(s *Sub) {
		h.Publish(lease.Acquired, lse("a", 1)) // before a's snapshot: in it
		h.Publish(lease.Acquired, lse("z", 5)) // z has no snapshot: a change
		s.Held(lse("a", 1))
		h.Publish(lease.Released, lse("a", 1)) // after: a change
		h.Publish(lease.Released, lse("b", 2)) // before b's snapshot
		s.Free("b")
	})))
	want(t, next, got{lease.Held, "a", 1}, got{lease.Synced, "", 0},
		got{lease.Acquired, "z", 5}, got{lease.Released, "a", 1})
	h.Publish(lease.Acquired, lse("b", 3))
	want(t, next, got{lease.Acquired, "b", 3})
}

func TestSlowReaderIsCutOffNotWaitedFor(t *testing.T) {
	const buffer = 4
	h := New("test", buffer)
	next := pull(t, Watch(context.Background(), "", start(h, nil)))
	want(t, next, got{lease.Synced, "", 0})
	for i := range buffer + 3 { // never blocks: the test would hang
		h.Publish(lease.Renewed, lse("k", lease.Token(i+1)))
	}
	for i := range buffer {
		want(t, next, got{lease.Renewed, "k", lease.Token(i + 1)})
	}
	_, err, ok := next()
	if !ok || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("after the buffer: ok=%v err=%v, want ErrUnavailable", ok, err)
	}
	if _, _, ok := next(); ok {
		t.Fatal("the watch goes on after its break")
	}
	if h.Active() {
		t.Fatal("a broken watch is still subscribed")
	}
}

func TestEndsQuietlyWithContext(t *testing.T) {
	h := New("test", DefaultBuffer)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []error)
	go func() {
		var errs []error
		for _, err := range Watch(ctx, "", start(h, nil)) {
			if err != nil {
				errs = append(errs, err)
			}
		}
		done <- errs
	}()
	poll.True(t, 10*time.Second, "the hub active", h.Active)
	cancel()
	select {
	case errs := <-done:
		if len(errs) > 0 {
			t.Fatalf("a watch whose context ended yields %v", errs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch goes on 10 s after its context ended")
	}
	if h.Active() {
		t.Fatal("a watch whose context ended is still subscribed")
	}
	for _, err := range Watch(ctx, "", start(h, nil)) {
		t.Fatalf("a watch with an ended context yields %v", err)
	}
}

func TestStopAndBadPrefix(t *testing.T) {
	h := New("test", DefaultBuffer)
	for ev := range Watch(context.Background(), "", start(h, nil)) {
		if ev.Kind == lease.Synced {
			break
		}
	}
	if h.Active() {
		t.Fatal("a watch the caller stopped is still subscribed")
	}
	var errs []error
	for _, err := range Watch(context.Background(), "a\x00", start(h, nil)) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], lease.ErrInvalid) {
		t.Fatalf("a bad prefix yields %v, want one ErrInvalid", errs)
	}
}

func TestCloseBreaksAfterBuffered(t *testing.T) {
	h := New("test", DefaultBuffer)
	next := pull(t, Watch(context.Background(), "", start(h, nil)))
	want(t, next, got{lease.Synced, "", 0})
	h.Publish(lease.Acquired, lse("k", 1))
	closed := errors.New("test: closed")
	h.Close(closed)
	want(t, next, got{lease.Acquired, "k", 1})
	if _, err, ok := next(); !ok || !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, closed) {
		t.Fatalf("after Close: ok=%v err=%v, want ErrUnavailable wrapping the Close's", ok, err)
	}
	var errs []error
	for _, err := range Watch(context.Background(), "", start(h, nil)) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], lease.ErrUnavailable) {
		t.Fatalf("a watch of a closed hub yields %v, want one ErrUnavailable", errs)
	}
}

func TestExpiriesDueOnceClockReachesExpiry(t *testing.T) {
	clk := fakeclock.New(time.Unix(1000, 0))
	var due [][]string
	x := NewExpiries(clk, func(keys []string) {
		keys = slices.Clone(keys)
		slices.Sort(keys)
		due = append(due, keys)
	})
	defer x.Stop()
	at := clk.Now()
	l := func(key string, tok lease.Token, ttl time.Duration) lease.Lease {
		return lease.Lease{Key: key, Token: tok, Expires: at.Add(ttl)}
	}
	x.Track(l("a", 1, 10*time.Second))
	x.Track(l("b", 2, 10*time.Second))
	x.Track(l("c", 3, 20*time.Second))
	x.Track(l("b", 2, 30*time.Second)) // renewed: its first expiry is stale
	clk.Advance(10*time.Second - 1)
	if len(due) != 0 {
		t.Fatalf("due before any expiry: %v", due)
	}
	clk.Advance(1)
	if len(due) != 1 || !slices.Equal(due[0], []string{"a"}) {
		t.Fatalf("at the first expiry: due %v, want [[a]]", due)
	}
	if !x.Take("a", 1) || x.Take("a", 1) || x.Take("c", 9) {
		t.Fatal("Take does not report each tracked lease's end once")
	}
	clk.Advance(20 * time.Second)
	if len(due) != 3 || !slices.Equal(due[1], []string{"c"}) || !slices.Equal(due[2], []string{"b"}) {
		t.Fatalf("due %v, want [[a] [c] [b]]", due)
	}
}

// TestExpiriesForgetStaleEntries: leases released or renewed long before
// their expiry leave no heap entry each behind until then.
func TestExpiriesForgetStaleEntries(t *testing.T) {
	clk := fakeclock.New(time.Unix(1000, 0))
	x := NewExpiries(clk, func([]string) {})
	defer x.Stop()
	for i := range 10_000 {
		l := lease.Lease{Key: "k", Token: lease.Token(i + 1), Expires: clk.Now().Add(time.Hour + time.Duration(i))}
		x.Track(l)
		if i%2 == 0 {
			x.Take(l.Key, l.Token)
		}
	}
	x.Track(lease.Lease{Key: "k", Token: 1, Expires: clk.Now().Add(time.Hour)})
	x.Track(lease.Lease{Key: "k", Token: 1, Expires: clk.Now().Add(time.Hour)}) // the same again
	x.mu.Lock()
	n := len(x.byTime)
	x.mu.Unlock()
	if n > 2*x.Len()+64 {
		t.Fatalf("%d heap entries for %d leases tracked", n, x.Len())
	}
}
