package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// farBackend is a backend a long way off, or on a loaded host: every
// acquire is answered 100 ms after the backend made it — 100 ms of the
// backend's own clock, which the double moves on, so that the leases age
// as they would without the test waiting. Its batches renew one lease
// after another, as lease.RenewAll does without one.
type farBackend struct {
	lease.Backend
	clk *fakeclock.Clock
}

// farAnswer is how long a farBackend's acquire takes to come back.
const farAnswer = 100 * time.Millisecond

func (f farBackend) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := f.Backend.Acquire(ctx, key, owner, ttl)
	f.clk.Advance(farAnswer)
	return l, err
}

func (f farBackend) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	return lease.RenewAll(ctx, f.Backend, renewals)
}

// TestRenewBatchFarAway: the RenewBatch checks judge the batch, not the
// way to the backend. Their leases must outlast the acquires that set the
// batch up (once 200 ms, which six slow acquires outran: the first leases
// expired before the batch came, and the check blamed an honest batch).
//
// The double's clock moves 100 ms at each acquire while the test's does
// not, so a batch set up by many acquires (FullMixedBatch's 256 take about
// 250) expires that much later by the test's clock than a real far backend
// would, whose acquires would take that long on the test's clock too:
// Settle covers it (30 s for up to 300 acquires).
func TestRenewBatchFarAway(t *testing.T) {
	cfg, err := newConfig([]Option{Settle(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{cfg: cfg, newBackend: func(t *testing.T) lease.Backend {
		clk := fakeclock.New(time.Now())
		return farBackend{memtest.New(t, memstore.WithClock(clk)), clk}
	}}
	s.renewBatch(t)
}
