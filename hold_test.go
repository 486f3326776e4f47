package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

func TestHoldRenewsInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		c := newClient(t, store, "worker-a")
		ctx := context.Background()
		h, err := c.Acquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second) // 30 TTLs
		if err := h.Err(); err != nil {
			t.Fatalf("lease lost while renewing normally: %v", err)
		}
		got, err := store.Get(ctx, "job")
		if err != nil || got.Token != h.Token() {
			t.Fatalf("backend lease = %+v, %v; want token %d", got, err, h.Token())
		}
		if !h.Deadline().After(time.Now()) {
			t.Errorf("deadline %v not in the future", h.Deadline())
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(h.Context()); !errors.Is(cause, lease.ErrReleased) {
			t.Errorf("cause after Release = %v, want ErrReleased", cause)
		}
		if _, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("key still held after Release: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Errorf("second Release = %v, want nil", err)
		}
	})
}

// TestLostAtSafeDeadline: renewals fail without an answer; the context must
// be cancelled at send time + TTL − margin, before the backend's expiry (I5).
func TestLostAtSafeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		f := &faulty{Backend: store}
		c := newClient(t, f, "worker-a", lease.WithDriftMargin(0.01, 2*time.Millisecond))
		ctx := context.Background()
		ttl := time.Second
		sent := time.Now()
		h, err := c.TryAcquire(ctx, "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		f.failRenewals(errors.Join(lease.ErrUnavailable, errors.New("connection reset")))
		<-h.Done()
		lostAt := time.Now()
		if want := sent.Add(ttl - 12*time.Millisecond); !lostAt.Equal(want) {
			t.Errorf("lost at %v after acquire, want exactly %v", lostAt.Sub(sent), want.Sub(sent))
		}
		if !errors.Is(h.Err(), lease.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", h.Err())
		}
		// The backend still holds it: the client gave up first.
		if got, err := store.Get(ctx, "job"); err != nil || got.Token != h.Token() {
			t.Errorf("backend lease at the client's deadline = %+v, %v; want still held", got, err)
		}
		if n := f.renews.Load(); n < 3 {
			t.Errorf("%d renewal attempts before giving up, want retries", n)
		}
		if err := h.Release(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("Release after loss = %v, want ErrLost", err)
		}
		// Release still frees the key for the next holder.
		if _, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("Release after loss left the key held: %v", err)
		}
	})
}

func TestLostWhenBackendSaysGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		f := &faulty{Backend: store}
		c := newClient(t, f, "worker-a")
		ctx := context.Background()
		h, err := c.TryAcquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		acquired := time.Now()
		f.failRenewals(lease.ErrNotHeld)
		<-h.Done()
		if !errors.Is(h.Err(), lease.ErrLost) {
			t.Fatalf("Err = %v, want ErrLost", h.Err())
		}
		// Lost at the first renewal attempt (about TTL/3), not at the deadline.
		if d := time.Since(acquired); d > 400*time.Millisecond {
			t.Errorf("lost %v after acquire; want at the first renewal", d)
		}
		_ = h.Release(ctx)
	})
}

// seamClock is the fake clock with two seams for races between a timer's
// goroutine and the Hold's own code, which a clock whose timers fire inside
// Advance cannot stage by itself: onStop, when set, runs inside every
// Timer.Stop (once the timer is stopped), to interleave the test with the
// code that stops a timer; and every function given to AfterFunc is kept by
// deadline, so that a test can run one late, as the goroutine of a timer
// that had already fired when it was stopped.
type seamClock struct {
	*fakeclock.Clock
	mu     sync.Mutex
	onStop func()
	funcs  map[time.Time][]func()
}

type seamTimer struct {
	lease.Timer
	c *seamClock
}

func newSeamClock() *seamClock {
	return &seamClock{Clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), funcs: map[time.Time][]func(){}}
}

func (c *seamClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	c.mu.Lock()
	at := c.Now().Add(d)
	c.funcs[at] = append(c.funcs[at], f)
	c.mu.Unlock()
	return seamTimer{Timer: c.Clock.AfterFunc(d, f), c: c}
}

func (t seamTimer) Stop() bool {
	stopped := t.Timer.Stop()
	t.c.mu.Lock()
	hook := t.c.onStop
	t.c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return stopped
}

// setOnStop makes f run inside every later Timer.Stop.
func (c *seamClock) setOnStop(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onStop = f
}

