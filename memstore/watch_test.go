package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// events reads a watch through a channel and ends it when the test does.
func events(t *testing.T, s *memstore.Store, prefix string) <-chan lease.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan lease.Event)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range s.Watch(ctx, prefix) {
			if err != nil {
				t.Errorf("watch: %v", err)
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

func next(t *testing.T, ch <-chan lease.Event, kind lease.EventKind, key string) lease.Event {
	t.Helper()
	select {
	case ev := <-ch:
		if ev.Kind != kind || ev.Lease.Key != key {
			t.Fatalf("event %v of %q, want %v of %q", ev.Kind, ev.Lease.Key, kind, key)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no event within 10 s, want %v of %q", kind, key)
		return lease.Event{}
	}
}

// nothingYet checks that no event is out: a watch of this store gets its
// events in the order they were published, so a marker's Acquired must be
// the next.
func nothingYet(t *testing.T, s *memstore.Store, ch <-chan lease.Event, why string) {
	t.Helper()
	ctx := context.Background()
	m, err := s.Acquire(ctx, "w/marker", "m", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.Kind != lease.Acquired || ev.Lease.Key != "w/marker" {
			t.Fatalf("%v event of %q %s", ev.Kind, ev.Lease.Key, why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the marker within 10 s")
	}
	if err := s.Release(ctx, m); err != nil {
		t.Fatal(err)
	}
	next(t, ch, lease.Released, "w/marker")
}

// TestWatchExpiredWhenClockReachesExpiry: on the store's clock, Expired is
// published in the call that moves the clock to the lease's expiry, not a
// nanosecond before, once, and not at an expiry a renewal moved on; a
// lease that expired before the watch began is in neither the state nor
// the changes.
func TestWatchExpiredWhenClockReachesExpiry(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.Unix(1_000_000, 0))
	s := memtest.New(t, memstore.WithClock(clk))
	if _, err := s.Acquire(ctx, "w/gone", "o", time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	pre, err := s.Acquire(ctx, "w/pre", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch := events(t, s, "w/")
	next(t, ch, lease.Held, "w/pre")
	next(t, ch, lease.Synced, "")
	l, err := s.Acquire(ctx, "w/new", "o", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, lease.Acquired, "w/new")

	clk.Advance(10*time.Second - 1)
	nothingYet(t, s, ch, "a nanosecond before the first expiry")
	clk.Advance(1)
	ev := next(t, ch, lease.Expired, "w/pre")
	if ev.Lease.Token != pre.Token || !clk.Now().Equal(pre.Expires) {
		t.Fatalf("Expired of token %d at %v, want token %d at %v", ev.Lease.Token, clk.Now(), pre.Token, pre.Expires)
	}

	r, err := s.Renew(ctx, l, 20*time.Second) // at 10 s: now expires at 30 s
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, lease.Renewed, "w/new")
	clk.Advance(10 * time.Second) // its first expiry
	nothingYet(t, s, ch, "at the expiry a renewal moved on")
	clk.Advance(10*time.Second - 1)
	nothingYet(t, s, ch, "a nanosecond before the renewed expiry")
	clk.Advance(1)
	if ev := next(t, ch, lease.Expired, "w/new"); ev.Lease.Token != r.Token || !ev.Lease.Expires.Equal(r.Expires) {
		t.Fatalf("Expired %+v, want the renewed lease %+v", ev.Lease, r)
	}
	clk.Advance(time.Hour)
	nothingYet(t, s, ch, "after every lease's one Expired")
}

// TestWatchExpiredTimedWhileNobodyTouchesTheKey: on the real clock too,
// Expired comes by itself, without a call on the key, and not before the
// TTL.
func TestWatchExpiredTimedWhileNobodyTouchesTheKey(t *testing.T) {
	s := memtest.New(t)
	ch := events(t, s, "w/")
	next(t, ch, lease.Synced, "")
	start := time.Now()
	l, err := s.Acquire(context.Background(), "w/k", "o", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, lease.Acquired, "w/k")
	ev := next(t, ch, lease.Expired, "w/k")
	if ev.Lease.Token != l.Token {
		t.Fatalf("Expired token %d, want %d", ev.Lease.Token, l.Token)
	}
	if since := time.Since(start); since < 20*time.Millisecond {
		t.Fatalf("Expired %v after the Acquire of a 20ms lease", since)
	}
}

// TestWatchReleaseStopsTimer: a watched lease's expiry is timed, and its
// release stops the timer, so a store watched through many short-lived
// keys keeps no timer (nor entry) for each until its TTL would have run.
func TestWatchReleaseStopsTimer(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.Unix(1_000_000, 0))
	s := memtest.New(t, memstore.WithClock(clk))
	ch := events(t, s, "w/")
	next(t, ch, lease.Synced, "")
	l, err := s.Acquire(ctx, "w/k", "o", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch, lease.Acquired, "w/k")
	if at := clk.Pending(); len(at) != 1 || !at[0].Equal(l.Expires) {
		t.Fatalf("timers pending at %v, want one at the expiry %v", at, l.Expires)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	next(t, ch, lease.Released, "w/k")
	if at := clk.Pending(); len(at) != 0 {
		t.Fatalf("timers still pending at %v after the release", at)
	}
}
