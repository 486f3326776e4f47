package boltstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

var epoch = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func openFake(t *testing.T, clk lease.Clock) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "lease.db"), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// queued waits until key has n waiters.
func queued(t *testing.T, s *Store, key string, n int) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() error {
		s.wmu.Lock()
		got := len(s.queueOf(key))
		s.wmu.Unlock()
		if got != n {
			return fmt.Errorf("%d waiters on %q, want %d", got, key, n)
		}
		return nil
	})
}

type waitResult struct {
	i int
	l lease.Lease
	e error
}

// startWaiters queues n waiters on key, one after the other.
func startWaiters(t *testing.T, s *Store, ctx context.Context, key string, n int, ttl time.Duration) chan waitResult {
	t.Helper()
	results := make(chan waitResult, n)
	for i := range n {
		go func() {
			l, err := s.AcquireWait(ctx, key, fmt.Sprintf("waiter-%d", i), ttl)
			results <- waitResult{i, l, err}
		}()
		queued(t, s, key, i+1)
	}
	return results
}

func next(t *testing.T, results chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-results:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter served within 10 s")
		return waitResult{}
	}
}

func none(t *testing.T, results chan waitResult) {
	t.Helper()
	select {
	case r := <-results:
		t.Fatalf("waiter %d served early: %+v, %v", r.i, r.l, r.e)
	default:
	}
}

// TestWaitersServedAtExpiry: on the store's clock, each expiry hands the key
// to the next waiter in arrival order, with a new token.
func TestWaitersServedAtExpiry(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	s := openFake(t, clk)
	holder, err := s.Acquire(t.Context(), "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	results := startWaiters(t, s, t.Context(), "k", 3, time.Minute)
	prev := holder
	for want := range 3 {
		clk.Advance(time.Minute - time.Millisecond)
		none(t, results)
		clk.Advance(time.Millisecond) // the timer's commit is done when Advance returns
		r := next(t, results)
		if r.e != nil || r.i != want {
			t.Fatalf("served waiter %d (%v), want waiter %d", r.i, r.e, want)
		}
		if r.l.Token <= prev.Token || !r.l.Expires.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("waiter lease %+v after %+v", r.l, prev)
		}
		prev = r.l
	}
}