// funcsAt returns the functions of the timers set to fire at at.
func (c *seamClock) funcsAt(at time.Time) []func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.funcs[at]
}

// waitPending waits until n timers are pending and returns their deadlines,
// earliest first: the renewal goroutine sets its timer on its own schedule.
func waitPending(t *testing.T, clk *fakeclock.Clock, n int) []time.Time {
	t.Helper()
	var p []time.Time
	poll.Until(t, 10*time.Second, func() error {
		if p = clk.Pending(); len(p) < n {
			return fmt.Errorf("%d timers pending, want %d", len(p), n)
		}
		return nil
	})
	return p
}

// blockingRenew parks each Renew until the test answers it on reply.
type blockingRenew struct {
	lease.Backend
	calls chan struct{}
	reply chan error
}

func (b *blockingRenew) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	select {
	case b.calls <- struct{}{}:
	case <-ctx.Done():
		return lease.Lease{}, ctx.Err()
	}
	select {
	case err := <-b.reply:
		if err != nil {
			return lease.Lease{}, err
		}
	case <-ctx.Done():
		return lease.Lease{}, ctx.Err()
	}
	return b.Backend.Renew(context.WithoutCancel(ctx), l, ttl)
}

// holdWithBlockedRenewals returns worker-a's one-second hold on "job" on a
// fake clock, its renewals held by the returned backend until answered.
func holdWithBlockedRenewals(t *testing.T) (*seamClock, *blockingRenew, *lease.Hold) {
	t.Helper()
	b := &blockingRenew{Backend: memtest.New(t), calls: make(chan struct{}), reply: make(chan error)}
	clk, h := holdOnFakeClock(t, b)
	return clk, b, h
}

// holdOnFakeClock returns worker-a's one-second hold on "job" through b, on a
// fake clock.
func holdOnFakeClock(t *testing.T, b lease.Backend) (*seamClock, *lease.Hold) {
	t.Helper()
	clk := newSeamClock()
	c := newClient(t, b, "worker-a", lease.WithClock(clk))
	h, err := c.TryAcquire(context.Background(), "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return clk, h
}

// TestErrReportsLossOnceTheDeadlinePassed: after a pause past the safe
// deadline, the deadline timer's goroutine and the application's race to run.
// Err must not report the lease as held once the client's clock has passed
// the deadline (I5), whether or not the timer has run yet: the application
// checks Err (directly or through fence.Transport) right before it writes.
func TestErrReportsLossOnceTheDeadlinePassed(t *testing.T) {
	ctx := context.Background()
	clk, h := holdOnFakeClock(t, memtest.New(t))
	defer h.Release(ctx)
	if err := h.Err(); err != nil {
		t.Fatalf("Err right after acquire = %v", err)
	}
	clk.JumpTo(h.Deadline().Add(-time.Nanosecond))
	if err := h.Err(); err != nil {
		t.Fatalf("Err just before the deadline = %v, want nil", err)
	}
	// The process was paused: the clock is past the deadline, no timer ran.
	clk.JumpTo(h.Deadline().Add(time.Millisecond))
	if err := h.Err(); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Err after the safe deadline passed (timer not yet run) = %v, want ErrLost", err)
	}
	select {
	case <-h.Done():
	default:
		t.Error("Err reported the loss but Done is not closed")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lease.ErrLost) {
		t.Errorf("cause = %v, want ErrLost", cause)
	}
}

// clampRenew grants renewals at most max, whatever was asked: a backend (or
// a server in front of one) whose policy shortened the lease after it was
// granted. The lease it returns says so in its TTL.
type clampRenew struct {
	lease.Backend
	max time.Duration
}

func (b clampRenew) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	return b.Backend.Renew(ctx, l, min(ttl, b.max))
}

// TestRenewalFollowsTheGrantedTTL: a renewal that comes back with a shorter
// TTL moves the deadline by that TTL; the next renewal must then come before
// that deadline, not at a third of the TTL first asked for.
func TestRenewalFollowsTheGrantedTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		c := newClient(t, clampRenew{Backend: store, max: 3 * time.Second}, "worker-a")
		ctx := context.Background()
		h, err := c.TryAcquire(ctx, "job", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		time.Sleep(2 * time.Minute)
		if err := h.Err(); err != nil {
			t.Fatalf("lease lost although every renewal succeeded: %v", err)
		}
		if got, err := store.Get(ctx, "job"); err != nil || got.Token != h.Token() {
			t.Fatalf("backend lease = %+v, %v; want token %d still held", got, err, h.Token())
		}
		if left := time.Until(h.Deadline()); left > 3*time.Second {
			t.Errorf("deadline %v away, beyond the 3s TTL the backend granted", left)
		}
	})
}

