// Package sim is a deterministic simulation of clients, a backend and a
// guarded resource. The real lease.Client, memstore and fence code run inside
// a testing/synctest bubble, so time is virtual and moves only when every
// goroutine is blocked; every message between a client and the backend or
// the resource goes through a simulated network; and one seeded driver
// decides, at each quiet moment, what happens next: a worker takes a step, a
// message is delivered, delayed or lost, time passes, a worker pauses past
// its TTL or crashes, the backend restarts (keeping its state). The same
// seed replays the same run exactly.
//
// Checked on every run (see Violation): the guard never accepts a token lower
// than one it accepted; once a generation's write is accepted, no older
// generation's write is; every read returns the newest accepted generation's
// value; tokens strictly increase per key as the backend grants them; and a
// Client never reports a lease as held once the backend's expiry for it has
// passed.
package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/memstore"
)

// Config is one simulated run.
type Config struct {
	Seed    uint64
	Clients int           // default 3
	Steps   int           // driver decisions; default 300
	TTL     time.Duration // default 100 ms

	// Unguarded removes the guard: the resource takes every write (a
	// negative control).
	Unguarded bool
	// ClientDrift is how much slower than the backend's clock each client's
	// clock runs (0.1 = 10% slow). Within the drift margin (|drift| < 1% of
	// the TTL plus 2 ms per TTL) the client stays safe; the default is a
	// random drift up to 1%. Far outside it, the client's deadline passes
	// after the backend's expiry (a negative control).
	ClientDrift float64
	// NoFaults turns off pauses, losses, crashes and restarts.
	NoFaults bool
}

// Result is what a run found.
type Result struct {
	Violation string   // "" if every property held
	Trace     []string // the run up to the violation (or its end)
	Stats     Stats
}

// Stats counts what happened, to show a run exercised something.
type Stats struct {
	Acquired, Writes, Accepted, Rejected, Reads, Lost, Pauses, Crashes, Restarts int
}

const key = "job"

// Sim is one run in progress.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	store *memstore.Store
	start time.Time

	mu          sync.Mutex
	clients     []*simClient
	pending     []*message
	backendDown bool
	trace       []string
	violation   string
	stats       Stats

	// The resource: guarded, or a plain cell for the negative control.
	res   *fence.Resource[string]
	plain struct {
		value string
		token lease.Token
	}
	// Oracles, maintained on the far side of the network.
	granted lease.Token               // highest token granted on key
	expiry  map[lease.Token]time.Time // backend expiry per token
	highest lease.Token               // highest token accepted by the resource
	newest  string                    // value of the newest accepted write
}

type simClient struct {
	idx         int
	gen         int // incarnation: a crash starts a new one
	seq         int
	ctx         context.Context
	cancel      context.CancelFunc
	client      *lease.Client
	step        chan struct{}
	waiting     bool // blocked waiting for a step
	pausedUntil time.Time
	crashed     bool
	done        chan struct{}
	rng         *rand.Rand // the worker's own choices
}

// Run plays cfg inside a synctest bubble of t.
func Run(t *testing.T, cfg Config) Result {
	var res Result
	synctest.Test(t, func(t *testing.T) { res = run(cfg) })
	return res
}

func run(cfg Config) Result {
	if cfg.Clients == 0 {
		cfg.Clients = 3
	}
	if cfg.Steps == 0 {
		cfg.Steps = 300
	}
	if cfg.TTL == 0 {
		cfg.TTL = 100 * time.Millisecond
	}
	s := &Sim{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed*0x9e3779b97f4a7c15+1)),
		store:  memstore.New(),
		start:  time.Now(),
		res:    fence.NewResource(key, "initial", fence.AtLeast),
		expiry: map[lease.Token]time.Time{},
		newest: "initial",
	}
	s.plain.value = "initial"
	for i := range cfg.Clients {
		s.clients = append(s.clients, nil)
		s.startClient(i)
	}
	synctest.Wait()
	for range cfg.Steps {
		if s.failed() {
			break
		}
		s.step()
		synctest.Wait()
	}
	s.drain()
	return Result{Violation: s.violation, Trace: s.trace, Stats: s.stats}
}

func (s *Sim) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.violation != ""
}

func (s *Sim) tracef(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tracefLocked(format, args...)
}

func (s *Sim) tracefLocked(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%6.1fms  ", float64(time.Since(s.start).Microseconds())/1000)+fmt.Sprintf(format, args...))
}

