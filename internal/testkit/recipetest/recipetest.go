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
	"github.com/leasehq/lease/internal/testkit/poll"
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
	// Waiting reports how many wait in b's line for key (behind its holder),
	// so that a check knows a waiter has reached the line before the next
	// one comes. A check that needs to know refuses to run with neither
	// Waiting nor Idle.
	Waiting func(ctx context.Context, b lease.Backend, key string) (int, error)
	// Idle, for checks run in a testing/synctest bubble on a backend with
	// no line to look into (one whose waiters poll), is synctest.Wait: it
	// returns once every goroutine of the check is blocked until the
	// bubble's clock moves or another goroutine acts, so a waiter started
	// before it has tried the key and waits for its next try. Used where
	// Waiting is nil.
	Idle func()
	// CappedWaits, for a backend behind a server with a short wait cap,
	// reports how many acquire waits the server has ended at its cap so
	// far (each is sent again at once): SemaphoreServesInOrder then lets
	// every waiter's wait end at the cap several times before the line
	// moves. nil for a backend whose waits last as long as they are asked.
	CappedWaits func(ctx context.Context, b lease.Backend) (int, error)
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

// errNoLine is reachLine's error when Options give it no way to know.
var errNoLine = errors.New("recipetest: Options have neither Waiting nor Idle: nothing tells when a waiter has reached the line")

// reachLine waits until n wait in b's line for key, through opts.Waiting;
// without it, until the check's goroutines are idle (opts.Idle).
func reachLine(b lease.Backend, opts Options, key string, n int) error {
	if opts.Waiting == nil {
		if opts.Idle == nil {
			return errNoLine
		}
		opts.Idle()
		return nil
	}
	return poll.Err(10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := opts.Waiting(ctx, b, key)
		if err == nil && got < n {
			err = fmt.Errorf("%d wait in the line for %q, want %d", got, key, n)
		}
		return err
	})
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
	if err := reachLine(b, opts, key, 1); err != nil {
		return fmt.Errorf("the second candidate: %w", err)
	}
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
	var ts []lease.Token
	if err := poll.Err(10*time.Second, func() error {
		mu.Lock()
		ts = append([]lease.Token(nil), tokens...)
		problems := append([]string(nil), bad...)
		mu.Unlock()
		if len(problems) > 0 || len(ts) >= 2 {
			return nil
		}
		return errors.New("the runner did not lead again after a loss")
	}); err != nil {
		return err
	}
	mu.Lock()
	problems := append([]string(nil), bad...)
	mu.Unlock()
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if ts[1] <= ts[0] {
		return fmt.Errorf("the requeued term's token %d is not above %d", ts[1], ts[0])
	}
	return nil
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
// head of a semaphore's line: it can neither renew nor give anything back,
// and once die has returned nothing it sent reaches the backend any more.
// A dead process's last requests do not outlive it here: die waits for the
// requests in flight, which run to their answer, not cut short by the
// caller's context. A request cut short can still land later (a loaded
// server applies an acquire whose client has hung up), and a slot it took
// after the live holder's release would stay with the dead process for a
// slot's TTL: a fault of the check's timing, not of the line.
type deadAfterTurn struct {
	lease.Backend
	ctx context.Context // the check's: bounds the requests in flight

	mu       sync.Mutex
	dead     bool
	inflight sync.WaitGroup
}

// send runs one request unless the process is dead.
func (d *deadAfterTurn) send(f func(ctx context.Context) error) error {
	d.mu.Lock()
	if d.dead {
		d.mu.Unlock()
		return fmt.Errorf("%w: recipetest: the process is dead", lease.ErrUnavailable)
	}
	d.inflight.Add(1)
	d.mu.Unlock()
	defer d.inflight.Done()
	return f(d.ctx)
}

// die ends the process: no request starts from now on, and die returns
// once those in flight have their answers.
func (d *deadAfterTurn) die() {
	d.mu.Lock()
	d.dead = true
	d.mu.Unlock()
	d.inflight.Wait()
}

func (d *deadAfterTurn) Acquire(_ context.Context, key, owner string, ttl time.Duration) (l lease.Lease, err error) {
	err = d.send(func(ctx context.Context) error {
		l, err = d.Backend.Acquire(ctx, key, owner, ttl)
		return err
	})
	return l, err
}

func (d *deadAfterTurn) Get(_ context.Context, key string) (l lease.Lease, err error) {
	err = d.send(func(ctx context.Context) error {
		l, err = d.Backend.Get(ctx, key)
		return err
	})
	return l, err
}

func (d *deadAfterTurn) List(_ context.Context, prefix string, page lease.Page) (p lease.ListPage, err error) {
	err = d.send(func(ctx context.Context) error {
		p, err = d.Backend.List(ctx, prefix, page)
		return err
	})
	return p, err
}

func (*deadAfterTurn) Renew(context.Context, lease.Lease, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, lease.ErrUnavailable
}

func (*deadAfterTurn) Release(context.Context, lease.Lease) error { return lease.ErrUnavailable }

