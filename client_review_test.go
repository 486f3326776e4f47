package lease_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/memstore"
)

// heldForever answers every Acquire with a holder whose lease expires 10 ms
// from now — a holder that keeps renewing — and counts the calls. It hides
// the backend's optional interfaces, so Client.Acquire polls. After limit
// calls it fails with errRunaway, so that a hot loop ends the test instead
// of spinning in the bubble forever.
type heldForever struct {
	lease.Backend
	calls atomic.Int64
	limit int64
}

var errRunaway = errors.New("test: too many Acquire calls")

func (b *heldForever) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if b.calls.Add(1) > b.limit {
		return lease.Lease{}, errRunaway
	}
	return lease.Lease{}, &lease.HeldError{Key: key, Owner: "holder", Token: 1, Expires: time.Now().Add(10 * time.Millisecond)}
}

// TestPollingBackoffWithAHugeMaximum: WithBackoff accepts any max >= min,
// "no cap to speak of" included. The backoff doubles on every poll even while
// the HeldError's expiry hint keeps each wait short, so with such a maximum it
// must not overflow into a negative or zero backoff: that turns the poll into
// a hot loop hammering the backend.
func TestPollingBackoffWithAHugeMaximum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &heldForever{Backend: memstore.New(), limit: 100_000}
		c := newClient(t, b, "waiter", lease.WithBackoff(time.Millisecond, time.Duration(math.MaxInt64)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Acquire(ctx, "job", time.Second)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire = %v, want DeadlineExceeded after 10s of polling", err)
		}
		// Each poll waits about the 11 ms the hint allows: ~910 in 10 s.
		if n := b.calls.Load(); n > 2000 {
			t.Errorf("%d Acquire calls in 10s against a holder expiring every 10ms: the poll is a hot loop", n)
		}
	})
}

// TestDriftMarginThatCannotFit: a drift margin larger than any TTL, or a NaN
// fraction, must be refused as invalid, not accepted and then turned into
// acquisitions that are granted, given back at once and reported as a late
// answer (ErrUnavailable). 2×margin overflowed in check, so a huge minimum
// passed it.
func TestDriftMarginThatCannotFit(t *testing.T) {
	store := memstore.New()
	if _, err := lease.NewClient(store, lease.WithDriftMargin(math.NaN(), 0)); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("NewClient with a NaN drift fraction: err = %v, want ErrInvalid", err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		fraction float64
		min      time.Duration
	}{
		{"min 2^62", 0, 1 << 62},
		{"min MaxInt64", 0, math.MaxInt64},
		{"fraction and min MaxInt64", 0.01, math.MaxInt64},
		{"min 3h", 0, 3 * time.Hour},
	} {
		c := newClient(t, store, "w", lease.WithDriftMargin(tc.fraction, tc.min))
		for _, acquire := range []func() (*lease.Hold, error){
			func() (*lease.Hold, error) { return c.TryAcquire(ctx, "k", time.Hour) },
			func() (*lease.Hold, error) { return c.Acquire(ctx, "k", time.Hour) },
		} {
			h, err := acquire()
			if h != nil {
				_ = h.Release(ctx)
			}
			if !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("%s: acquiring a 1h lease: err = %v, want ErrInvalid", tc.name, err)
			}
		}
		if got, err := store.Get(ctx, "k"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("%s: key held after refused acquisitions: %+v, %v", tc.name, got, err)
		}
	}
}
