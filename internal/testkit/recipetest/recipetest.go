// Package recipetest is the conformance suite of the recipes built on a
// lease.Client — package election (Campaign and its runner) and package
// semaphore — under the faults they must survive: a leader that shuts
// down, a term lost to failing renewals, processes that disagree on a
// semaphore's limit, a waiter that dies at the head of the line, and a
// long line served first come, first served; and with their Client's
// options reaching their own waits (a fake clock that alone moves an
// Observe's reads and a semaphore's polls, at the Client's backoff). Each backend's tests run it
// (memstore, boltstore, pgstore, redisstore, etcdstore, and leasehttp
// over a server with a short wait cap), as they run leasetest.
//
// Each check is a function that returns what it found wrong rather than
// failing the test itself, so that this package's own tests can run it on
// a broken recipe (or a backend that blinds a recipe) and insist that it
// finds the fault: a check that passes a broken recipe proves nothing.
package recipetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/semaphore"
)

// Check is one property of the recipes on a backend: it returns nil when
// the property holds and an error saying what broke otherwise.
type Check func(t *testing.T, b lease.Backend, opts Options) error

// Options adjust the checks to a backend.
type Options struct {
	// RunOptions are added to every election.Run the checks start; the
	// controls pass broken ones.
	RunOptions []election.RunOption
	// Settle is how long a check lets a waiter reach the backend's line
	// before the next one starts. 0 means 50 ms.
	Settle time.Duration
	// ExpiryLag is how late after its expiry the backend may let the next
	// holder in (etcd rounds TTLs up to whole seconds and checks expiry on
	// its own tick). 0 means 1 s.
	ExpiryLag time.Duration
	// NoFIFO skips the FIFO check, for a backend that does not serve
	// waiters in order (one without lease.WaitAcquirer).
	NoFIFO bool
}

func (o Options) expiryLag() time.Duration {
	if o.ExpiryLag > 0 {
		return o.ExpiryLag
	}
	return time.Second
}

func (o Options) settle() time.Duration {
	if o.Settle > 0 {
		return o.Settle
	}
	return 50 * time.Millisecond
}

// Checks are the suite, by name.
var Checks = []struct {
	Name  string
	Check Check
}{
	{"RunnerHandsOverOnShutdown", RunnerHandsOverOnShutdown},
	{"RunnerStopsLeadingOnLoss", RunnerStopsLeadingOnLoss},
	{"RunnerRequeuesWhenLeadGivesUp", RunnerRequeuesWhenLeadGivesUp},
	{"SemaphoreRefusesAnotherLimit", SemaphoreRefusesAnotherLimit},
	{"SemaphoreDeadHeadLeavesTheLine", SemaphoreDeadHeadLeavesTheLine},
	{"SemaphoreServesInOrder", SemaphoreServesInOrder},
	{"ObserveReadsOnTheClientsClock", ObserveReadsOnTheClientsClock},
	{"SemaphorePollsOnTheClientsClock", SemaphorePollsOnTheClientsClock},
}