func (s *Sim) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.violation == "" {
		s.violation = fmt.Sprintf(format, args...)
		s.tracefLocked("VIOLATION: %s", s.violation)
	}
}

// startClient starts (or restarts after a crash) client i with a fresh
// lease.Client whose clock drifts as configured.
func (s *Sim) startClient(i int) {
	drift := s.cfg.ClientDrift
	if drift == 0 {
		drift = s.rng.Float64() * 0.01
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &simClient{idx: i, ctx: ctx, cancel: cancel, step: make(chan struct{}), done: make(chan struct{})}
	if old := s.clients[i]; old != nil {
		c.gen, c.seq = old.gen+1, old.seq
	}
	jitter := rand.New(rand.NewPCG(s.cfg.Seed, uint64(i)<<32|uint64(c.gen)))
	c.rng = rand.New(rand.NewPCG(s.cfg.Seed^0x5bd1e995, uint64(i)<<32|uint64(c.gen)))
	lc, err := lease.NewClient(&simBackend{s: s, c: c},
		lease.WithOwner(fmt.Sprintf("c%d.%d", i, c.gen)),
		lease.WithClock(newDriftClock(1-drift)),
		lease.WithJitter(jitter.Float64),
		lease.WithBackoff(5*time.Millisecond, s.cfg.TTL/2))
	if err != nil {
		panic(err) // the options above are valid by construction
	}
	c.client = lc
	s.mu.Lock()
	s.clients[i] = c
	s.mu.Unlock()
	go s.worker(c)
}

// step makes one seeded decision.
func (s *Sim) step() {
	now := time.Now()
	s.mu.Lock()
	var ready []*simClient
	for _, c := range s.clients {
		if c.waiting && !c.crashed && !now.Before(c.pausedUntil) {
			ready = append(ready, c)
		}
	}
	msgs := s.deliverableLocked(now)
	s.mu.Unlock()

	faults := !s.cfg.NoFaults
	switch r := s.rng.IntN(100); {
	case r < 35 && len(ready) > 0:
		c := ready[s.rng.IntN(len(ready))]
		s.mu.Lock()
		c.waiting = false
		s.mu.Unlock()
		c.step <- struct{}{}
	case r < 75 && len(msgs) > 0:
		m := msgs[s.rng.IntN(len(msgs))]
		lose := faults && s.rng.IntN(100) < 5
		if lose {
			s.mu.Lock()
			s.stats.Lost++
			s.mu.Unlock()
		}
		s.deliver(m, lose)
	case r < 92 || !faults:
		time.Sleep(time.Duration(1+s.rng.IntN(int(s.cfg.TTL/time.Millisecond)/2)) * time.Millisecond)
	case r < 96:
		c := s.clients[s.rng.IntN(len(s.clients))]
		d := s.cfg.TTL + time.Duration(s.rng.Int64N(int64(2*s.cfg.TTL)))
		s.mu.Lock()
		c.pausedUntil = now.Add(d)
		s.stats.Pauses++
		s.tracefLocked("c%d pauses for %v", c.idx, d)
		s.mu.Unlock()
	case r < 98:
		i := s.rng.IntN(len(s.clients))
		c := s.clients[i]
		s.mu.Lock()
		c.crashed = true
		s.stats.Crashes++
		s.tracefLocked("c%d crashes", i)
		s.mu.Unlock()
		c.cancel()
		synctest.Wait()
		s.startClient(i)
	default:
		d := time.Duration(1+s.rng.IntN(int(s.cfg.TTL/time.Millisecond))) * time.Millisecond
		s.mu.Lock()
		s.backendDown = true
		s.stats.Restarts++
		s.tracefLocked("backend restarts (down %v, state kept)", d)
		s.mu.Unlock()
		time.AfterFunc(d, func() {
			s.mu.Lock()
			s.backendDown = false
			s.tracefLocked("backend back")
			s.mu.Unlock()
		})
	}
}

// drain ends the run: workers stop, every message is delivered, and time
// passes until every lease and timer is gone, so the bubble ends clean.
func (s *Sim) drain() {
	s.mu.Lock()
	s.backendDown = false
	for _, c := range s.clients {
		c.pausedUntil = time.Time{}
	}
	s.mu.Unlock()
	for _, c := range s.clients {
		c.cancel()
	}
	for range 10000 {
		synctest.Wait()
		s.mu.Lock()
		msgs := s.deliverableLocked(time.Now())
		s.mu.Unlock()
		if len(msgs) == 0 {
			time.Sleep(s.cfg.TTL)
			synctest.Wait()
			s.mu.Lock()
			n := len(s.pending)
			s.mu.Unlock()
			if n == 0 {
				break
			}
			continue
		}
		s.deliver(msgs[0], false)
	}
	for _, c := range s.clients {
		<-c.done
	}
	time.Sleep(2 * s.cfg.TTL) // let lost holds reach their deadlines
}

// waitStep blocks until the driver lets c take a step; false if c is done.
func (s *Sim) waitStep(c *simClient) bool {
	s.mu.Lock()
	c.waiting = true
	s.mu.Unlock()
	select {
	case <-c.step:
		return true
	case <-c.ctx.Done():
		s.mu.Lock()
		c.waiting = false
		s.mu.Unlock()
		return false
	}
}

// worker is the application: acquire, then write (and sometimes read) a few
// times while it believes it holds the lease, then release.
func (s *Sim) worker(c *simClient) {
	defer close(c.done)
	name := fmt.Sprintf("c%d", c.idx)
	for {
		if !s.waitStep(c) {
			return
		}
		h, err := c.client.Acquire(c.ctx, key, s.cfg.TTL)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.stats.Acquired++
		s.mu.Unlock()
		for range 3 {
			if !s.waitStep(c) {
				break
			}
			if h.Err() != nil {
				break // the client told us: stop
			}
			s.checkHeld(name, h)
			// The pause that matters falls here: after the check, before the write lands.
			token := h.Token()
			value := fmt.Sprintf("%s@t%d", name, token)
			_, _ = s.send(c.ctx, c, toResource, fmt.Sprintf("%s write token %d", name, token),
				func() (any, error) { return nil, s.write(token, value) })
			if c.rng.IntN(3) == 0 {
				_, _ = s.send(c.ctx, c, toResource, name+" read", func() (any, error) { return nil, s.read() })
			}
		}
		_ = h.Release(context.WithoutCancel(c.ctx))
	}
}

// checkHeld: the client says it holds h, so the backend's expiry for h's
// token must not have passed (I5).
func (s *Sim) checkHeld(name string, h *lease.Hold) {
	s.mu.Lock()
	exp := s.expiry[h.Token()]
	s.mu.Unlock()
	if now := time.Now(); !now.Before(exp) {
		s.violate("%s's client reports token %d held at %v, but the backend expired it at %v",
			name, h.Token(), now.Sub(s.start), exp.Sub(s.start))
	}
}

// write runs at the resource.
func (s *Sim) write(token lease.Token, value string) error {
	s.mu.Lock()
	s.stats.Writes++
	s.mu.Unlock()
	if !s.cfg.Unguarded {
		if err := s.res.Write(token, value); err != nil {
			s.mu.Lock()
			s.stats.Rejected++
			s.mu.Unlock()
			return err
		}
	} else {
		s.mu.Lock()
		s.plain.value, s.plain.token = value, token
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Accepted++
	if token < s.highest {
		s.violation = fmt.Sprintf("the resource accepted token %d after token %d", token, s.highest)
		s.tracefLocked("VIOLATION: %s", s.violation)
		return nil
	}
	s.highest, s.newest = token, value
	return nil
}

// read runs at the resource: what it returns must be the newest accepted
// generation's value.
func (s *Sim) read() error {
	var value string
	if s.cfg.Unguarded {
		s.mu.Lock()
		value = s.plain.value
		s.mu.Unlock()
	} else {
		value, _ = s.res.Read()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Reads++
	if value != s.newest && s.violation == "" {
		s.violation = fmt.Sprintf("a read returned %q, but the newest accepted write is %q", value, s.newest)
		s.tracefLocked("VIOLATION: %s", s.violation)
	}
	return nil
}

// Report formats a failed run for a test log: seed, violation, the trace's
// last lines.
func (r Result) Report(seed uint64, lines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\nreplay: LEASE_SIM_SEED=%d go test ./internal/sim -run TestSimulation -v\n", seed, r.Violation, seed)
	tr := r.Trace
	if len(tr) > lines {
		fmt.Fprintf(&b, "  … %d earlier events\n", len(tr)-lines)
		tr = tr[len(tr)-lines:]
	}
	for _, l := range tr {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
