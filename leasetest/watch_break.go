package leasetest

import (
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestWatchBreak checks what a broken watch of b does, b being a backend
// whose watch breakIt can break (a listener killed, a subscription dropped,
// a member cut off from its leader): the watch ends with one error matching
// lease.ErrUnavailable and nothing after it, rather than going quiet; and
// watching again, once heal (if not nil) has mended what breakIt broke,
// starts from the current state — a change made since the break included —
// and hears the changes that follow. The keys are under "w/" in b.
func TestWatchBreak(t *testing.T, b lease.Backend, breakIt, heal func(t *testing.T)) {
	t.Helper()
	w, ok := b.(lease.Watcher)
	if !ok {
		t.Fatalf("leasetest: TestWatchBreak: %T is not a lease.Watcher", b)
	}
	before := mustAcquire(t, b, "w/before", "a", time.Minute)
	st := startWatch(t, w, "w/")
	if held := st.synced(); len(held) != 1 || held[0].Key != before.Key || held[0].Token != before.Token {
		t.Fatalf("the current state: %+v, want only w/before, token %d", held, before.Token)
	}
	breakIt(t)
	if heal == nil {
		// A change the broken stream cannot tell.
		if err := b.Release(ctxFor(t), before); err != nil {
			t.Fatal(err)
		}
	}
	for {
		it, ok := st.next(watchWait, "the break")
		if !ok {
			t.Fatal("the watch ended without an error after it was broken: its reader cannot tell it missed changes")
		}
		if it.err != nil {
			if !errIs(it.err, lease.ErrUnavailable) {
				t.Fatalf("a broken watch: err = %v, want ErrUnavailable", it.err)
			}
			break
		}
		t.Logf("event before the break: %v %q", it.ev.Kind, it.ev.Lease.Key)
	}
	if it, ok := st.next(watchWait, "the end after the break"); ok {
		t.Fatalf("the watch goes on after its break: %v event, err %v", it.ev.Kind, it.err)
	}
	if heal != nil {
		heal(t)
		// A change made while nobody watched.
		if err := b.Release(ctxFor(t), before); err != nil {
			t.Fatal(err)
		}
	}
	after := mustAcquire(t, b, "w/after", "b", time.Minute)
	again := startWatch(t, w, "w/")
	if held := again.synced(); len(held) != 1 || held[0].Key != after.Key || held[0].Token != after.Token {
		t.Fatalf("watching again: the state is %+v, want only w/after, token %d (the current state)", held, after.Token)
	}
	if err := b.Release(ctxFor(t), after); err != nil {
		t.Fatal(err)
	}
	if it := again.event(watchWait, "the release of w/after"); it.ev.Kind != lease.Released || it.ev.Lease.Token != after.Token {
		t.Fatalf("watching again: %v token %d, want Released token %d: the new watch hears changes", it.ev.Kind, it.ev.Lease.Token, after.Token)
	}
}
