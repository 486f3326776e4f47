package leasetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// givenUpTrials is how many acquisitions acquireGivenUp gives up, at
// moments spread from before the request leaves to twice its round trip.
const givenUpTrials = 40

// givenUpBound is how long a backend may take to free a key whose Acquire
// was given up (a grant it must release in the background), at the least:
// long before the lease's TTL (longTTL).
const givenUpBound = 5 * time.Second

// acquireGivenUp checks that an Acquire, or a WaitAcquirer's AcquireWait,
// whose ctx ends before it answers — before it is sent, on the wire, as
// it commits — leaves nothing held by nobody: a key whose call failed is
// free again within givenUpBound (the backend releases a grant its caller
// never heard of), not held for the lease's TTL. A call that answers with
// a lease is released by the test.
func (s *suite) acquireGivenUp(t *testing.T, b lease.Backend) {
	rtt := roundTrip(t, b)
	var failed []string
	for i := range givenUpTrials {
		k := key(t, fmt.Sprintf("given-up/%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), 2*rtt*time.Duration(i)/givenUpTrials)
		l, err := b.Acquire(ctx, k, "quitter", longTTL)
		cancel()
		switch {
		case err == nil:
			if err := b.Release(ctxFor(t), l); err != nil {
				t.Fatalf("Release of a lease granted to a deadline: %v", err)
			}
		case errIs(err, lease.ErrHeld):
			t.Fatalf("Acquire of a fresh key whose ctx ended: %v, want a lease or the ctx's error", err)
		default:
			failed = append(failed, k)
		}
	}
	if wa, ok := b.(lease.WaitAcquirer); ok {
		// The holder releases as the waiter's ctx ends.
		for i := range givenUpTrials / 4 {
			k := key(t, fmt.Sprintf("given-up-wait/%d", i))
			holder := mustAcquire(t, b, k, "holder", longTTL)
			wait := 2 * rtt
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			got := make(chan error, 1)
			go func() {
				l, err := wa.AcquireWait(ctx, k, "quitter", longTTL)
				if err == nil {
					err = b.Release(ctxFor(t), l)
				}
				got <- err
			}()
			time.Sleep(wait * time.Duration(i) / (givenUpTrials / 4)) // real time: the release lands at moments spread over the wait
			if err := b.Release(ctxFor(t), holder); err != nil {
				t.Fatalf("Release of the holder: %v", err)
			}
			if err := <-got; err != nil {
				failed = append(failed, k)
			}
			cancel()
		}
	}
	t.Logf("%d given-up calls failed (round trip %v)", len(failed), rtt)
	deadline := time.Now().Add(max(givenUpBound, s.cfg.settle))
	for _, k := range failed {
		for {
			l, err := b.Acquire(ctxFor(t), k, "next", longTTL)
			if err == nil {
				if err := b.Release(ctxFor(t), l); err != nil {
					t.Fatal(err)
				}
				break
			}
			if !errIs(err, lease.ErrHeld) {
				t.Fatalf("Acquire after a given-up one: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q is still held %v after its Acquire was given up (%v): a lease granted to nobody until its TTL", k, max(givenUpBound, s.cfg.settle), err)
			}
			time.Sleep(10 * time.Millisecond) // real time: the backend frees the key in the background
		}
	}
}

// roundTrip is the median time of an Acquire on b, at least a millisecond.
func roundTrip(t *testing.T, b lease.Backend) time.Duration {
	var took []time.Duration
	for i := range 11 {
		k := key(t, fmt.Sprintf("round-trip/%d", i))
		start := time.Now()
		l := mustAcquire(t, b, k, "timer", longTTL)
		took = append(took, time.Since(start))
		if err := b.Release(ctxFor(t), l); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(took)
	return max(took[len(took)/2], time.Millisecond)
}