// TestWaiterFollowsRenew: a renewed lease is not handed over at its first
// expiry, and a renew that shortens it hands over earlier.
func TestWaiterFollowsRenew(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	s := openFake(t, clk)
	holder, err := s.Acquire(t.Context(), "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	results := startWaiters(t, s, t.Context(), "k", 2, time.Minute)
	clk.Advance(30 * time.Second)
	if _, err := s.Renew(t.Context(), holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.Advance(40 * time.Second) // past the first expiry, before the renewed one
	none(t, results)
	if _, err := s.Get(t.Context(), "k"); err != nil {
		t.Fatalf("renewed lease gone: %v", err)
	}
	clk.Advance(20 * time.Second)
	if r := next(t, results); r.i != 0 || r.e != nil {
		t.Fatalf("served waiter %d (%v), want 0", r.i, r.e)
	} else if _, err := s.Renew(t.Context(), r.l, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second) // the shortened lease expires, long before the minute
	if r := next(t, results); r.i != 1 || r.e != nil {
		t.Fatalf("served waiter %d (%v), want 1", r.i, r.e)
	}
}

// stoppedTimers is a clock whose timers never fire, to see what happens
// when a caller observes an expiry before the store's timer does.
type stoppedTimers struct{ *fakeclock.Clock }

type noTimer struct{}

func (noTimer) Stop() bool { return true }

func (stoppedTimers) AfterFunc(time.Duration, func()) lease.Timer { return noTimer{} }

// TestNoBargingAtExpiry: a try that finds the lease expired while others
// wait hands the key to the first waiter instead of taking it.
func TestNoBargingAtExpiry(t *testing.T) {
	t.Parallel()
	clk := stoppedTimers{fakeclock.New(epoch)}
	s := openFake(t, clk)
	if _, err := s.Acquire(t.Context(), "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	results := startWaiters(t, s, t.Context(), "k", 1, time.Minute)
	clk.Advance(2 * time.Minute)
	_, err := s.Acquire(t.Context(), "k", "barger", time.Minute)
	var he *lease.HeldError
	if !errors.As(err, &he) || he.Owner != "waiter-0" {
		t.Fatalf("barging Acquire: %v, want held by waiter-0", err)
	}
	if r := next(t, results); r.e != nil || r.l.Token != he.Token {
		t.Fatalf("waiter: %+v, %v; want token %d", r.l, r.e, he.Token)
	}
}

// TestWaiterGivesUp: a waiter whose context ends leaves the queue and holds
// nothing; one handed the key as it gave up gives it back.
func TestWaiterGivesUp(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	s := openFake(t, clk)
	holder, err := s.Acquire(t.Context(), "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithCancelCause(t.Context())
	results := startWaiters(t, s, ctx, "k", 1, time.Minute)
	cancel(cause)
	if r := next(t, results); !errors.Is(r.e, cause) {
		t.Fatalf("cancelled waiter: %+v, %v; want the context's cause", r.l, r.e)
	}
	queued(t, s, "k", 0)
	if err := s.Release(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get after the only waiter left and the holder released: %v", err)
	}
}

// TestCloseFailsWaiters: Close ends waiting with ErrUnavailable.
func TestCloseFailsWaiters(t *testing.T) {
	t.Parallel()
	s := openFake(t, fakeclock.New(epoch))
	if _, err := s.Acquire(t.Context(), "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	results := startWaiters(t, s, t.Context(), "k", 2, time.Minute)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := next(t, results); !errors.Is(r.e, lease.ErrUnavailable) {
			t.Fatalf("waiter %d after Close: %v, want ErrUnavailable", r.i, r.e)
		}
	}
}

// TestFailureFailsWaiters: once the store fails (here a checkpoint hits
// bbolt's MaxSize, as on a full disk), its queued waiters are answered with
// the failure at once, not when Close or their context ends their wait.
func TestFailureFailsWaiters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path, WithClock(fakeclock.New(epoch)), func(c *config) error {
		c.checkpointAlways = true
		c.boltOptions = func(o *bolt.Options) { o.MaxSize = 64 << 10 }
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Acquire(t.Context(), "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	results := startWaiters(t, s, t.Context(), "k", 2, time.Minute)
	var failure error
	for i := 0; failure == nil; i++ {
		if i == 1000 {
			t.Fatal("1000 acquisitions fit in a 64 KiB file")
		}
		_, failure = s.Acquire(t.Context(), fmt.Sprintf("%0500d", i), "o", time.Minute)
	}
	if !errors.Is(failure, berrors.ErrMaxSizeReached) {
		t.Fatalf("failed checkpoint: %v, want bbolt's ErrMaxSizeReached", failure)
	}
	for range 2 {
		if r := next(t, results); !errors.Is(r.e, lease.ErrUnavailable) || !errors.Is(r.e, berrors.ErrMaxSizeReached) {
			t.Fatalf("waiter %d after the store failed: %+v, %v; want the failure", r.i, r.l, r.e)
		}
	}
}

// TestExpirySurvivesRestart: expiry is stored as absolute time on the
// store's clock, so a held lease is still held after reopening, until then.
func TestExpirySurvivesRestart(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(epoch)
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(t.Context(), "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second) // "down" for most of the TTL
	if s, err = Open(path, WithClock(clk)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	got, err := s.Get(t.Context(), "k")
	if err != nil || got.Token != l.Token || !got.Expires.Equal(l.Expires) || got.Owner != "holder" || got.TTL != time.Minute {
		t.Fatalf("after reopen Get = %+v, %v; want %+v", got, err, l)
	}
	clk.Advance(time.Second)
	if _, err := s.Get(t.Context(), "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("lease outlived its stored expiry: %v", err)
	}
	if _, err := s.Renew(t.Context(), l, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Renew after expiry across restart: %v", err)
	}
	n, err := s.Acquire(t.Context(), "k", "next", time.Minute)
	if err != nil || n.Token <= l.Token {
		t.Fatalf("Acquire after expiry: %+v, %v; want a token above %d", n, err, l.Token)
	}
}