// Run runs every check on backends newBackend makes, one subtest each.
func Run(t *testing.T, newBackend func(t *testing.T) lease.Backend, opts Options) {
	for _, c := range Checks {
		t.Run(c.Name, func(t *testing.T) {
			if err := c.Check(t, newBackend(t), opts); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// newElector is an Elector on a Client of its own on b, made with opts.
func newElector(b lease.Backend, ttl time.Duration, opts ...lease.Option) (*election.Elector, error) {
	c, err := lease.NewClient(b, opts...)
	if err != nil {
		return nil, err
	}
	return election.New(c, ttl)
}

// newSemaphore is a Semaphore on a Client of its own on b, made with opts.
func newSemaphore(b lease.Backend, name string, n int, ttl time.Duration, opts ...lease.Option) (*semaphore.Semaphore, error) {
	c, err := lease.NewClient(b, opts...)
	if err != nil {
		return nil, err
	}
	return semaphore.New(c, name, n, ttl)
}

// unique returns name with a random suffix, so that checks sharing one
// store (a database, an etcd prefix) never meet.
func unique(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "recipetest/" + name + "-" + hex.EncodeToString(b[:])
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runner is an election.Run in the background whose lead reports each
// term and holds it until its context ends.
type runner struct {
	terms   chan *election.Term
	stopped chan error // OnStoppedLeading's causes
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returned, with err
	err     error
}

// wait waits for Run to return and gives its result.
func (r *runner) wait() error {
	<-r.done
	return r.err
}

func startRunner(t *testing.T, e *election.Elector, key, value string, opts Options, lead election.Lead) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{terms: make(chan *election.Term, 16), stopped: make(chan error, 16), cancel: cancel, done: make(chan struct{})}
	if lead == nil {
		lead = func(ctx context.Context, term *election.Term) error {
			r.terms <- term
			<-ctx.Done()
			return ctx.Err()
		}
	}
	ropts := append([]election.RunOption{
		// A runner that requeues fast fills the buffer while the check
		// looks elsewhere: the callback then waits for the runner's end
		// rather than block Run past it.
		election.OnStoppedLeading(func(_ *election.Term, cause error) {
			select {
			case r.stopped <- cause:
			case <-ctx.Done():
			}
		}),
		election.WithRequeueBackoff(10*time.Millisecond, 100*time.Millisecond),
	}, opts.RunOptions...)
	go func() {
		defer close(r.done)
		r.err = e.Run(ctx, key, value, lead, ropts...)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// RunnerHandsOverOnShutdown: a leader whose runner's context ends stops
// leading and resigns, so the candidate waiting behind it leads at once,
// not at the TTL (a minute here), with a higher token.
func RunnerHandsOverOnShutdown(t *testing.T, b lease.Backend, opts Options) error {
	key := unique("handover")
	e, err := newElector(b, time.Minute)
	if err != nil {
		return err
	}
	a := startRunner(t, e, key, "a", opts, nil)
	var first *election.Term
	select {
	case first = <-a.terms:
	case <-time.After(10 * time.Second):
		return errors.New("the first runner did not lead within 10 s")
	}
	// A broken runner may leave it running: end it with the test.
	t.Cleanup(func() { _ = first.Resign(context.Background()) })
	bb := startRunner(t, e, key, "b", opts, nil)
	time.Sleep(opts.settle())
	start := time.Now()
	a.cancel()
	if err := a.wait(); err != nil {
		return fmt.Errorf("the first runner's Run on shutdown: %v, want nil", err)
	}
	if first.Err() == nil {
		return errors.New("the first term still runs after its runner returned")
	}
	select {
	case next := <-bb.terms:
		if next.Token() <= first.Token() {
			return fmt.Errorf("the next term's token %d is not above %d", next.Token(), first.Token())
		}
		if d := time.Since(start); d > 5*time.Second {
			return fmt.Errorf("the hand-over took %v", d)
		}
	case <-time.After(5 * time.Second):
		return errors.New("the waiting candidate did not lead within 5 s of the leader's shutdown (the TTL is a minute): the term was not resigned")
	}
	return nil
}

// failRenew is a backend as a leader cut off from it sees it: renewals fail.
type failRenew struct{ lease.Backend }

func (failRenew) Renew(context.Context, lease.Lease, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, lease.ErrUnavailable
}

// RunnerStopsLeadingOnLoss: a term lost to failing renewals ends the
// lead's context with lease.ErrLost before the backend lets anyone else
// in; OnStoppedLeading hears of it only after lead returned; the runner
// campaigns again; and the next term's token is higher.
func RunnerStopsLeadingOnLoss(t *testing.T, b lease.Backend, opts Options) error {
	key := unique("loss")
	const ttl = 500 * time.Millisecond
	cut, err := newElector(failRenew{b}, ttl)
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		leading bool
		bad     []string
		tokens  []lease.Token
	)
	lead := func(ctx context.Context, term *election.Term) error {
		mu.Lock()
		if leading {
			bad = append(bad, "two terms led at once")
		}
		leading = true
		tokens = append(tokens, term.Token())
		mu.Unlock()
		<-ctx.Done()
		if c := context.Cause(ctx); !errors.Is(c, lease.ErrLost) && !errors.Is(c, context.Canceled) {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("lead's context ended with %v, want lease.ErrLost", c))
			mu.Unlock()
		}
		mu.Lock()
		leading = false
		mu.Unlock()
		return nil
	}
	r := startRunner(t, cut, key, "cut", opts, lead)
	start := time.Now()
	select {
	case cause := <-r.stopped:
		mu.Lock()
		still := leading
		mu.Unlock()
		if still {
			return errors.New("OnStoppedLeading ran while lead still ran")
		}
		if !errors.Is(cause, lease.ErrLost) {
			return fmt.Errorf("OnStoppedLeading's cause %v, want lease.ErrLost", cause)
		}
		if d := time.Since(start); d > ttl+time.Second {
			return fmt.Errorf("the loss was acted on %v after the term began; the TTL is %v", d, ttl)
		}
	case <-time.After(10 * time.Second):
		return errors.New("a term whose renewals fail was not stopped within 10 s")
	}
	// It campaigns again and, alone, leads again once the old term expired.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n, ts := len(tokens), append([]lease.Token(nil), tokens...)
		problems := append([]string(nil), bad...)
		mu.Unlock()
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		if n >= 2 {
			if ts[1] <= ts[0] {
				return fmt.Errorf("the requeued term's token %d is not above %d", ts[1], ts[0])
			}
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the runner did not lead again within 10 s after a loss")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RunnerRequeuesWhenLeadGivesUp: a lead that returns nil gives the term up
// at once to the next candidate, and its runner campaigns again; a lead
// that returns an error ends Run with it.
func RunnerRequeuesWhenLeadGivesUp(t *testing.T, b lease.Backend, opts Options) error {
	key := unique("giveup")
	e, err := newElector(b, time.Minute)
	if err != nil {
		return err
	}
	terms := make(chan *election.Term, 16)
	giver := startRunner(t, e, key, "giver", opts, func(ctx context.Context, term *election.Term) error {
		select { // it leads again and again: past the buffer, until Run ends
		case terms <- term:
		case <-ctx.Done():
		}
		return nil
	})
	var first *election.Term
	select {
	case first = <-terms:
	case <-time.After(10 * time.Second):
		return errors.New("the runner did not lead within 10 s")
	}
	select {
	case second := <-terms: // alone, it leads again: requeued
		if second.Token() <= first.Token() {
			return fmt.Errorf("the requeued term's token %d is not above %d", second.Token(), first.Token())
		}
	case <-time.After(5 * time.Second):
		return errors.New("a runner whose lead gave the term up did not lead again within 5 s (the TTL is a minute)")
	}
	giver.cancel()
	_ = giver.wait()
	boom := errors.New("lead failed")
	ctx := ctxFor(t)
	if err := e.Run(ctx, key, "failer", func(context.Context, *election.Term) error { return boom }, opts.RunOptions...); !errors.Is(err, boom) {
		return fmt.Errorf("Run whose lead failed: %v, want lead's error", err)
	}
	if l, err := e.Leader(ctx, key); err == nil && l.Value == "failer" {
		return errors.New("a lead that failed left its term running")
	}
	return nil
}

// SemaphoreRefusesAnotherLimit: with three holders admitted under N=3, a
// process that says N=5 admits nobody and is told lease.ErrConflict.
func SemaphoreRefusesAnotherLimit(t *testing.T, b lease.Backend, opts Options) error {
	ctx := ctxFor(t)
	name := unique("limit")
	three, err := newSemaphore(b, name, 3, time.Minute)
	if err != nil {
		return err
	}
	for range 3 {
		slot, err := three.TryAcquire(ctx)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = slot.Release(context.Background()) })
	}
	five, err := newSemaphore(b, name, 5, time.Minute)
	if err != nil {
		return err
	}
	if slot, err := five.TryAcquire(ctx); !errors.Is(err, lease.ErrConflict) {
		if err == nil {
			_ = slot.Release(ctx)
		}
		return fmt.Errorf("TryAcquire with N=5 against three holders of N=3: %v, want lease.ErrConflict", err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if slot, err := five.Acquire(actx); !errors.Is(err, lease.ErrConflict) {
		if err == nil {
			_ = slot.Release(ctx)
		}
		return fmt.Errorf("semaphore.Acquire with N=5 against three holders of N=3: %v, want lease.ErrConflict", err)
	}
	return nil
}

// deadAfterTurn is a backend as a process sees it that dies while at the
// head of a semaphore's line: it can neither renew nor give anything back.
type deadAfterTurn struct{ lease.Backend }

func (deadAfterTurn) Renew(context.Context, lease.Lease, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, lease.ErrUnavailable
}

func (deadAfterTurn) Release(context.Context, lease.Lease) error { return lease.ErrUnavailable }

// SemaphoreDeadHeadLeavesTheLine: a waiter that dies at the head of the
// line holds the next one up at most semaphore.MaxLineTTL and the
// backend's expiry lag, not the slots' TTL of a minute, once a slot is
// free.
func SemaphoreDeadHeadLeavesTheLine(t *testing.T, b lease.Backend, opts Options) error {
	ctx := ctxFor(t)
	name := unique("deadhead")
	sem := func(b lease.Backend) (*semaphore.Semaphore, error) { return newSemaphore(b, name, 1, time.Minute) }
	live, err := sem(b)
	if err != nil {
		return err
	}
	holder, err := live.TryAcquire(ctx)
	if err != nil {
		return err
	}
	doomed, err := sem(deadAfterTurn{b})
	if err != nil {
		return err
	}
	dctx, die := context.WithCancel(ctx)
	defer die()
	dead := make(chan error, 1)
	go func() {
		_, err := doomed.Acquire(dctx)
		dead <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := b.Get(ctx, name+"/queue"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the doomed waiter did not reach the head of the line within 10 s")
		}
	}
	die()
	<-dead
	if err := holder.Release(ctx); err != nil {
		return err
	}
	start := time.Now()
	bound := semaphore.MaxLineTTL + opts.expiryLag()
	actx, cancel := context.WithTimeout(ctx, bound+2*time.Second)
	defer cancel()
	slot, err := live.Acquire(actx)
	if err != nil {
		return fmt.Errorf("the waiter behind a dead head: %v after %v", err, time.Since(start))
	}
	defer slot.Release(ctx)
	if d := time.Since(start); d > bound {
		return fmt.Errorf("the waiter behind a dead head waited %v, want at most MaxLineTTL and the expiry lag (%v)", d, bound)
	}
	return nil
}

// SemaphoreServesInOrder: waiters for a semaphore of one slot are served
// in the order they came, through waits longer than a server's wait cap
// where the backend is a server with a short one.
func SemaphoreServesInOrder(t *testing.T, b lease.Backend, opts Options) error {
	if opts.NoFIFO {
		t.Skip("the backend does not serve waiters in order")
	}
	ctx := ctxFor(t)
	name := unique("fifo")
	newSem := func() (*semaphore.Semaphore, error) { return newSemaphore(b, name, 1, time.Minute) }
	s, err := newSem()
	if err != nil {
		return err
	}
	holder, err := s.TryAcquire(ctx)
	if err != nil {
		return err
	}
	const waiters = 5
	type served struct {
		i    int
		slot *semaphore.Slot
		err  error
	}
	out := make(chan served, waiters)
	for i := range waiters {
		w, err := newSem()
		if err != nil {
			return err
		}
		go func() {
			slot, err := w.Acquire(ctx)
			out <- served{i, slot, err}
		}()
		time.Sleep(opts.settle())
	}
	// Let every wait outlast a short server wait cap several times.
	time.Sleep(4 * opts.settle())
	prev := holder.Hold
	for want := range waiters {
		if err := prev.Release(ctx); err != nil {
			return err
		}
		got := <-out
		if got.err != nil {
			return fmt.Errorf("waiter %d: %v", got.i, got.err)
		}
		if got.i != want {
			_ = got.slot.Release(ctx)
			return fmt.Errorf("waiter %d was served in place %d (not first come, first served)", got.i, want)
		}
		prev = got.slot.Hold
	}
	return prev.Release(ctx)
}

// polled is a backend with its abilities hidden (wait, notify, watch), so
// that the recipes on it poll: their own waits are what a check sees.
type polled struct{ lease.Backend }

// pendingWithin returns the first of clk's pending timers due in [from,
// to], waiting up to 10 s for one to be set.
func pendingWithin(clk *fakeclock.Clock, from, to time.Time) (time.Time, bool) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, at := range clk.Pending() {
			if !at.Before(from) && !at.After(to) {
				return at, true
			}
		}
	}
	return time.Time{}, false
}

// ObserveReadsOnTheClientsClock: an Elector that reads the leader (on a
// backend without a watch) pauses between reads at its Client's backoff
// (lease.WithBackoff) on its Client's clock (lease.WithClock), as the
// Client's own waits do: the pause is a timer on the fake clock at the
// backoff, and a leader elected meanwhile is reported once the fake clock
// is moved past it — an hour of fake time, no real wait.
func ObserveReadsOnTheClientsClock(t *testing.T, b lease.Backend, opts Options) error {
	ctx := ctxFor(t)
	key := unique("clock-observe")
	const backoff = time.Hour
	clk := fakeclock.New(time.Now())
	t0 := clk.Now()
	e, err := newElector(polled{b}, time.Minute, lease.WithClock(clk), lease.WithBackoff(backoff, backoff))
	if err != nil {
		return err
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan election.Leader, 16)
	go func() {
		defer close(seen)
		for l, err := range e.Observe(octx, key) {
			if err != nil {
				return
			}
			seen <- l
		}
	}()
	select {
	case l := <-seen:
		if l.Token != 0 {
			return fmt.Errorf("an Observe of a fresh key reported %+v first, want no leader", l)
		}
	case <-time.After(10 * time.Second):
		return errors.New("an Observe reported nothing within 10 s")
	}
	if _, ok := pendingWithin(clk, t0.Add(backoff/2), t0.Add(backoff)); !ok {
		return fmt.Errorf("an Observe set no timer on its Client's clock at the Client's backoff (%v) before its next read; pending: %v",
			backoff, clk.Pending())
	}
	leader, err := newElector(b, time.Minute)
	if err != nil {
		return err
	}
	term, err := leader.Campaign(ctx, key, "leader")
	if err != nil {
		return err
	}
	defer term.Resign(context.WithoutCancel(ctx))
	clk.Advance(backoff)
	select {
	case l, ok := <-seen:
		if !ok || l.Value != "leader" || l.Token != term.Token() {
			return fmt.Errorf("an Observe after the fake clock passed its pause: %+v (ended: %v), want the new leader", l, !ok)
		}
	case <-time.After(10 * time.Second):
		return errors.New("an Observe did not report the new leader within 10 s of the fake clock passing its pause")
	}
	return nil
}

// SemaphorePollsOnTheClientsClock: the head of a semaphore's line, on a
// backend without a watch, polls for a slot at its Client's backoff on its
// Client's clock: its pause is a timer on the fake clock, and a slot freed
// meanwhile is taken once the fake clock is moved past it.
func SemaphorePollsOnTheClientsClock(t *testing.T, b lease.Backend, opts Options) error {
	ctx := ctxFor(t)
	name := unique("clock-semaphore")
	// Below the line lease's first renewal (0.6 s on the fake clock with
	// no jitter: its TTL is MaxLineTTL), so that only the poll is due.
	const backoff = 500 * time.Millisecond
	clk := fakeclock.New(time.Now())
	t0 := clk.Now()
	holder, err := newSemaphore(b, name, 1, time.Minute)
	if err != nil {
		return err
	}
	slot, err := holder.TryAcquire(ctx)
	if err != nil {
		return err
	}
	defer slot.Release(context.WithoutCancel(ctx))
	waiter, err := newSemaphore(polled{b}, name, 1, time.Minute,
		lease.WithClock(clk), lease.WithBackoff(backoff, backoff), lease.WithJitter(func() float64 { return 0 }))
	if err != nil {
		return err
	}
	type got struct {
		slot *semaphore.Slot
		err  error
	}
	out := make(chan got, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		s, err := waiter.Acquire(wctx)
		out <- got{s, err}
	}()
	if _, ok := pendingWithin(clk, t0.Add(backoff/2), t0.Add(backoff)); !ok {
		return fmt.Errorf("the semaphore's poll set no timer on its Client's clock at the Client's backoff (%v); pending: %v",
			backoff, clk.Pending())
	}
	if err := slot.Release(ctx); err != nil {
		return err
	}
	clk.Advance(backoff)
	select {
	case g := <-out:
		if g.err != nil {
			return fmt.Errorf("the waiter after the fake clock passed its poll's pause: %v", g.err)
		}
		return g.slot.Release(ctx)
	case <-time.After(10 * time.Second):
		return errors.New("the waiter did not take the freed slot within 10 s of the fake clock passing its poll's pause")
	}
}
