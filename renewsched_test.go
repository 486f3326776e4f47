package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// batchCounter is a backend with RenewBatch (each renewal made as Renew
// makes it) that counts its calls and records, for each lease, the send
// times of its renewals; failKey, when set, has its renewals refused with
// ErrNotHeld while the rest of the batch is renewed.
type batchCounter struct {
	lease.Backend
	mu      sync.Mutex
	batches int
	singles int
	largest int
	sent    map[string][]time.Time
	failKey string
}

func newBatchCounter(b lease.Backend) *batchCounter {
	return &batchCounter{Backend: b, sent: map[string][]time.Time{}}
}

func (b *batchCounter) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	b.mu.Lock()
	b.singles++
	b.sent[l.Key] = append(b.sent[l.Key], time.Now())
	b.mu.Unlock()
	return b.Backend.Renew(ctx, l, ttl)
}

func (b *batchCounter) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.batches++
	b.largest = max(b.largest, len(renewals))
	for _, r := range renewals {
		b.sent[r.Lease.Key] = append(b.sent[r.Lease.Key], time.Now())
	}
	fail := b.failKey
	b.mu.Unlock()
	out := make([]lease.RenewResult, len(renewals))
	for i, r := range renewals {
		if r.Lease.Key == fail {
			out[i].Err = fmt.Errorf("%w: refused for the test", lease.ErrNotHeld)
			continue
		}
		out[i].Lease, out[i].Err = b.Backend.Renew(ctx, r.Lease, r.TTL)
	}
	return out, nil
}

// TestClientCoalescesRenewals: one Client holding 1,000 leases at TTL 3 s,
// acquired over a second, keeps them all alive for 9 s with at most 200
// batches (one each per lease and third of a TTL would be about 9,000
// renewals), never through a Renew of its own, with no batch over
// MaxRenewBatch, and with no lease renewed later after its last renewal
// than a lone hold's schedule allows (1.1 × TTL/3).
func TestClientCoalescesRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBatchCounter(memtest.New(t))
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		const n, ttl = 1000, 3 * time.Second
		holds := make([]*lease.Hold, n)
		acquired := make(map[string]time.Time, n)
		for i := range holds {
			h, err := c.TryAcquire(ctx, fmt.Sprintf("shard/%04d", i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			holds[i] = h
			acquired[h.Key()] = time.Now()
			time.Sleep(time.Millisecond)
		}
		b.mu.Lock()
		b.batches, b.singles = 0, 0
		b.mu.Unlock()
		time.Sleep(9 * time.Second)
		synctest.Wait()
		for _, h := range holds {
			if err := h.Err(); err != nil {
				t.Fatalf("%s lost while renewing normally: %v", h.Key(), err)
			}
		}
		b.mu.Lock()
		batches, singles, largest := b.batches, b.singles, b.largest
		latest := time.Duration(0)
		for key, sent := range b.sent {
			prev := acquired[key]
			for _, at := range sent {
				latest = max(latest, at.Sub(prev))
				prev = at
			}
		}
		b.mu.Unlock()
		t.Logf("%d batches in 9 s, the largest %d renewals; the longest gap between renewals %v", batches, largest, latest)
		if singles != 0 {
			t.Errorf("%d renewals by Renew alone, want every one in a batch", singles)
		}
		if batches > 200 || batches == 0 {
			t.Errorf("%d batches in 9 s for %d holds, want 1 to 200", batches, n)
		}
		if largest > lease.MaxRenewBatch {
			t.Errorf("a batch of %d renewals, over MaxRenewBatch", largest)
		}
		if bound := ttl / 3 * 11 / 10; latest > bound {
			t.Errorf("a lease renewed %v after its last renewal, later than a lone hold (%v)", latest, bound)
		}
		for _, h := range holds {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestBatchFailureIsPerHold: a renewal the backend refuses within a batch
// loses that hold alone; the others in the same batch stay held, renewed.
func TestBatchFailureIsPerHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBatchCounter(memtest.New(t))
		c := newClient(t, b, "worker-a")
		holds := tryAcquireN(t, c, 8, 3*time.Second)
		b.mu.Lock()
		b.failKey = "shard/00003"
		b.mu.Unlock()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		onlyLost(t, holds, 3)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.batches == 0 || b.singles != 0 {
			t.Errorf("%d batches and %d lone renewals; want batches only", b.batches, b.singles)
		}
	})
}

// wholeRefuser refuses, whole, every batch with a renewal of refuseKey in
// it, as leasehttp's server refuses a batch with a key the credential does
// not cover (403 forbidden): with an error that is neither ErrUnavailable
// nor about any one renewal.
type wholeRefuser struct {
	*batchCounter
	refuseKey string
	refused   atomic.Int64
}

