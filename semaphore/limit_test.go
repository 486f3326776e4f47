package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/recipetest"
	"github.com/leasehq/lease/semaphore"
)

// TestDisagreeingLimitIsRefused: with three holders admitted under N=3, a
// process that says N=5 admits nobody and is told why; its control, a
// semaphore that does not check, admits a fourth.
func TestDisagreeingLimitIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
	}{{"Checked", false}, {"ControlUnchecked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			b := memtest.New(t)
			three := newSem(t, b, 3, time.Minute)
			for range 3 {
				slot, err := three.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer slot.Release(ctx)
			}
			five := newSem(t, b, 5, time.Minute)
			if tc.broken {
				semaphore.SkipLimitCheck(five)
			}
			slot, err := five.TryAcquire(ctx)
			if tc.broken {
				if err != nil {
					t.Fatalf("the unchecked semaphore: %v, want a fourth slot (the control must find the excess)", err)
				}
				defer slot.Release(ctx)
				if hs, _ := five.Holders(ctx); len(hs) != 4 {
					t.Fatalf("the unchecked semaphore: %d holders, want 4", len(hs))
				}
				return
			}
			if !errors.Is(err, lease.ErrConflict) || !strings.Contains(err.Error(), "limit of 3") {
				t.Fatalf("TryAcquire with N=5 against holders of N=3: %v, want ErrConflict naming the limit 3", err)
			}
			if _, err := five.Acquire(ctx); !errors.Is(err, lease.ErrConflict) {
				t.Fatalf("Acquire with N=5 against holders of N=3: %v, want ErrConflict", err)
			}
			if hs, _ := five.Holders(ctx); len(hs) != 3 {
				t.Fatalf("%d holders after the refusals, want 3", len(hs))
			}
		})
	}
}

// TestDisagreeingProcessesNeverExceedTheStoredLimit runs workers with N=3
// and N=5 on one name at once: every admitted holder agrees on one limit
// with all others inside, and never more than it are inside. The control,
// with the N=5 workers unchecked, finds more than 3 inside with holders of
// N=3 among them.
func TestDisagreeingProcessesNeverExceedTheStoredLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken bool
	}{{"Checked", false}, {"ControlUnchecked", true}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, be := range backends {
				t.Run(be.Name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						violations := disagree(t, be.New(t), tc.broken)
						if tc.broken && violations == 0 {
							t.Fatal("the unchecked N=5 workers never exceeded the stored limit of 3: the check cannot find it")
						}
						if !tc.broken && violations > 0 {
							t.Fatalf("%d times more holders inside than the limit they were admitted under", violations)
						}
					})
				})
			}
		})
	}
}

// disagree runs 4 workers with N=3 and 4 with N=5 for a while (200 ms
// of its synctest bubble's time) and counts the moments when more holders
// were inside than the smallest limit among them.
func disagree(t *testing.T, b lease.Backend, broken bool) int {
	ctx := ctxFor(t)
	var inside [2]atomic.Int32 // by limit: 3, 5
	var violations atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(200 * time.Millisecond)
	for w := range 8 {
		which, n := w%2, 3+2*(w%2)
		s := newSem(t, b, n, time.Minute)
		if broken && n == 5 {
			semaphore.SkipLimitCheck(s)
		}
		if broken && n == 3 && w == 0 {
			// Hold the limit of 3 in place, so the unchecked workers meet it.
			slot, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			inside[0].Add(1)
			defer slot.Release(context.Background())
			continue
		}
		wg.Go(func() {
			for time.Now().Before(deadline) {
				actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				slot, err := s.Acquire(actx)
				cancel()
				if errors.Is(err, lease.ErrConflict) || errors.Is(err, context.DeadlineExceeded) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				inside[which].Add(1)
				three, five := inside[0].Load(), inside[1].Load()
				if (three > 0 && three+five > 3) || three+five > 5 {
					violations.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside[which].Add(-1)
				if err := slot.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return int(violations.Load())
}

// TestResizeIsExplicit: WithResize admits under the new limit while
// holders of the old one remain, counting them all; from then on the old
// limit is refused.
func TestResizeIsExplicit(t *testing.T) {
	ctx := ctxFor(t)
	b := memtest.New(t)
	three := newSem(t, b, 3, time.Minute)
	for range 2 {
		slot, err := three.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer slot.Release(ctx)
	}
	four := newSem(t, b, 4, time.Minute, semaphore.WithResize())
	for range 2 {
		slot, err := four.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("resizing to 4 with 2 held: %v", err)
		}
		defer slot.Release(ctx)
	}
	if _, err := four.TryAcquire(ctx); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("a fifth holder under a limit of 4: %v, want ErrHeld", err)
	}
	if _, err := three.TryAcquire(ctx); !errors.Is(err, lease.ErrConflict) {
		t.Fatalf("the old limit after a resize: %v, want ErrConflict", err)
	}
}

// TestDeadHeadLeavesTheLine runs the recipe suite's check that a waiter
// dying at the head of the line holds it up at most MaxLineTTL (its
// control is in internal/testkit/recipetest).
func TestDeadHeadLeavesTheLine(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			if err := recipetest.SemaphoreDeadHeadLeavesTheLine(t, be.New(t), recipetest.Options{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOnlyItsOwnSlotsCount: the keys under NAME/slots/ that are not its
// slots — those of a semaphore named NAME/slots/gpu, its line among them,
// or any lease there — neither count against its limit nor disagree with
// it, nor show among its Holders.
func TestOnlyItsOwnSlotsCount(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := ctxFor(t)
			b := be.New(t)
			c := newClient(t, b, lease.WithOwner("worker"))
			gpu, err := semaphore.New(c, "jobs/slots/gpu", 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			other, err := gpu.Acquire(ctx) // its slot, and its line while it queued
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			stray, err := c.TryAcquire(ctx, "jobs/slots/07", time.Minute) // not slot 7's key
			if err != nil {
				t.Fatal(err)
			}
			defer stray.Release(ctx)
			for _, n := range []int{1, 2} {
				jobs, err := semaphore.New(c, "jobs", n, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				slot, err := jobs.TryAcquire(ctx)
				if err != nil {
					t.Fatalf("N=%d, no slot of its own held: %v, want a slot", n, err)
				}
				hs, err := jobs.Holders(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(hs) != 1 || hs[0].Key != slot.Key() {
					t.Errorf("N=%d: Holders = %+v, want its one slot", n, hs)
				}
				if err := slot.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
