package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// waitChangeAsync runs WaitChange in a goroutine once the listener is up and
// the call has registered, and returns its result channel.
func waitChangeAsync(t *testing.T, s *Store, ctx context.Context, key string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.WaitChange(ctx, key) }()
	eventually(t, 10*time.Second, "WaitChange did not register", func() bool { return s.notify.waiting(key) == 1 })
	return done
}

func TestWaitChangeWakesOnRelease(t *testing.T) {
	db := newTestDB(t, 8)
	s, other := db.store(t), db.store(t) // the releaser need not be the waiter's Store
	ctx := testCtx(t)
	l, err := s.Acquire(ctx, "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, "k2", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	done := waitChangeAsync(t, s, ctx, "k")
	unrelated := waitChangeAsync(t, s, ctx, "k2")
	select {
	case err := <-done:
		t.Fatalf("WaitChange returned %v while the key was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := other.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitChange after release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChange did not return within 10 s of the release")
	}
	// The release of k woke only k's waiter.
	select {
	case err := <-unrelated:
		t.Fatalf("WaitChange on k2 returned %v on the release of k", err)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestWaitChangeContextEndUnregisters: a WaitChange that gave up leaves no
// waiter behind in the notifier (leasetest checks that it gives up).
func TestWaitChangeContextEndUnregisters(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	if _, err := s.Acquire(testCtx(t), "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.WaitChange(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitChange with an ending context: err = %v, want DeadlineExceeded", err)
	}
	if n := s.notify.waiting("k"); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}

// killListener terminates the backend of s's listening connection.
func killListener(t *testing.T, db testDB, s *Store) {
	t.Helper()
	var pid uint32
	eventually(t, 10*time.Second, "listener not connected", func() bool { pid = s.notify.pid.Load(); return pid != 0 })
	var ok bool
	if err := db.pool.QueryRow(testCtx(t), `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating listener backend %d: %v, %v", pid, ok, err)
	}
}

func TestWaitChangeFailsWhenNotificationsLost(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	l, err := s.Acquire(ctx, "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := waitChangeAsync(t, s, ctx, "k")
	old := s.notify.pid.Load()
	killListener(t, db, s)
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("WaitChange when its listener died: err = %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChange did not notice its listener die within 10 s")
	}
	// The listener comes back on a new connection and works again.
	eventually(t, 10*time.Second, "listener did not reconnect", func() bool {
		pid := s.notify.pid.Load()
		return pid != 0 && pid != old
	})
	done = waitChangeAsync(t, s, ctx, "k")
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitChange after reconnecting: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("release not heard after the listener reconnected")
	}
}

func TestClientAcquireSurvivesLostNotifications(t *testing.T) {
	// A lease.Client waiting on pgstore's notifications still gets the
	// lease after its listener is killed: it falls back to polling.
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	holder, err := s.Acquire(ctx, "job", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
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
		h, err := c.Acquire(ctx, "job", time.Minute)
		got <- result{h, err}
	}()
	eventually(t, 10*time.Second, "client is not waiting on a notification", func() bool { return s.notify.waiting("job") == 1 })
	killListener(t, db, s)
	// Released while nobody listens for this waiter.
	eventually(t, 10*time.Second, "waiter not dropped after the listener died", func() bool { return s.notify.waiting("job") == 0 })
	if err := s.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		defer r.h.Release(ctx)
		if r.h.Token() <= holder.Token {
			t.Fatalf("token %d not above the holder's %d", r.h.Token(), holder.Token)
		}
		t.Logf("acquired %v after the release", time.Since(released))
	case <-time.After(10 * time.Second):
		t.Fatal("waiting Client did not get the lease within 10 s of its release")
	}
}

func TestClientAcquireWakesOnReleaseAndExpiry(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	c, err := lease.NewClient(s, lease.WithOwner("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	// The holder dies without releasing: the waiter gets the key when the
	// lease expires, woken by WaitChange's expiry timer.
	if _, err := s.Acquire(ctx, "job", "crashed", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	h, err := c.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("Acquire across an expiry: %v", err)
	}
	// A second waiter is woken by the first one's release.
	got := make(chan error, 1)
	go func() {
		h2, err := c.Acquire(ctx, "job", time.Minute)
		if err == nil {
			err = h2.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "second waiter not waiting", func() bool { return s.notify.waiting("job") == 1 })
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter not served within 10 s of the release")
	}
}

// TestCloseLeavesCallersPool: Close of a Store from New fails its later
// operations but leaves the caller's pool open (leasetest checks that it
// ends pending waits).
func TestCloseLeavesCallersPool(t *testing.T) {
	db := newTestDB(t, 8)
	s, err := New(db.pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := s.Acquire(ctx, "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Get after Close: err = %v, want ErrUnavailable", err)
	}
	// The pool was the caller's and still works.
	if err := db.pool.Ping(ctx); err != nil {
		t.Fatalf("pool after Store.Close: %v", err)
	}
}