// TestReleaseReportsALossThatRacedIt: the renewal loop learns the lease is
// gone while Release is running. Whatever the order, Release must agree with
// the Hold's context: if its cause is ErrLost, Release returns ErrLost, never
// nil as if the work under the lease had been safe to the end.
func TestReleaseReportsALossThatRacedIt(t *testing.T) {
	ctx := context.Background()
	clk, b, h := holdWithBlockedRenewals(t)
	// Run the renewal timer (the earliest pending one) so that a renewal is
	// in flight.
	clk.Set(waitPending(t, clk.Clock, 2)[0])
	<-b.calls
	// Release stops the deadline timer; at that moment the backend answers
	// the renewal in flight: the lease is gone.
	var once sync.Once
	clk.setOnStop(func() {
		once.Do(func() {
			b.reply <- fmt.Errorf("%w: superseded", lease.ErrNotHeld)
			<-h.Done()
		})
	})
	err := h.Release(ctx)
	cause := context.Cause(h.Context())
	if errors.Is(cause, lease.ErrLost) && !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Release = %v while the Hold's cause is %v; want Release to report the loss", err, cause)
	}
	if !errors.Is(cause, lease.ErrLost) && !errors.Is(cause, lease.ErrReleased) {
		t.Fatalf("cause = %v", cause)
	}
}

// TestNoTimerOutlivesRelease: a Client has one deadline timer, set for the
// earliest of its holds' deadlines, and sets it again when a hold with an
// earlier deadline comes. A callback of the timer it replaced, already
// running when the timer was stopped, must not leave a second live timer
// behind that Release cannot stop.
func TestNoTimerOutlivesRelease(t *testing.T) {
	ctx := context.Background()
	clk := newSeamClock()
	c := newClient(t, memtest.New(t), "worker-a", lease.WithClock(clk))
	long, err := c.TryAcquire(ctx, "long", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The deadline timer, as the first hold set it.
	n := 0
	for _, at := range waitPending(t, clk.Clock, 2) {
		if at.Equal(long.Deadline()) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d timers at the deadline, want 1", n)
	}
	stale := clk.funcsAt(long.Deadline())[0] // the callback, as its goroutine would run it
	// A hold with an earlier deadline: the timer is set for it instead.
	short, err := c.TryAcquire(ctx, "short", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := clk.funcsAt(short.Deadline()); len(got) != 1 {
		t.Fatalf("%d timers at the new earliest deadline, want 1", len(got))
	}
	// The replaced timer's goroutine, already started before it was
	// stopped, now runs.
	stale()
	for _, h := range []*lease.Hold{long, short} {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range clk.Pending() {
		t.Errorf("timer for %v still pending after Release", at.Sub(clk.Now()))
	}
}

// TestRenewalReplyAfterTheDeadlineLoses: a renewal sent in time whose reply
// arrives after the safe deadline must not extend the lease, and the Hold
// is lost at once — not only when the deadline timer gets to run.
func TestRenewalReplyAfterTheDeadlineLoses(t *testing.T) {
	ctx := context.Background()
	clk, b, h := holdWithBlockedRenewals(t)
	defer h.Release(ctx)
	deadline := h.Deadline()
	clk.Set(waitPending(t, clk.Clock, 2)[0]) // the renewal timer
	<-b.calls
	clk.JumpTo(deadline.Add(time.Millisecond)) // no timer runs
	b.reply <- nil                             // the backend renewed it, but we hear of it too late
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("renewal reply after the deadline: Hold not lost")
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lease.ErrLost) {
		t.Errorf("cause = %v, want ErrLost", cause)
	}
	if !h.Deadline().Equal(deadline) {
		t.Errorf("a late renewal moved the deadline from %v to %v", deadline, h.Deadline())
	}
}

// retokenRenew answers every renewal with the lease it renewed under another
// token: a broken backend, or a proxy mixing up answers.
type retokenRenew struct{ *memstore.Store }

func (b retokenRenew) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	r, err := b.Store.Renew(ctx, l, ttl)
	r.Token++
	return r, err
}

// TestRenewalWithAnotherTokenLoses: a lease keeps its token for life (I2).
// A renewal answered with another one cannot be vouched for — the writes
// are fenced with the old token — so the Hold is lost at that renewal, not
// kept alive on the backend's word.
func TestRenewalWithAnotherTokenLoses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, retokenRenew{memtest.New(t)}, "worker-a")
		ctx := context.Background()
		h, err := c.TryAcquire(ctx, "job", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		tok := h.Token()
		time.Sleep(11 * time.Second) // past the first renewal, at about 10 s
		synctest.Wait()
		if err := h.Err(); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Err = %v after a renewal answered with another token; want ErrLost", err)
		}
		if h.Token() != tok {
			t.Errorf("token changed from %d to %d", tok, h.Token())
		}
	})
}