var errRefusedWhole = errors.New("forbidden: a key of the batch is not covered")

func (r *wholeRefuser) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	for _, x := range renewals {
		if x.Lease.Key == r.refuseKey {
			r.refused.Add(1)
			return nil, errRefusedWhole
		}
	}
	return r.batchCounter.RenewBatch(ctx, renewals)
}

// TestBatchRefusedWholeCostsOnlyItsCause: a batch the backend refuses
// whole for one of its renewals' sake (leasehttp: a credential narrowed
// under held leases) loses that renewal's hold alone; the holds that rode
// in the same batches stay held, renewed one each.
func TestBatchRefusedWholeCostsOnlyItsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &wholeRefuser{batchCounter: newBatchCounter(memtest.New(t)), refuseKey: "shard/00003"}
		c := newClient(t, b, "worker-a")
		holds := tryAcquireN(t, c, 8, 3*time.Second)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		onlyLost(t, holds, 3)
		if b.refused.Load() == 0 {
			t.Error("no batch was refused: the test tried nothing")
		}
	})
}

// onlyLost checks that of holds, renewed in the same batches, holds[lost]
// alone was lost, and releases them when the test ends.
func onlyLost(t *testing.T, holds []*lease.Hold, lost int) {
	t.Helper()
	for i, h := range holds {
		t.Cleanup(func() { h.Release(context.Background()) })
		err := h.Err()
		if i == lost {
			if !errors.Is(err, lease.ErrLost) {
				t.Errorf("the refused hold: Err = %v, want ErrLost", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("hold %s, renewed in the same batches as the refused one: %v", h.Key(), err)
		}
	}
}

// TestBatchUnavailableRetries: a batch the backend fails as a whole
// (ErrUnavailable) is retried; holds survive a short outage.
func TestBatchUnavailableRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &outage{batchCounter: newBatchCounter(memtest.New(t))}
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		h, err := c.TryAcquire(ctx, "job", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		b.down(true)
		time.Sleep(1500 * time.Millisecond) // the first renewal (about 1 s) fails
		b.down(false)
		time.Sleep(5 * time.Second)
		if err := h.Err(); err != nil {
			t.Fatalf("lost after a 1.5 s outage of a 3 s lease: %v", err)
		}
		if b.failed == 0 {
			t.Error("no batch failed during the outage")
		}
	})
}

type outage struct {
	*batchCounter
	mu     sync.Mutex
	isDown bool
	failed int
}

func (o *outage) down(d bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.isDown = d
}

func (o *outage) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	o.mu.Lock()
	if o.isDown {
		o.failed++
		o.mu.Unlock()
		return nil, fmt.Errorf("%w: connection refused", lease.ErrUnavailable)
	}
	o.mu.Unlock()
	return o.batchCounter.RenewBatch(ctx, renewals)
}

