package boltstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

type watchItem struct {
	ev  lease.Event
	err error
}

// watchItems reads a watch through a channel, closed at its end, and
// ends it when the test does.
func watchItems(t *testing.T, s *Store, prefix string) <-chan watchItem {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan watchItem)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for ev, err := range s.Watch(ctx, prefix) {
			select {
			case ch <- watchItem{ev, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

func nextItem(t *testing.T, ch <-chan watchItem) watchItem {
	t.Helper()
	select {
	case it, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return it
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return watchItem{}
	}
}

func nextEvent(t *testing.T, ch <-chan watchItem, kind lease.EventKind, key string) lease.Event {
	t.Helper()
	it := nextItem(t, ch)
	if it.err != nil || it.ev.Kind != kind || it.ev.Lease.Key != key {
		t.Fatalf("got %v of %q, err %v; want %v of %q", it.ev.Kind, it.ev.Lease.Key, it.err, kind, key)
	}
	return it.ev
}

// noEventYet checks that no event is out: the commit loop publishes in
// its order, so a marker's Acquired, in a later batch, must be the next.
func noEventYet(t *testing.T, s *Store, ch <-chan watchItem, why string) {
	t.Helper()
	m, err := s.Acquire(t.Context(), "w/marker", "m", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if it := nextItem(t, ch); it.err != nil || it.ev.Kind != lease.Acquired || it.ev.Lease.Key != "w/marker" {
		t.Fatalf("%v of %q (err %v) %s", it.ev.Kind, it.ev.Lease.Key, it.err, why)
	}
	if err := s.Release(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch, lease.Released, "w/marker")
}

// TestWatchTellsOnlyDurableChanges stalls the log write of an acquire's
// batch: watchers hear of the grant only once it is durable, as a crash
// before could issue its token again.
func TestWatchTellsOnlyDurableChanges(t *testing.T) {
	s := openInternal(t)
	ch := watchItems(t, s, "w/")
	nextEvent(t, ch, lease.Synced, "")
	stall := make(chan struct{})
	var unstall sync.Once
	t.Cleanup(func() { unstall.Do(func() { close(stall) }) }) // before Close's
	var hooked atomic.Bool
	s.syncHook = func() {
		if hooked.CompareAndSwap(false, true) {
			<-stall
		}
	}
	acquired := make(chan lease.Lease, 1)
	go func() {
		l, err := s.Acquire(context.Background(), "w/k", "o", time.Minute)
		if err != nil {
			t.Error(err)
		}
		acquired <- l
	}()
	waitStacks(t, "boltstore.(*Store).finish(", 1) // applied; its log write waits
	select {
	case it := <-ch:
		t.Fatalf("%v of %q told while its batch is not durable", it.ev.Kind, it.ev.Lease.Key)
	case <-time.After(50 * time.Millisecond):
	}
	unstall.Do(func() { close(stall) })
	ev := nextEvent(t, ch, lease.Acquired, "w/k")
	if l := <-acquired; ev.Lease.Token != l.Token {
		t.Fatalf("Acquired token %d, want %d", ev.Lease.Token, l.Token)
	}
}

// TestWatchExpiredOnStoreClock: Expired is out when the Advance that
// reaches the lease's expiry on the store's clock returns, not a
// nanosecond before, once, and not at an expiry a renewal moved on; a
// lease that expired before the watch began is in neither its state nor
// its changes.
func TestWatchExpiredOnStoreClock(t *testing.T) {
	clk := fakeclock.New(epoch)
	s := openFake(t, clk)
	ctx := t.Context()
	if _, err := s.Acquire(ctx, "w/gone", "o", time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	pre, err := s.Acquire(ctx, "w/pre", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch := watchItems(t, s, "w/")
	nextEvent(t, ch, lease.Held, "w/pre")
	nextEvent(t, ch, lease.Synced, "")
	l, err := s.Acquire(ctx, "w/new", "o", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch, lease.Acquired, "w/new")

	clk.Advance(10*time.Second - 1)
	noEventYet(t, s, ch, "a nanosecond before the first expiry")
	clk.Advance(1)
	if ev := nextEvent(t, ch, lease.Expired, "w/pre"); ev.Lease.Token != pre.Token {
		t.Fatalf("Expired of token %d, want %d", ev.Lease.Token, pre.Token)
	}
	r, err := s.Renew(ctx, l, 20*time.Second) // now expires at 30 s
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch, lease.Renewed, "w/new")
	clk.Advance(10 * time.Second)
	noEventYet(t, s, ch, "at the expiry a renewal moved on")
	clk.Advance(10*time.Second - 1)
	noEventYet(t, s, ch, "a nanosecond before the renewed expiry")
	clk.Advance(1)
	if ev := nextEvent(t, ch, lease.Expired, "w/new"); ev.Lease.Token != r.Token || !ev.Lease.Expires.Equal(r.Expires) {
		t.Fatalf("Expired %+v, want the renewed lease %+v", ev.Lease, r)
	}
	// Its record stays until the key is written; a new holder's Acquire
	// meets it, and must not tell of it again.
	if _, err := s.Acquire(ctx, "w/new", "o2", time.Minute); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch, lease.Acquired, "w/new")
	noEventYet(t, s, ch, "after every lease's one Expired")
	if n := s.watch.expiries.Len(); n != 1 {
		t.Fatalf("%d leases tracked for expiry, want 1 (the new holder's)", n)
	}
}

// TestWatchEndsWithTheStore: Close and a failure that stops the store cut
// watchers off with an error matching ErrUnavailable (the failure's, for
// a failure), and a watch of a closed store fails so at once.
func TestWatchEndsWithTheStore(t *testing.T) {
	t.Run("Close", func(t *testing.T) {
		s := openInternal(t)
		ch := watchItems(t, s, "")
		nextEvent(t, ch, lease.Synced, "")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if it := nextItem(t, ch); !errors.Is(it.err, lease.ErrUnavailable) {
			t.Fatalf("a watch across Close: %v event, err %v; want ErrUnavailable", it.ev.Kind, it.err)
		}
		var errs []error
		for _, err := range s.Watch(t.Context(), "") {
			errs = append(errs, err)
		}
		if len(errs) != 1 || !errors.Is(errs[0], lease.ErrUnavailable) {
			t.Fatalf("a watch after Close yields %v, want one error matching ErrUnavailable", errs)
		}
	})
	t.Run("Failure", func(t *testing.T) {
		s, err := Open(filepath.Join(t.TempDir(), "lease.db"), func(c *config) error {
			c.boltOptions = func(o *bolt.Options) { o.MaxSize = 64 << 10 }
			c.checkpointAlways = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		ch := watchItems(t, s, "w/")
		nextEvent(t, ch, lease.Synced, "")
		for i := 0; ; i++ {
			if i == 1000 {
				t.Fatal("1000 acquisitions fit in a 64 KiB file")
			}
			if _, err := s.Acquire(t.Context(), fmt.Sprintf("%0500d", i), "o", time.Minute); err != nil {
				break
			}
		}
		if it := nextItem(t, ch); !errors.Is(it.err, lease.ErrUnavailable) || !errors.Is(it.err, berrors.ErrMaxSizeReached) {
			t.Fatalf("a watch across a failure: %v event, err %v; want the failure", it.ev.Kind, it.err)
		}
	})
}

// TestWatchForgetsLeasesNobodyWatches: leases a watch was told of are
// forgotten by their expiry check once nobody watches, whether renewed or
// released since, so a store watched once keeps nothing for it.
func TestWatchForgetsLeasesNobodyWatches(t *testing.T) {
	clk := fakeclock.New(epoch)
	s := openFake(t, clk)
	ctx := t.Context()
	wctx, cancel := context.WithCancel(ctx)
	var ls []lease.Lease
	for ev, err := range s.Watch(wctx, "w/") {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != lease.Synced {
			continue
		}
		for _, k := range []string{"w/renewed", "w/released"} {
			l, err := s.Acquire(ctx, k, "o", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		break
	}
	cancel()
	if n := s.watch.expiries.Len(); n != 2 {
		t.Fatalf("%d leases tracked while watched, want 2", n)
	}
	if _, err := s.Renew(ctx, ls[0], time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, ls[1]); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second) // their first expiry: the check finds nobody watching
	if n := s.watch.expiries.Len(); n != 0 {
		t.Fatalf("%d leases tracked after their checks with nobody watching, want 0", n)
	}
}