// wayward is a BatchRenewer whose batches travel slowly both ways and
// come back whole, failed after they were made, cut short, or refused in
// part (and so do its lone renewals, but for the cut): each renewal is made after the request's way out and answered
// after the way back (each up to 0.6 TTL), so that answers often come
// after a hold's deadline. With lie set it answers a renewal as made
// without making it: the negative control of the truth check.
type wayward struct {
	lease.Backend
	ttl time.Duration
	lie bool

	mu  sync.Mutex
	rng *rand.Rand
}

func (b *wayward) intN(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rng.IntN(n)
}

func (b *wayward) travel(ctx context.Context) error {
	select {
	case <-time.After(time.Duration(b.intN(int(b.ttl * 6 / 10)))):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *wayward) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	if err := b.travel(ctx); err != nil {
		return nil, err
	}
	out := make([]lease.RenewResult, len(renewals))
	for i, r := range renewals {
		out[i] = b.renew(ctx, r)
	}
	if err := b.travel(ctx); err != nil {
		return nil, err
	}
	switch b.intN(10) {
	case 0: // made, but the answer was lost
		return nil, fmt.Errorf("%w: the answer was lost", lease.ErrUnavailable)
	case 1: // cut short
		return out[:len(out)/2], nil
	}
	return out, nil
}

// Renew is RenewBatch for one lease, for a Client that renews its holds
// one by one (lone hides RenewBatch): its ctx is the Hold's, which Release
// cancels on the way.
func (b *wayward) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := b.travel(ctx); err != nil {
		return lease.Lease{}, err
	}
	r := b.renew(ctx, lease.Renewal{Lease: l, TTL: ttl})
	if err := b.travel(ctx); err != nil {
		return lease.Lease{}, err
	}
	if b.intN(10) == 0 {
		return lease.Lease{}, fmt.Errorf("%w: the answer was lost", lease.ErrUnavailable)
	}
	return r.Lease, r.Err
}

// renew makes (or, lying, says it made) one renewal, or refuses it.
func (b *wayward) renew(ctx context.Context, r lease.Renewal) (out lease.RenewResult) {
	switch {
	case b.intN(8) == 0: // refused, as a backend that lost it
		out.Err = fmt.Errorf("%w: refused for the test", lease.ErrNotHeld)
	case b.lie:
		out.Lease = r.Lease
		out.Lease.Expires = time.Now().Add(r.TTL)
	default:
		out.Lease, out.Err = b.Backend.Renew(ctx, r.Lease, r.TTL)
	}
	return out
}

// lone is a backend without RenewBatch.
type lone struct{ lease.Backend }