// TestHoldsCostNoGoroutineAndLittleMemory: a Client with 100,000 holds
// keeps no goroutine per hold and at most 1 KB of heap per hold, the
// backend's own record of each lease included.
func TestHoldsCostNoGoroutineAndLittleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 holds")
	}
	const n = 100_000
	ctx := context.Background()
	store := memtest.New(t)
	c := newClient(t, store, "worker-a")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant/%06d", i)
	}
	holds := make([]*lease.Hold, 0, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	for _, k := range keys {
		h, err := c.TryAcquire(ctx, k, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	extra := runtime.NumGoroutine() - goroutines
	perHold := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d holds: %.0f bytes of heap and %.3f goroutines per hold", n, perHold, float64(extra)/n)
	if perHold > 1024 {
		t.Errorf("%.0f bytes of heap per hold, want at most 1 KB", perHold)
	}
	if extra > 0 {
		t.Errorf("%d goroutines more with %d holds, want none", extra, n)
	}
	for _, h := range holds {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// congested is a backend behind a congested server, as an HTTP client with
// a timeout sees it: the server does one request at a time, perRenewal of
// work for each renewal in it, and finishes a request whether or not its
// caller still waits; the caller gives a request up after timeout
// (ErrUnavailable). It records the most RenewBatch calls in flight at once.
type congested struct {
	lease.Backend
	perRenewal, timeout time.Duration
	work                chan func()

	mu                              sync.Mutex
	inFlight, maxInFlight, timedOut int
	batches                         int
}

func newCongested(b lease.Backend, perRenewal, timeout time.Duration) *congested {
	c := &congested{Backend: b, perRenewal: perRenewal, timeout: timeout, work: make(chan func(), 1<<16)}
	go func() {
		for job := range c.work {
			job()
		}
	}()
	return c
}

// close stops the server's goroutine.
func (c *congested) close() { close(c.work) }

func (c *congested) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.inFlight++
	c.batches++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
	}()
	answer := make(chan []lease.RenewResult, 1)
	c.work <- func() {
		// in a bubble: TestRenewalsInFlightAreBounded's server works len(renewals) × perRenewal.
		time.Sleep(time.Duration(len(renewals)) * c.perRenewal)
		out := make([]lease.RenewResult, len(renewals))
		for i, r := range renewals {
			out[i].Lease, out[i].Err = c.Backend.Renew(context.Background(), r.Lease, r.TTL)
		}
		answer <- out
	}
	timeout := time.NewTimer(c.timeout)
	defer timeout.Stop()
	select {
	case out := <-answer:
		return out, nil
	case <-timeout.C:
		c.mu.Lock()
		c.timedOut++
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: no answer in %v", lease.ErrUnavailable, c.timeout)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", lease.ErrUnavailable, ctx.Err())
	}
}

// TestRenewalsInFlightAreBounded: a Client with 16,384 holds at TTL 3 s,
// acquired at once, on a server that renews 25,000 leases a second one
// request at a time, whose caller gives a request up after 100 ms. Renewing
// them all every TTL/3 takes two thirds of the server, but sent at once,
// as one window opens for all of them, the 64 batches queue for 650 ms: all
// but the first few time out and are retried into the same queue, and the
// holds are lost. The Client keeps at most MaxRenewBatchesInFlight batches
// in flight, the rest waiting their turn, and loses none.
func TestRenewalsInFlightAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCongested(memtest.New(t), 40*time.Microsecond, 100*time.Millisecond)
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		const n, ttl = 16384, 3 * time.Second
		holds := tryAcquireN(t, c, n, ttl)
		time.Sleep(9 * time.Second)
		lost := countLost(holds)
		b.mu.Lock()
		t.Logf("%d of %d holds lost in 9 s; %d batches, %d timed out, at most %d in flight",
			lost, n, b.batches, b.timedOut, b.maxInFlight)
		if b.maxInFlight > lease.MaxRenewBatchesInFlight {
			t.Errorf("%d batches in flight at once, want at most %d", b.maxInFlight, lease.MaxRenewBatchesInFlight)
		}
		b.mu.Unlock()
		if lost > 0 {
			t.Errorf("%d of %d holds lost on a server with the capacity to renew them all", lost, n)
		}
		for _, h := range holds {
			_ = h.Release(ctx)
		}
		time.Sleep(ttl) // the server's queue drains, the callers' timeouts pass
		synctest.Wait()
		b.close()
		synctest.Wait()
	})
}

// countLost counts the holds lost (or released).
func countLost(holds []*lease.Hold) int {
	lost := 0
	for _, h := range holds {
		if h.Err() != nil {
			lost++
		}
	}
	return lost
}

// slowRenewer is a backend without RenewBatch whose Renew takes delay; it
// records the most Renew calls in flight at once.
type slowRenewer struct {
	lease.Backend
	delay time.Duration
	flights
}

// flights counts calls in flight and the most at once.
type flights struct {
	mu                    sync.Mutex
	inFlight, maxInFlight int
}

// start counts a call in flight until the function it returns is called.
func (f *flights) start() func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.inFlight--
	}
}

// most is the most calls that were in flight at once.
func (f *flights) most() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxInFlight
}

func (s *slowRenewer) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	defer s.start()()
	time.Sleep(s.delay) // in a bubble: TestLoneRenewalsInFlightAreBounded's slow answers
	return s.Backend.Renew(ctx, l, ttl)
}

// TestLoneRenewalsInFlightAreBounded: on a backend without RenewBatch, a
// Client whose 4,096 holds fall due together has at most
// MaxRenewBatchesInFlight × MaxRenewBatch Renew calls in flight, the rest
// waiting their turn, and keeps every hold.
func TestLoneRenewalsInFlightAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowRenewer{Backend: memtest.New(t), delay: 50 * time.Millisecond}
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		const n, ttl = 4096, 3 * time.Second
		holds := tryAcquireN(t, c, n, ttl)
		time.Sleep(3 * time.Second)
		for _, h := range holds {
			if err := h.Err(); err != nil {
				t.Fatalf("%s lost: %v", h.Key(), err)
			}
		}
		most := b.most()
		t.Logf("at most %d renewals in flight for %d holds", most, n)
		if bound := lease.MaxRenewBatchesInFlight * lease.MaxRenewBatch; most > bound {
			t.Errorf("%d renewals in flight at once, want at most %d", most, bound)
		}
		for _, h := range holds {
			_ = h.Release(ctx)
		}
		time.Sleep(time.Second) // the batches in flight are answered
		synctest.Wait()
	})
}

