package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// killPubSub cuts the server side of every subscription connection.
func killPubSub(t *testing.T, srv *redistest.Server) {
	t.Helper()
	srv.RequireOwned(t, "cutting every subscription")
	n, err := srv.Client(t).ClientKillByFilter(ctxFor(t), "TYPE", "pubsub").Result()
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	if n == 0 {
		t.Fatal("CLIENT KILL TYPE pubsub killed no connection: the store is not subscribed")
	}
}

// waitSubscribed waits until WaitChange works, i.e. the store's
// subscription is (again) confirmed: on a free key it then returns nil.
func waitSubscribed(t *testing.T, s *redisstore.Store) {
	t.Helper()
	poll.Until(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctxFor(t), time.Second)
		defer cancel()
		if err := s.WaitChange(ctx, "free/never-held"); err != nil {
			return fmt.Errorf("store not subscribed: %w", err)
		}
		return nil
	})
}

// waitForWaiter waits until a WaitChange on key has registered for its release
// (see Store.Waiting), so the test goes on along the path it means to test.
func waitForWaiter(t *testing.T, s *redisstore.Store, key string) {
	t.Helper()
	poll.True(t, 10*time.Second, "a waiter registered on "+key, func() bool {
		ok, err := s.Waiting(ctxFor(t), key)
		if err != nil {
			t.Fatalf("Waiting(%q): %v", key, err)
		}
		return ok
	})
}

// TestWaitChangeWakesOnItsKeyOnly: a release wakes the waiters of its key,
// and not those of another (leasetest checks the rest of WaitChange).
func TestWaitChangeWakesOnItsKeyOnly(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv)
	ctx := ctxFor(t)
	l, err := s.Acquire(ctx, "wc/release", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- s.WaitChange(ctx, "wc/release") }()
	// A release on another key must not wake it.
	other, err := s.Acquire(ctx, "wc/other", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waitForWaiter(t, s, "wc/release")
	if err := s.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		t.Fatalf("woken by a release of another key: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitChange: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not woken within 10 s of the release")
	}
}

// TestWaitChangeSubscriptionDrop cuts the store's subscription: a pending
// WaitChange returns an error (so lease.Client falls back to polling), a
// lease.Client waiting through the drop still gets the lease once it is
// released, and the store resubscribes by itself.
func TestWaitChangeSubscriptionDrop(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "cutting every subscription")
	s := open(t, srv)
	ctx := ctxFor(t)
	const k = "drop/key"
	holder, err := s.Acquire(ctx, k, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, s)

	// 1. A pending WaitChange learns of the drop.
	woke := make(chan error, 1)
	go func() { woke <- s.WaitChange(ctx, k) }()
	waitForWaiter(t, s, k)
	killPubSub(t, srv)
	select {
	case err := <-woke:
		if err == nil || !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("WaitChange across a dropped subscription: err = %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChange did not notice the dropped subscription within 10 s")
	}

	// 2. A lease.Client waiting while the subscription drops still gets the
	// lease after the release.
	waitSubscribed(t, s)
	c, err := lease.NewClient(s, lease.WithOwner("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		h   *lease.Hold
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := c.Acquire(ctx, k, time.Minute)
		got <- result{h, err}
	}()
	waitForWaiter(t, s, k)
	drops := s.SubscriptionDrops()
	killPubSub(t, srv)
	// Until the store has seen its subscription drop (and told the
	// waiter), so that the release finds no subscription to tell.
	poll.True(t, 10*time.Second, "the store saw its subscription drop", func() bool { return s.SubscriptionDrops() > drops })
	if err := s.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Client.Acquire across a dropped subscription: %v", r.err)
		}
		if r.h.Token() <= holder.Token {
			t.Errorf("waiter token %d not above %d", r.h.Token(), holder.Token)
		}
		if err := r.h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("waiting Client.Acquire did not get the released lease within 15 s")
	}

	// 3. Resubscribed, releases wake waiters again.
	waitSubscribed(t, s)
	l, err := s.Acquire(ctx, k, "again", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	go func() { woke <- s.WaitChange(ctx, k) }()
	waitForWaiter(t, s, k)
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitChange after resubscribing: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after resubscribing")
	}
}

// TestWaitChangeServerDown checks that waiting through a server restart
// reports the drop and that the store resubscribes once the server is back.
func TestWaitChangeServerDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "stopping the server")
	s := open(t, srv)
	ctx := ctxFor(t)
	const k = "down/key"
	if _, err := s.Acquire(ctx, k, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, s)
	woke := make(chan error, 1)
	go func() { woke <- s.WaitChange(ctx, k) }()
	waitForWaiter(t, s, k)
	srv.Stop(t)
	select {
	case err := <-woke:
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("WaitChange while the server stops: err = %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChange did not notice the server stopping within 10 s")
	}
	srv.Restart(t)
	waitSubscribed(t, s)
}

// TestWaitChangeHonoursContextWhileSubscribing checks that WaitChange
// returns when its context ends even while the store's first SUBSCRIBE
// cannot get an answer from the server (paused here, as a hung or
// unreachable server would be): the subscription must not be opened with
// the store's lock held, which kept every WaitChange waiting for the
// connection's timeouts (5 s) whatever its context said.
func TestWaitChangeHonoursContextWhileSubscribing(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "pausing the server")
	s := open(t, srv)
	const pause = 4 * time.Second
	if err := srv.Client(t).Do(ctxFor(t), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	errs := make(chan error, 2)
	for range 2 { // the first opens the subscription, the second finds it opening
		go func() {
			ctx, cancel := context.WithTimeout(ctxFor(t), 200*time.Millisecond)
			defer cancel()
			errs <- s.WaitChange(ctx, "paused/key")
		}()
	}
	for range 2 {
		err := <-errs
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitChange while the server is paused: err = %v, want DeadlineExceeded", err)
		}
	}
	if d := time.Since(paused); d > 2*time.Second {
		t.Fatalf("WaitChange with a 200 ms context returned after %v, while the server was paused for %v", d, pause)
	}
	// Once the server answers again, the store subscribes by itself.
	waitSubscribed(t, s)
}