// handOff bounds, in real time, what the next waiter does once the line
// is free before a slot is granted to it: its wait answered (a client
// paces a wait re-sent to a server with a short cap up to 500 ms, and a
// grant the server holds for an absent client waits up to half the
// turn's TTL), the renewal of a turn that waited long, a watch or a list,
// and the slot's acquire between two lists. It is the turn's own TTL,
// MaxLineTTL: a waiter whose renewals cannot keep up with its hand-off
// loses its turn anyway. Through leasehttp under -race on two cores at a
// load average of 25 it took at most 1 s in 119 runs of 122 and 2.3 s in
// the slowest, where single requests took 1.3 s. The line's own hold is
// measured apart, and exactly: its lease's TTL.
const handOff = semaphore.MaxLineTTL

// SemaphoreDeadHeadLeavesTheLine: a waiter that dies at the head of the
// line holds the next one up at most semaphore.MaxLineTTL, not the slots'
// TTL of a minute: its line lease is asked for at most MaxLineTTL, and
// once a slot is free the next waiter is admitted within the backend's
// expiry lag and its own hand-off (handOff) of that lease's expiry, both
// on the backend's clock.
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
	process := &deadAfterTurn{Backend: b, ctx: ctx}
	doomed, err := sem(process)
	if err != nil {
		return err
	}
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	dead := make(chan error, 1)
	go func() {
		_, err := doomed.Acquire(dctx)
		dead <- err
	}()
	line, err := headsLine(ctx, b, name)
	if err != nil {
		return fmt.Errorf("the doomed waiter: %w", err)
	}
	process.die()
	stop()
	<-dead
	if line.TTL > semaphore.MaxLineTTL {
		return fmt.Errorf("the head of the line holds it for %v, want at most MaxLineTTL (%v)", line.TTL, semaphore.MaxLineTTL)
	}
	if err := holder.Release(ctx); err != nil {
		return err
	}
	// The line is free when the dead head's lease on it expires.
	bound := opts.expiryLag() + handOff
	actx, cancel := context.WithTimeout(ctx, max(time.Until(line.Expires), 0)+bound+2*time.Second)
	defer cancel()
	slot, err := live.Acquire(actx)
	if err != nil {
		return fmt.Errorf("the waiter behind a dead head, whose line lease expired at %v: %v at %v",
			line.Expires.Format(time.StampMilli), err, time.Now().Format(time.StampMilli))
	}
	defer slot.Release(ctx)
	// When the slot was granted, on the backend's clock.
	l := slot.Lease()
	if late := l.Expires.Add(-l.TTL).Sub(line.Expires); late > bound {
		return fmt.Errorf("the waiter behind a dead head was admitted %v after its line lease expired, want at most the expiry lag and the hand-off (%v)", late, bound)
	}
	return nil
}

// headsLine waits until someone heads semaphore name's line: holds its
// lease.
func headsLine(ctx context.Context, b lease.Backend, name string) (lease.Lease, error) {
	var line lease.Lease
	err := poll.Err(10*time.Second, func() error {
		var err error
		if line, err = b.Get(ctx, name+"/queue"); err != nil {
			return fmt.Errorf("nobody heads the line: %w", err)
		}
		return nil
	})
	return line, err
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
		// The first heads the line (holds its lease) and looks at the
		// slots; the others wait for the line's lease, in the order they
		// came.
		if i == 0 {
			_, err = headsLine(ctx, b, name)
		} else {
			err = reachLine(b, opts, name+"/queue", i)
		}
		if err != nil {
			return fmt.Errorf("waiter %d: %w", i, err)
		}
	}
	if err := outlastCap(ctx, b, opts, waiters-1); err != nil {
		return err
	}
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

// capsPerWait is how many times each wait of SemaphoreServesInOrder ends
// at a server's wait cap, and is sent again, before the line moves.
const capsPerWait = 4

// outlastCap returns once the server behind b has ended waits at its cap
// capsPerWait times for each of n waiters (opts.CappedWaits), at once for a
// backend without a cap.
func outlastCap(ctx context.Context, b lease.Backend, opts Options, n int) error {
	if opts.CappedWaits == nil {
		return nil
	}
	base, err := opts.CappedWaits(ctx, b)
	if err != nil {
		return err
	}
	want := base + capsPerWait*n
	return poll.Err(30*time.Second, func() error {
		got, err := opts.CappedWaits(ctx, b)
		if err == nil && got < want {
			err = fmt.Errorf("the server ended %d waits at its cap, want %d (%d waiters × %d)", got-base, want-base, n, capsPerWait)
		}
		return err
	})
}

// polled is a backend with its abilities hidden (wait, notify, watch), so
// that the recipes on it poll: their own waits are what a check sees.
type polled struct{ lease.Backend }

// pendingWithin returns the first of clk's pending timers due in [from,
// to], waiting up to 10 s for one to be set.
func pendingWithin(clk *fakeclock.Clock, from, to time.Time) (time.Time, bool) {
	var found time.Time
	err := poll.Err(10*time.Second, func() error {
		for _, at := range clk.Pending() {
			if !at.Before(from) && !at.After(to) {
				found = at
				return nil
			}
		}
		return errors.New("no timer due in the range")
	})
	return found, err == nil
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
	// A term that outlasts the fake hour: Observe never reports a leader
	// past its Expires on its own clock, and the fake clock runs an hour
	// ahead of the backend's once advanced.
	leader, err := newElector(b, 3*backoff)
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