// holdTruth drives a Client on b for a minute of fake time: holds taken,
// released (some while their renewal is in flight) and grouped in
// sessions at random, and at random instants every hold whose Err says
// held is checked against the store: it must hold the lease, same token,
// unexpired on its clock (I5: the client's deadline counts from the send
// time, before the backend made the renewal). It returns the violations.
func holdTruth(t *testing.T, seed uint64, lie, alone bool) []string {
	var bad []string
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		b := &wayward{Backend: store, ttl: time.Second, lie: lie, rng: rand.New(rand.NewPCG(seed, 2))}
		rng := rand.New(rand.NewPCG(seed, 1))
		var through lease.Backend = b
		if alone {
			through = lone{b}
		}
		c := newClient(t, through, "truth")
		ctx := context.Background()
		ttls := []time.Duration{b.ttl / 2, b.ttl, 2 * b.ttl}
		var holds []*lease.Hold
		var sessions []*lease.Session
		next := 0
		take := func() {
			key := fmt.Sprintf("k%d", next)
			next++
			ttl := ttls[rng.IntN(len(ttls))]
			var (
				h   *lease.Hold
				err error
			)
			if rng.IntN(3) == 0 {
				if len(sessions) == 0 || rng.IntN(4) == 0 {
					sessions = append(sessions, c.NewSession())
				}
				h, err = sessions[rng.IntN(len(sessions))].TryAcquire(ctx, key, ttl)
			} else {
				h, err = c.TryAcquire(ctx, key, ttl)
			}
			if err == nil {
				holds = append(holds, h)
			}
		}
		for range 30 {
			take()
		}
		start := time.Now()
		end := start.Add(time.Minute)
		for time.Now().Before(end) {
			time.Sleep(time.Duration(rng.IntN(int(b.ttl / 5))))
			for _, h := range holds {
				if h.Err() != nil {
					continue
				}
				l, err := store.Get(ctx, h.Key())
				if err != nil || l.Token != h.Token() || !time.Now().Before(l.Expires) {
					bad = append(bad, fmt.Sprintf("at +%v %s (token %d, deadline +%v) reported held; the store says %+v, %v",
						time.Since(start), h.Key(), h.Token(), h.Deadline().Sub(start), l, err))
				}
			}
			switch rng.IntN(4) {
			case 0:
				if len(holds) > 0 {
					i := rng.IntN(len(holds))
					_ = holds[i].Release(ctx)
					holds = append(holds[:i], holds[i+1:]...)
				}
			case 1:
				take()
			case 2:
				if len(holds) > 0 { // renewed no more: it must still say lost by its deadline
					holds[rng.IntN(len(holds))].Orphan()
				}
			}
			kept := holds[:0]
			for _, h := range holds {
				if h.Err() == nil {
					kept = append(kept, h)
				}
			}
			holds = kept
			for len(holds) < 10 {
				take()
			}
		}
		for _, s := range sessions {
			_ = s.Close(ctx)
		}
		for _, h := range holds {
			_ = h.Release(ctx)
		}
		time.Sleep(3 * b.ttl) // the batches in flight end by their holds' deadlines
		synctest.Wait()
	})
	return bad
}

// TestHoldNeverOutlivesItsLease: whatever the timing of a batch's answer
// (late, lost, cut short, refused in part) and whatever is released while
// its renewal is in flight or it is orphaned, a hold never says held while the backend does
// not hold its lease. The lying backend, which answers renewals it never
// made, must be caught.
func TestHoldNeverOutlivesItsLease(t *testing.T) {
	for _, alone := range []bool{false, true} {
		t.Run(map[bool]string{false: "batches", true: "lone"}[alone], func(t *testing.T) {
			const seeds = 20
			for seed := range uint64(seeds) {
				if bad := holdTruth(t, seed, false, alone); len(bad) > 0 {
					t.Errorf("seed %d: %d reports of a hold held that the store did not hold; first: %s", seed, len(bad), bad[0])
				}
			}
			t.Run("control", func(t *testing.T) {
				if bad := holdTruth(t, 0, true, alone); len(bad) == 0 {
					t.Error("a backend that answers renewals it never made went unnoticed")
				}
			})
		})
	}
}

// countRenewals counts the renewals that reach the backend, alone or in
// batches (each renewal of a batch made as Renew makes it).
type countRenewals struct {
	*memstore.Store
	n atomic.Int64
}

func (b *countRenewals) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	b.n.Add(1)
	return b.Store.Renew(ctx, l, ttl)
}

func (b *countRenewals) RenewBatch(ctx context.Context, rs []lease.Renewal) ([]lease.RenewResult, error) {
	out := make([]lease.RenewResult, len(rs))
	for i, r := range rs {
		out[i].Lease, out[i].Err = b.Renew(ctx, r.Lease, r.TTL)
	}
	return out, nil
}

