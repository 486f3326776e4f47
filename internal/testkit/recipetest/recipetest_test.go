package recipetest_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/recipetest"
	"github.com/leasehq/lease/semaphore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSuite runs the suite on memstore in the three ways the recipes must
// work on a backend (memtest.Ways), each check in a synctest bubble: in two
// of the ways the waiters poll, and only the bubble tells when one has
// tried the key and waits for its next try (Options.Idle).
func TestSuite(t *testing.T) {
	for _, way := range memtest.Ways {
		t.Run(way.Name, func(t *testing.T) {
			t.Parallel()
			for _, c := range recipetest.Checks {
				t.Run(c.Name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						opts := recipetest.Options{NoFIFO: way.Name != "watch", Idle: synctest.Wait}
						if err := c.Check(t, way.New(t), opts); err != nil {
							t.Fatal(err)
						}
					})
				})
			}
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

// lateAcquires is a backend as a loaded server is to its clients: an
// acquire of a slot lands 100 ms after it is sent, and lands even when its
// caller has stopped waiting for the answer.
type lateAcquires struct{ lease.Backend }

func (l lateAcquires) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if !strings.Contains(key, "/slots/") {
		return l.Backend.Acquire(ctx, key, owner, ttl)
	}
	type result struct {
		l   lease.Lease
		err error
	}
	done := make(chan result, 1)
	time.AfterFunc(100*time.Millisecond, func() {
		got, err := l.Backend.Acquire(context.Background(), key, owner, ttl)
		done <- result{got, err}
	})
	select {
	case r := <-done:
		return r.l, r.err
	case <-ctx.Done():
		return lease.Lease{}, context.Cause(ctx)
	}
}

// TestDeadHeadOnALoadedBackend: the dead head's last try for a slot, in
// flight as it dies, lands after the live holder has released the slot;
// the check must not count the slot a dead process took that way against
// the line (through a loaded server it once did, and the waiter behind
// timed out with the slot held for a minute).
func TestDeadHeadOnALoadedBackend(t *testing.T) {
	if err := recipetest.SemaphoreDeadHeadLeavesTheLine(t, lateAcquires{memtest.New(t)}, recipetest.Options{}); err != nil {
		t.Fatal(err)
	}
}

// slowAnswers is a backend far away, or on a loaded host: every answer
// comes back 300 ms after the backend acted. Its tests run in a synctest
// bubble, so the 300 ms pass on the bubble's clock, as every other wait
// of the check and the memstore's expiries do.
type slowAnswers struct{ lease.Backend }

const answerDelay = 300 * time.Millisecond

func (s slowAnswers) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := s.Backend.Acquire(ctx, key, owner, ttl)
	time.Sleep(answerDelay) // in a bubble: TestDeadHeadBehindSlowAnswers's slow answer
	return l, err
}

func (s slowAnswers) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	p, err := s.Backend.List(ctx, prefix, page)
	time.Sleep(answerDelay) // in a bubble: as Acquire's
	return p, err
}

// TestDeadHeadBehindSlowAnswers: the check times the line, not the way to
// the backend. Slow answers add to the next waiter's wall time after the
// line is free (its turn, the lists, the slot) but not to when the line
// is free or the slot granted (it once timed from its own clock, and a
// loaded host failed it).
func TestDeadHeadBehindSlowAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if err := recipetest.SemaphoreDeadHeadLeavesTheLine(t, slowAnswers{memtest.New(t)}, recipetest.Options{}); err != nil {
			t.Fatal(err)
		}
	})
}

// hiddenLongLine is a backend on which a semaphore's line lease lasts
// 10 s while the backend says it lasts what was asked: the dead head holds
// the line up past what its lease shows.
type hiddenLongLine struct{ lease.Backend }

const hiddenLineTTL = 10 * time.Second

func (h hiddenLongLine) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if !strings.HasSuffix(key, "/queue") {
		return h.Backend.Acquire(ctx, key, owner, ttl)
	}
	l, err := h.Backend.Acquire(ctx, key, owner, hiddenLineTTL)
	return h.disguise(l, ttl), err
}

func (h hiddenLongLine) Get(ctx context.Context, key string) (lease.Lease, error) {
	l, err := h.Backend.Get(ctx, key)
	if strings.HasSuffix(key, "/queue") && err == nil {
		l = h.disguise(l, semaphore.MaxLineTTL)
	}
	return l, err
}

func (hiddenLongLine) disguise(l lease.Lease, ttl time.Duration) lease.Lease {
	if l.TTL == hiddenLineTTL {
		l.Expires, l.TTL = l.Expires.Add(ttl-hiddenLineTTL), ttl
	}
	return l
}

// TestControls runs checks on broken recipes, or on backends that blind
// a recipe, and insists that each finds the fault; in synctest bubbles, as
// TestSuite runs them.
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
		{"a line lease longer than it shows", recipetest.SemaphoreDeadHeadLeavesTheLine,
			func(t *testing.T) lease.Backend { return hiddenLongLine{memtest.New(t)} }, recipetest.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tc.opts.Idle = synctest.Wait
				if err := tc.check(t, tc.b(t), tc.opts); err == nil {
					t.Fatal("the check passes a broken recipe")
				} else {
					t.Logf("found: %v", err)
				}
			})
		})
	}
}
