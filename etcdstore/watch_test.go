package etcdstore_test

import (
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/etcdtest"
)

// TestWatchBreaksWhenMemberLosesLeader: the member a watch is connected
// to loses its leader (the other two are killed), so it can no longer tell
// what the cluster commits; the watch must say so with ErrUnavailable
// rather than go quiet, and once the cluster is whole again a new watch
// must start from the current state.
func TestWatchBreaksWhenMemberLosesLeader(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	other := (leader + 2) % 3
	prefix := uniquePrefix(t)
	s := open(t, []string{c.Endpoint(follower)}, etcdstore.WithPrefix(prefix))
	ctx := ctxFor(t)
	before, err := s.Acquire(ctx, "w/before", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next, stop := iter.Pull2(s.Watch(ctx, "w/"))
	defer stop()
	if ev := mustNext(t, next); ev.Kind != lease.Held || ev.Lease.Key != "w/before" {
		t.Fatalf("first event %v %q, want Held w/before", ev.Kind, ev.Lease.Key)
	}
	if ev := mustNext(t, next); ev.Kind != lease.Synced {
		t.Fatalf("got %v, want Synced", ev.Kind)
	}
	c.Kill(t, leader)
	c.Kill(t, other)
	for {
		ev, err, ok := nextWithin(t, next)
		if !ok {
			t.Fatal("the watch ended without an error after its member lost its leader")
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
	c.Restart(t, leader)
	c.Restart(t, other)
	c.Leader(t)
	// A change made while nobody watched.
	if err := s.Release(ctx, before); err != nil {
		t.Fatal(err)
	}
	after, err := s.Acquire(ctx, "w/after", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	next2, stop2 := iter.Pull2(s.Watch(ctx, "w/"))
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
		t.Fatalf("got %v token %d, want Released token %d", ev.Kind, ev.Lease.Token, after.Token)
	}
}

// mustNext returns the next event, failing on an error, the end, or
// nothing within 20 s.
func mustNext(t *testing.T, next func() (lease.Event, error, bool)) lease.Event {
	t.Helper()
	ev, err, ok := nextWithin(t, next)
	if !ok || err != nil {
		t.Fatalf("watch: end=%v err=%v, want an event", !ok, err)
	}
	return ev
}

// nextWithin returns the next item, failing if nothing comes within 20 s.
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
	case <-time.After(20 * time.Second):
		t.Fatal("watch: nothing within 20 s")
		return lease.Event{}, nil, false
	}
}
