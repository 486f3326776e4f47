//go:build !race

package memstore

// Allocation counts mean nothing under the race detector, whose
// instrumentation allocates on its own account: this file is built
// without it only, and make test runs it in its alloc-check target.

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestPairDoesNotAllocate: once a key's entry exists, an acquire+release
// pair allocates nothing (issue 2's hot-path goal).
func TestPairDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	pair := func() {
		l, err := s.Acquire(ctx, "job", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	pair() // creates the entry
	if n := testing.AllocsPerRun(100, pair); n != 0 {
		t.Errorf("acquire+release allocates %v times, want 0", n)
	}
}

// TestPairDoesNotAllocateAfterWatch: a store watched once costs nothing
// once the watch has ended, on the keys it watched too, and on a lease
// held across its end, whose expiry the watch had timed.
func TestPairDoesNotAllocateAfterWatch(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	pair := func() {
		l, err := s.Acquire(ctx, "job", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	synced, released := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		for ev := range s.Watch(wctx, "") {
			switch ev.Kind {
			case lease.Synced:
				close(synced)
			case lease.Released:
				return
			}
		}
	}()
	<-synced
	held, err := s.Acquire(ctx, "held", "w", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair() // watched: their expiries are timed
	<-released
	cancel()
	if n := testing.AllocsPerRun(100, pair); n != 0 {
		t.Errorf("acquire+release after a watch ended allocates %v times, want 0", n)
	}
	// Each renewal moves the expiry earlier than the timer the watch set.
	ttl := time.Hour
	renew := func() {
		ttl -= time.Second
		if held, err = s.Renew(ctx, held, ttl); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, renew); n != 0 {
		t.Errorf("renewing a lease held across a watch's end allocates %v times, want 0", n)
	}
}
