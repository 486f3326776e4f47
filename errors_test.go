package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

func TestHolderExpires(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	he := &lease.HeldError{Key: "k", Owner: "o", Token: 3, Expires: at}
	for _, tc := range []struct {
		err  error
		want time.Time
	}{
		{he, at},
		{fmt.Errorf("wrapped: %w", he), at},
		{lease.ErrHeld, time.Time{}},
		{nil, time.Time{}},
	} {
		if got := lease.HolderExpires(tc.err); !got.Equal(tc.want) {
			t.Errorf("HolderExpires(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// failing answers Get with err, as a backend that cannot say who holds a
// key.
type failing struct {
	lease.Backend
	err error
}

func (f failing) Get(context.Context, string) (lease.Lease, error) {
	return lease.Lease{}, f.err
}

func TestStillHeld(t *testing.T) {
	ctx := context.Background()
	store := memtest.New(t)
	holder, err := store.Acquire(ctx, "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	named := &lease.HeldError{Key: "k", Owner: "earlier", Token: 1}

	// The last error named the holder: it stands.
	if err := lease.StillHeld(ctx, store, "k", fmt.Errorf("x: %w", named)); err != named {
		t.Errorf("StillHeld with a HeldError = %v, want that HeldError", err)
	}
	// It did not: the backend is asked who holds the key now.
	for _, last := range []error{lease.ErrHeld, context.DeadlineExceeded, nil} {
		err := lease.StillHeld(ctx, store, "k", last)
		var he *lease.HeldError
		if !errors.As(err, &he) || he.Owner != "holder" || he.Token != holder.Token || !he.Expires.Equal(holder.Expires) {
			t.Errorf("StillHeld(last %v) = %v, want the holder %q with token %d", last, err, "holder", holder.Token)
		}
	}
	// Free by now: an error matching ErrHeld, naming the key and no holder.
	free := memtest.New(t)
	err = lease.StillHeld(ctx, free, "k", context.DeadlineExceeded)
	var he *lease.HeldError
	if !errors.Is(err, lease.ErrHeld) || errors.As(err, &he) || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("StillHeld with the key free = %v, want ErrHeld naming the key and no holder", err)
	}
	// Nobody can say: the backend's failure, matching ErrUnavailable and
	// not ErrHeld (a client of several servers moves on after the one, not
	// after the other), naming the key.
	for _, failure := range []error{lease.ErrUnavailable, context.DeadlineExceeded, errors.New("disk on fire")} {
		err = lease.StillHeld(ctx, failing{store, failure}, "k", context.DeadlineExceeded)
		if !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, failure) || errors.Is(err, lease.ErrHeld) || !strings.Contains(err.Error(), `"k"`) {
			t.Errorf("StillHeld with Get failing with %v = %v, want that failure, matching ErrUnavailable and not ErrHeld, naming the key", failure, err)
		}
	}
}
