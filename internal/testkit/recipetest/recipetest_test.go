package recipetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/recipetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSuite runs the suite on memstore in the three ways the recipes must
// work on a backend (memtest.Ways).
func TestSuite(t *testing.T) {
	for _, way := range memtest.Ways {
		t.Run(way.Name, func(t *testing.T) {
			t.Parallel()
			recipetest.Run(t, func(t *testing.T) lease.Backend { return way.New(t) },
				recipetest.Options{NoFIFO: way.Name != "watch"})
		})
	}
}

// blindList is a backend whose List finds nothing: a semaphore on it
// cannot see the holders it must agree with.
type blindList struct{ lease.Backend }

func (blindList) List(context.Context, string, lease.Page) (lease.ListPage, error) {
	return lease.ListPage{}, nil
}

// longLine is a backend on which a semaphore's line lease lasts a minute,
// as it did before MaxLineTTL: a dead head holds the line up that long.
type longLine struct{ lease.Backend }

func (l longLine) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if strings.HasSuffix(key, "/queue") {
		ttl = time.Minute
	}
	return l.Backend.Acquire(ctx, key, owner, ttl)
}

// TestControls runs checks on broken recipes, or on backends that blind
// a recipe, and insists that each finds the fault.
func TestControls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check recipetest.Check
		b     func(t *testing.T) lease.Backend
		opts  recipetest.Options
	}{
		{"a runner that keeps its term on shutdown", recipetest.RunnerHandsOverOnShutdown,
			func(t *testing.T) lease.Backend { return memtest.New(t) },
			recipetest.Options{RunOptions: []election.RunOption{election.KeepTermOnCancel()}}},
		{"a semaphore blind to the holders' limit", recipetest.SemaphoreRefusesAnotherLimit,
			func(t *testing.T) lease.Backend { return blindList{memtest.New(t)} }, recipetest.Options{}},
		{"a line lease as long as a slot's", recipetest.SemaphoreDeadHeadLeavesTheLine,
			func(t *testing.T) lease.Backend { return memtest.BackendOnly{Backend: longLine{memtest.New(t)}} }, recipetest.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.check(t, tc.b(t), tc.opts); err == nil {
				t.Fatal("the check passes a broken recipe")
			} else {
				t.Logf("found: %v", err)
			}
		})
	}
}