// hung is a backend whose RenewBatch never answers: it records the keys
// sent and waits for the caller to give up.
type hung struct {
	lease.Backend
	mu   sync.Mutex
	sent map[string]bool
}

func (h *hung) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	h.mu.Lock()
	for _, r := range renewals {
		h.sent[r.Lease.Key] = true
	}
	h.mu.Unlock()
	<-ctx.Done()
	return nil, fmt.Errorf("%w: %w", lease.ErrUnavailable, ctx.Err())
}

// TestWaitingHoldIsJudgedByItsOwnDeadline: with the Client's batches of
// holds of TTL 30 s hung at the server (its window, never answered, stays
// at one), holds of TTL 3 s that fall due after them wait for a request
// and are never sent; each is lost at its own deadline, no later.
func TestWaitingHoldIsJudgedByItsOwnDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &hung{Backend: memtest.New(t), sent: map[string]bool{}}
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		inFlight := lease.MaxRenewBatchesInFlight * lease.MaxRenewBatch
		var (
			holds  []*lease.Hold
			mu     sync.Mutex
			lostAt = map[string]time.Time{}
		)
		acquire := func(i int, ttl time.Duration) {
			h, err := c.TryAcquire(ctx, fmt.Sprintf("shard/%04d", i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			context.AfterFunc(h.Context(), func() {
				mu.Lock()
				defer mu.Unlock()
				lostAt[h.Key()] = time.Now()
			})
			holds = append(holds, h)
		}
		for i := range inFlight {
			acquire(i, 30*time.Second)
		}
		time.Sleep(9500 * time.Millisecond) // their batches, sent at about 9 s, hang
		for i := range 10 {
			acquire(inFlight+i, 3*time.Second)
		}
		time.Sleep(30 * time.Second) // the hung batches are given up at their deadlines
		synctest.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		for _, h := range holds[inFlight:] {
			if b.sent[h.Key()] {
				t.Errorf("%s was sent while the Client's batches hung", h.Key())
			}
			if !errors.Is(h.Err(), lease.ErrLost) {
				t.Fatalf("%s: Err = %v, want ErrLost", h.Key(), h.Err())
			}
			if at := lostAt[h.Key()]; !at.Equal(h.Deadline()) {
				t.Errorf("%s lost at %v, %v after its deadline", h.Key(), at, at.Sub(h.Deadline()))
			}
		}
	})
}

// tryAcquireN acquires n keys through c, each for ttl, at once.
func tryAcquireN(t *testing.T, c *lease.Client, n int, ttl time.Duration) []*lease.Hold {
	t.Helper()
	holds := make([]*lease.Hold, n)
	for i := range holds {
		h, err := c.TryAcquire(context.Background(), fmt.Sprintf("shard/%05d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		holds[i] = h
	}
	return holds
}

// shuffled is a busy server shared by many Clients, as lease serve is by
// the callers of one machine: it works one request at a time, perRenewal
// for each renewal in it, and takes the next from its queue in no
// particular order (a server's goroutines, connections and locks keep no
// order among requests). It finishes a request whether or not its caller
// still waits, and records the most RenewBatch calls in flight at once.
type shuffled struct {
	lease.Backend
	perRenewal time.Duration
	rng        *rand.Rand
	ready      chan struct{}
	done       chan struct{}

	flights

	mu    sync.Mutex
	queue []shuffledJob
}

type shuffledJob struct {
	renewals []lease.Renewal
	answer   chan []lease.RenewResult
}

func newShuffled(b lease.Backend, perRenewal time.Duration) *shuffled {
	s := &shuffled{Backend: b, perRenewal: perRenewal, rng: rand.New(rand.NewPCG(1, 2)),
		ready: make(chan struct{}, 1), done: make(chan struct{})}
	go s.serve()
	return s
}

func (s *shuffled) serve() {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 {
			s.mu.Unlock()
			select {
			case <-s.ready:
			case <-s.done:
				return
			}
			s.mu.Lock()
		}
		i := s.rng.IntN(len(s.queue))
		job := s.queue[i]
		s.queue[i] = s.queue[len(s.queue)-1]
		s.queue = s.queue[:len(s.queue)-1]
		s.mu.Unlock()
		// in a bubble: the shared server's work for the request.
		time.Sleep(time.Duration(len(job.renewals)) * s.perRenewal)
		out := make([]lease.RenewResult, len(job.renewals))
		for i, r := range job.renewals {
			out[i].Lease, out[i].Err = s.Backend.Renew(context.Background(), r.Lease, r.TTL)
		}
		job.answer <- out
	}
}

// close stops the server's goroutine.
func (s *shuffled) close() { close(s.done) }

func (s *shuffled) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	job := shuffledJob{renewals: renewals, answer: make(chan []lease.RenewResult, 1)}
	defer s.start()()
	s.mu.Lock()
	s.queue = append(s.queue, job)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	select {
	case out := <-job.answer:
		return out, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", lease.ErrUnavailable, ctx.Err())
	}
}

