package pgstore

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestWatchBreaksWhenListenerKilled: the server ends the listening
// connection (pg_terminate_backend), so changes may go unheard; every
// watch must say so with ErrUnavailable rather than go quiet, and a new
// watch must start from the current state, changes made meanwhile
// included.
func TestWatchBreaksWhenListenerKilled(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	before, err := s.Acquire(ctx, "w/before", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, stop := pullWatch(s.Watch(wctx, "w/"))
	defer stop()
	if ev := mustNext(t, next); ev.Kind != lease.Held || ev.Lease.Key != "w/before" {
		t.Fatalf("first event %v %q, want Held w/before", ev.Kind, ev.Lease.Key)
	}
	if ev := mustNext(t, next); ev.Kind != lease.Synced {
		t.Fatalf("got %v, want Synced", ev.Kind)
	}
	s.watch.mu.Lock()
	pid := s.watch.pid
	s.watch.mu.Unlock()
	var killed bool
	if err := db.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, killed, err)
	}
	// A change the dead listener cannot hear.
	if err := s.Release(ctx, before); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err, ok := nextWithin(t, next)
		if !ok {
			t.Fatal("the watch ended without an error after its listener was killed")
		}
		if err != nil {
			if !errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			break
		}
		t.Logf("event before the break: %v %q", ev.Kind, ev.Lease.Key)
	}
	if _, _, ok := nextWithin(t, next); ok {
		t.Fatal("the watch goes on after its break")
	}
	after, err := s.Acquire(ctx, "w/after", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next2, stop2 := pullWatch(s.Watch(wctx, "w/"))
	defer stop2()
	if ev := mustNext(t, next2); ev.Kind != lease.Held || ev.Lease.Key != "w/after" || ev.Lease.Token != after.Token {
		t.Fatalf("watching again: %v %q token %d, want Held w/after token %d (the current state)", ev.Kind, ev.Lease.Key, ev.Lease.Token, after.Token)
	}
	if ev := mustNext(t, next2); ev.Kind != lease.Synced {
		t.Fatalf("got %v, want Synced", ev.Kind)
	}
	if err := s.Release(ctx, after); err != nil {
		t.Fatal(err)
	}
	if ev := mustNext(t, next2); ev.Kind != lease.Released || ev.Lease.Token != after.Token {
		t.Fatalf("got %v token %d, want Released token %d: the new listener hears changes", ev.Kind, ev.Lease.Token, after.Token)
	}
}

// pullWatch starts a range over seq that the test steps through.
func pullWatch(seq iter.Seq2[lease.Event, error]) (func() (lease.Event, error, bool), func()) {
	return iter.Pull2(seq)
}

// mustNext returns the next event, failing on an error, the end, or
// nothing within 10 s.
func mustNext(t *testing.T, next func() (lease.Event, error, bool)) lease.Event {
	t.Helper()
	ev, err, ok := nextWithin(t, next)
	if !ok || err != nil {
		t.Fatalf("watch: end=%v err=%v, want an event", !ok, err)
	}
	return ev
}

// nextWithin returns the next item, failing if nothing comes within 10 s.
func nextWithin(t *testing.T, next func() (lease.Event, error, bool)) (lease.Event, error, bool) {
	t.Helper()
	type item struct {
		ev  lease.Event
		err error
		ok  bool
	}
	ch := make(chan item, 1)
	go func() {
		ev, err, ok := next()
		ch <- item{ev, err, ok}
	}()
	select {
	case it := <-ch:
		return it.ev, it.err, it.ok
	case <-time.After(10 * time.Second):
		t.Fatal("watch: nothing within 10 s")
		return lease.Event{}, nil, false
	}
}
