package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/memstore"
)

// manualClock is a lease.Clock whose time and timers move separately: set
// moves Now without running any timer, as when a process was paused (GC,
// swap, SIGSTOP) and its timer goroutines have not been scheduled yet; fire
// runs one pending timer when the test says so. onStop, when set, runs inside
// Timer.Stop, to interleave the test with the code that stops a timer.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
	onStop func()
}

type manualTimer struct {
	c    *manualClock
	at   time.Time
	f    func()
	done bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	hook := t.c.onStop
	was := !t.done
	t.done = true
	t.c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return was
}

// set moves the clock to now and runs no timer.
func (c *manualClock) set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// pending returns the timers neither stopped nor fired.
func (c *manualClock) pending() []*manualTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*manualTimer
	for _, t := range c.timers {
		if !t.done {
			out = append(out, t)
		}
	}
	return out
}

// waitPending waits until n timers are pending: the renewal goroutine sets
// its timer on its own schedule.
func (c *manualClock) waitPending(t *testing.T, n int) []*manualTimer {
	t.Helper()
	for i := 0; ; i++ {
		if p := c.pending(); len(p) >= n {
			return p
		} else if i > 5000 {
			t.Fatalf("%d timers pending, want %d", len(p), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// fire runs t now (in the caller's goroutine) if it is still pending.
func (c *manualClock) fire(t *manualTimer) {
	c.mu.Lock()
	if t.done {
		c.mu.Unlock()
		return
	}
	t.done = true
	c.mu.Unlock()
	t.f()
}

// TestErrReportsLossOnceTheDeadlinePassed: after a pause past the safe
// deadline, the deadline timer's goroutine and the application's race to run.
// Err must not report the lease as held once the client's clock has passed
// the deadline (I5), whether or not the timer has run yet: the application
// checks Err (directly or through fence.Transport) right before it writes.
func TestErrReportsLossOnceTheDeadlinePassed(t *testing.T) {
	ctx := context.Background()
	clk, h := manualHold(t, memstore.New())
	defer h.Release(ctx)
	if err := h.Err(); err != nil {
		t.Fatalf("Err right after acquire = %v", err)
	}
	clk.set(h.Deadline().Add(-time.Nanosecond))
	if err := h.Err(); err != nil {
		t.Fatalf("Err just before the deadline = %v, want nil", err)
	}
	// The process was paused: the clock is past the deadline, no timer ran.
	clk.set(h.Deadline().Add(time.Millisecond))
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
		store := memstore.New()
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
// manual clock, its renewals held by the returned backend until answered.
func holdWithBlockedRenewals(t *testing.T) (*manualClock, *blockingRenew, *lease.Hold) {
	t.Helper()
	b := &blockingRenew{Backend: memstore.New(), calls: make(chan struct{}), reply: make(chan error)}
	clk, h := manualHold(t, b)
	return clk, b, h
}

// manualHold returns worker-a's one-second hold on "job" through b, on a
// manual clock.
func manualHold(t *testing.T, b lease.Backend) (*manualClock, *lease.Hold) {
	t.Helper()
	clk := newManualClock()
	c := newClient(t, b, "worker-a", lease.WithClock(clk))
	h, err := c.TryAcquire(context.Background(), "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return clk, h
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
	var renewTimer *manualTimer
	for _, tm := range clk.waitPending(t, 2) {
		if renewTimer == nil || tm.at.Before(renewTimer.at) {
			renewTimer = tm
		}
	}
	clk.fire(renewTimer)
	<-b.calls
	// Release stops the deadline timer; at that moment the backend answers
	// the renewal in flight: the lease is gone.
	var once sync.Once
	clk.mu.Lock()
	clk.onStop = func() {
		once.Do(func() {
			b.reply <- fmt.Errorf("%w: superseded", lease.ErrNotHeld)
			<-h.Done()
		})
	}
	clk.mu.Unlock()
	err := h.Release(ctx)
	cause := context.Cause(h.Context())
	if errors.Is(cause, lease.ErrLost) && !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Release = %v while the Hold's cause is %v; want Release to report the loss", err, cause)
	}
	if !errors.Is(cause, lease.ErrLost) && !errors.Is(cause, lease.ErrReleased) {
		t.Fatalf("cause = %v", cause)
	}
}

// TestNoTimerOutlivesRelease: a deadline timer that fires after a renewal
// moved the deadline (it was already running when the renewal stopped it)
// re-arms for the rest; that must not leave a second live timer behind that
// Release cannot stop.
func TestNoTimerOutlivesRelease(t *testing.T) {
	ctx := context.Background()
	clk, h := manualHold(t, memstore.New())
	// The first deadline timer, as the hold set it.
	var first []*manualTimer
	for _, tm := range clk.waitPending(t, 2) {
		if tm.at.Equal(h.Deadline()) {
			first = append(first, tm)
		}
	}
	if len(first) != 1 {
		t.Fatalf("%d timers at the deadline, want 1", len(first))
	}
	stale := first[0].f // the callback, as its goroutine would run it
	// A renewal succeeds and moves the deadline.
	clk.set(clk.Now().Add(350 * time.Millisecond))
	old := h.Deadline()
	for _, tm := range clk.pending() {
		if !tm.at.Equal(old) {
			clk.fire(tm) // the renewal timer
		}
	}
	for i := 0; h.Deadline().Equal(old); i++ {
		if i > 1000 {
			t.Fatal("no renewal")
		}
		time.Sleep(time.Millisecond)
	}
	// The old deadline timer's goroutine, already started before the renewal
	// stopped it, now runs.
	stale()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tm := range clk.pending() {
		t.Errorf("timer for %v still pending after Release", tm.at.Sub(clk.Now()))
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
	var renewTimer *manualTimer
	for _, tm := range clk.waitPending(t, 2) {
		if !tm.at.Equal(deadline) {
			renewTimer = tm
		}
	}
	clk.fire(renewTimer)
	<-b.calls
	clk.set(deadline.Add(time.Millisecond)) // no timer runs
	b.reply <- nil                          // the backend renewed it, but we hear of it too late
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
		c := newClient(t, retokenRenew{memstore.New()}, "worker-a")
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

// TestLongWaitRenewalWithAnotherTokenFails: after a long queue wait the
// Client renews at once; answered with another token, Acquire fails (the
// backend is not to be trusted) and releases what it was granted.
func TestLongWaitRenewalWithAnotherTokenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		ctx := context.Background()
		if _, err := store.Acquire(ctx, "job", "worker-a", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		c := newClient(t, retokenRenew{store}, "worker-b")
		h, err := c.Acquire(ctx, "job", 3*time.Second) // queues for 3 s, a whole TTL
		if err == nil {
			h.Release(ctx)
			t.Fatal("Acquire succeeded although the renewal right after the wait came back with another token")
		}
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("err = %v, want ErrUnavailable", err)
		}
		if l, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("after the failed Acquire the key is %+v, %v; want it released", l, err)
		}
	})
}

// slowAcquire answers every acquisition after delay: a backend, or a
// network, slower than the lease's safe window.
type slowAcquire struct {
	lease.Backend
	delay time.Duration
}

func (b slowAcquire) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, owner, ttl)
	time.Sleep(b.delay)
	return l, err
}

// TestAcquireAnsweredPastTheDeadlineFails: an acquisition whose answer came
// after the safe deadline (the lease may already have expired and gone to
// someone else) yields no Hold, lost from birth, but an error; and the
// lease, still held by the backend, is released for the next contender.
func TestAcquireAnsweredPastTheDeadlineFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		const ttl = 10 * time.Second
		c := newClient(t, slowAcquire{store, ttl - 100*time.Millisecond}, "worker-a")
		ctx := context.Background()
		for name, acquire := range map[string]func(context.Context, string, time.Duration) (*lease.Hold, error){
			"TryAcquire": c.TryAcquire, "Acquire": c.Acquire,
		} {
			h, err := acquire(ctx, "job", ttl)
			if err == nil {
				err := h.Err()
				h.Release(ctx)
				t.Fatalf("%s returned a Hold (Err %v) for a lease answered after its safe deadline", name, err)
			}
			if !errors.Is(err, lease.ErrUnavailable) {
				t.Errorf("%s: err = %v, want ErrUnavailable", name, err)
			}
			if l, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("%s: the lease is %+v, %v; want it released", name, l, err)
			}
		}
	})
}