// TestRenewalWindowShrinksWhenTheServerQueues: eight Clients of 2,048
// holds at TTL 1.5 s, taken over a renewal interval, on one server that
// renews 33,000 leases a second, about the rate the holds fall due at: the
// server is busy all the time, and every batch more in flight only waits in
// its queue. With eight batches in flight per Client nearly every hold is
// in flight at once, a request waits behind some fifty others taken in the
// server's order, not by due time, and now and then one waits longer than
// its holds' TTL: some 1,000-1,500 holds were lost in 9 s. The Clients keep
// fewer batches in flight while their answers come back queued (about one
// each); the rest of their holds wait in the Clients' own queues, earliest
// due first, and none is lost.
func TestRenewalWindowShrinksWhenTheServerQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newShuffled(memtest.New(t), 30*time.Microsecond)
		ctx := context.Background()
		const clients, n, ttl = 8, 2048, 1500 * time.Millisecond
		var holds []*lease.Hold
		cs := make([]*lease.Client, clients)
		for w := range cs {
			cs[w] = newClient(t, s, fmt.Sprintf("worker-%d", w))
		}
		// The holds are taken over a renewal interval, as a program takes them.
		const chunks = 16
		for k := range chunks {
			for w, c := range cs {
				for i := k; i < n; i += chunks {
					h, err := c.TryAcquire(ctx, fmt.Sprintf("shard/%d/%05d", w, i), ttl)
					if err != nil {
						t.Fatal(err)
					}
					holds = append(holds, h)
				}
			}
			time.Sleep(ttl / 3 / chunks)
		}
		time.Sleep(9 * time.Second)
		lost := countLost(holds)
		t.Logf("%d of %d holds lost in 9 s; at most %d batches in flight", lost, len(holds), s.most())
		if lost > 0 {
			t.Errorf("%d of %d holds lost on a server with the capacity to renew them all", lost, len(holds))
		}
		for _, h := range holds {
			_ = h.Release(ctx)
		}
		time.Sleep(ttl) // the server's queue drains
		synctest.Wait()
		s.close()
		synctest.Wait()
	})
}

// slowBatches is a backend whose RenewBatch takes delay, however many
// are in flight: a server far away but idle. It records the most calls in
// flight at once.
type slowBatches struct {
	lease.Backend
	delay time.Duration
	flights
}

func (s *slowBatches) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	defer s.start()()
	time.Sleep(s.delay) // in a bubble: the far server's round trip
	out := make([]lease.RenewResult, len(renewals))
	for i, r := range renewals {
		out[i].Lease, out[i].Err = s.Backend.Renew(ctx, r.Lease, r.TTL)
	}
	return out, nil
}

// TestRenewalWindowOpensOnAFarIdleServer: one Client whose 16,384 holds
// at TTL 3 s fall due together, on a server 100 ms away that answers every
// request in that time: one batch in flight renews 2,560 leases a second,
// too few to renew them all before their deadlines, eight renew 20,480.
// The answers come back unqueued (every round trip as short as the
// shortest), so the Client widens its window to MaxRenewBatchesInFlight
// and keeps every hold.
func TestRenewalWindowOpensOnAFarIdleServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowBatches{Backend: memtest.New(t), delay: 100 * time.Millisecond}
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		const n, ttl = 16384, 3 * time.Second
		holds := tryAcquireN(t, c, n, ttl)
		time.Sleep(9 * time.Second)
		lost := countLost(holds)
		most := b.most()
		t.Logf("%d of %d holds lost in 9 s; at most %d batches in flight", lost, n, most)
		if lost > 0 {
			t.Errorf("%d of %d holds lost on a server with the capacity to renew them all", lost, n)
		}
		if most != lease.MaxRenewBatchesInFlight {
			t.Errorf("at most %d batches in flight, want the window open to %d", most, lease.MaxRenewBatchesInFlight)
		}
		for _, h := range holds {
			_ = h.Release(ctx)
		}
		time.Sleep(time.Second) // the batches in flight are answered
		synctest.Wait()
	})
}
