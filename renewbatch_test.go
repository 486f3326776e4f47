package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

func TestValidateRenewals(t *testing.T) {
	l := lease.Lease{Key: "k", Token: 1, ID: lease.NewID()}
	ok := lease.Renewal{Lease: l, TTL: time.Second}
	full := make([]lease.Renewal, lease.MaxRenewBatch)
	for i := range full {
		full[i] = ok
	}
	noID := ok
	noID.Lease.ID = lease.ID{}
	shortTTL := ok
	shortTTL.TTL = time.Millisecond
	for name, tc := range map[string]struct {
		batch []lease.Renewal
		valid bool
	}{
		"one":           {[]lease.Renewal{ok}, true},
		"the most":      {full, true},
		"none":          {nil, false},
		"one more":      {append(full, ok), false},
		"zero ID":       {[]lease.Renewal{ok, noID}, false},
		"TTL too short": {[]lease.Renewal{shortTTL}, false},
	} {
		err := lease.ValidateRenewals(tc.batch)
		if tc.valid != (err == nil) || (err != nil && !errors.Is(err, lease.ErrInvalid)) {
			t.Errorf("%s: ValidateRenewals = %v, want valid %v (else ErrInvalid)", name, err, tc.valid)
		}
	}
}

// inFlight is a backend whose Renew waits until want calls are in flight
// at once, or its context ends.
type inFlight struct {
	lease.Backend
	want int

	mu      sync.Mutex
	n       int
	enough  chan struct{}
	failKey string // Renew of this key fails as a broken backend would
}

func (b *inFlight) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if l.Key == b.failKey {
		return lease.Lease{}, lease.ErrUnavailable
	}
	b.mu.Lock()
	if b.n++; b.n == b.want {
		close(b.enough)
	}
	b.mu.Unlock()
	select {
	case <-b.enough:
	case <-ctx.Done():
		return lease.Lease{}, ctx.Err()
	}
	return b.Backend.Renew(ctx, l, ttl)
}

// TestRenewAllWithoutBatches: on a backend without RenewBatch, RenewAll
// renews many at once (a batch of 256 must not take 256 round trips one
// after another), answers in order, refuses a stale lease alone, and fails
// whole when the backend fails.
func TestRenewAllWithoutBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memtest.New(t)
	var batch []lease.Renewal
	for i := range 32 {
		l, err := store.Acquire(ctx, fmt.Sprintf("k%02d", i), "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, lease.Renewal{Lease: l, TTL: time.Hour})
	}
	stale := batch[5]
	if err := store.Release(ctx, stale.Lease); err != nil {
		t.Fatal(err)
	}
	b := &inFlight{Backend: store, want: 16, enough: make(chan struct{})}
	res, err := lease.RenewAll(ctx, b, batch)
	if err != nil {
		t.Fatalf("RenewAll: %v (one Renew at a time never gets 16 in flight)", err)
	}
	for i, r := range res {
		switch {
		case i == 5:
			if !errors.Is(r.Err, lease.ErrNotHeld) {
				t.Errorf("renewal of a released lease: %v, want ErrNotHeld", r.Err)
			}
		case r.Err != nil || r.Lease.Key != batch[i].Lease.Key || r.Lease.TTL != time.Hour:
			t.Errorf("renewal %d: %+v, %v; want %s renewed to 1h", i, r.Lease, r.Err, batch[i].Lease.Key)
		}
	}
	broken := &inFlight{Backend: store, want: 1, enough: make(chan struct{}), failKey: batch[7].Lease.Key}
	if res, err := lease.RenewAll(ctx, broken, batch); !errors.Is(err, lease.ErrUnavailable) || res != nil {
		t.Errorf("RenewAll on a failing backend: %v, %v; want nothing and ErrUnavailable", res, err)
	}
}