// TestHoldOrphan: an orphaned hold is renewed no more, says held until its
// safe deadline and lost from then on (ErrLost), and its lease expires on
// the backend at its TTL, with nobody given the key before; Release still
// frees an orphaned lease at once.
func TestHoldOrphan(t *testing.T) {
	for _, alone := range []bool{false, true} {
		t.Run(map[bool]string{false: "batches", true: "lone"}[alone], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &countRenewals{Store: memtest.New(t)}
				var b lease.Backend = store
				if alone {
					b = lone{store}
				}
				c := newClient(t, b, "a")
				other := newClient(t, store.Store, "b")
				ctx := context.Background()
				h, err := c.TryAcquire(ctx, "k", 3*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Second) // renewed a few times
				h.Orphan()
				synctest.Wait()
				renewals, deadline := store.n.Load(), h.Deadline()
				l, err := store.Get(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Until(deadline) - time.Millisecond)
				if err := h.Err(); err != nil {
					t.Errorf("orphaned hold lost before its safe deadline: %v", err)
				}
				if _, err := other.TryAcquire(ctx, "k", time.Second); !errors.Is(err, lease.ErrHeld) {
					t.Errorf("another client's TryAcquire before the orphaned lease expired = %v, want ErrHeld", err)
				}
				time.Sleep(time.Until(l.Expires) + time.Millisecond)
				if err := h.Err(); !errors.Is(err, lease.ErrLost) {
					t.Errorf("orphaned hold past its deadline: Err = %v, want ErrLost", err)
				}
				if n := store.n.Load(); n != renewals {
					t.Errorf("%d renewals after Orphan", n-renewals)
				}
				nh, err := other.TryAcquire(ctx, "k", time.Second)
				if err != nil {
					t.Fatalf("the orphaned lease did not expire at its TTL: %v", err)
				}
				_ = nh.Release(ctx)

				h, err = c.TryAcquire(ctx, "k", 3*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				h.Orphan()
				if err := h.Release(ctx); err != nil {
					t.Errorf("Release of an orphaned hold = %v", err)
				}
				if _, err := store.Get(ctx, "k"); !errors.Is(err, lease.ErrNotFound) {
					t.Errorf("an orphaned hold released is still held: %v", err)
				}
			})
		})
	}
}

// TestReleaseAfterLossSparesTheSuccessor: Release of a Hold already lost
// still asks the backend to release (the backend may still hold the lease:
// TestLostAtSafeDeadline), but the lease it names is the lost one, by its
// token and secret ID, so it can never free the key's next lease: not
// another owner's, nor one the same Client took again under the same owner.
// On memstore and boltstore, both judging expiry on one fake clock.
func TestReleaseAfterLossSparesTheSuccessor(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T, clk lease.Clock) lease.Backend
	}{
		{"memstore", func(t *testing.T, clk lease.Clock) lease.Backend {
			return memtest.New(t, memstore.WithClock(clk))
		}},
		{"boltstore", func(t *testing.T, clk lease.Clock) lease.Backend {
			s, err := boltstore.Open(filepath.Join(t.TempDir(), "lease.db"), boltstore.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
	for _, st := range stores {
		for _, sameOwner := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/same-owner=%v", st.name, sameOwner), func(t *testing.T) {
				ctx := context.Background()
				clk := fakeclock.New(time.Unix(1e9, 0))
				f := &faulty{Backend: st.open(t, clk)}
				a := newClient(t, f, "worker-a", lease.WithClock(clk))
				next := newClient(t, f, "worker-b", lease.WithClock(clk))
				if sameOwner {
					next = a
				}
				const ttl = time.Second
				h, err := a.TryAcquire(ctx, "job", ttl)
				if err != nil {
					t.Fatal(err)
				}
				f.failRenewals(errors.Join(lease.ErrUnavailable, errors.New("connection reset")))
				clk.Advance(2 * ttl) // past the client's deadline and the backend's expiry
				<-h.Done()
				if !errors.Is(h.Err(), lease.ErrLost) {
					t.Fatalf("Err = %v, want ErrLost", h.Err())
				}
				f.renewErr.Store(nil)
				succ, err := next.TryAcquire(ctx, "job", ttl)
				if err != nil {
					t.Fatalf("the successor's TryAcquire: %v", err)
				}
				defer succ.Release(ctx)
				if succ.Token() <= h.Token() {
					t.Fatalf("successor token %d not above the lost %d", succ.Token(), h.Token())
				}
				if err := h.Release(ctx); !errors.Is(err, lease.ErrLost) {
					t.Errorf("Release after loss = %v, want ErrLost", err)
				}
				got, err := f.Get(ctx, "job")
				if err != nil || got.Token != succ.Token() || got.Owner != succ.Lease().Owner {
					t.Fatalf("after the lost hold's Release, Get = %+v, %v; want the successor's token %d", got, err, succ.Token())
				}
				if err := succ.Err(); err != nil {
					t.Fatalf("the successor's hold after the lost one's Release: %v", err)
				}
				if _, err := f.Renew(ctx, succ.Lease(), ttl); err != nil {
					t.Fatalf("the successor cannot renew after the lost hold's Release: %v", err)
				}
			})
		}
	}
}
