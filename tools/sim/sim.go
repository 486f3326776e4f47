// Package sim is a deterministic simulation of clients, a backend and
// guarded resources. The real lease.Client, election, semaphore, memstore
// and fence code run inside a testing/synctest bubble, so time is virtual
// and moves only when every goroutine is blocked; every message between a
// client and the backend or a resource, and every event of a watch, goes
// through a simulated network; and one seeded driver decides, at each quiet
// moment, what happens next: a worker takes a step, a message is delivered,
// delayed or lost (a lost watch event breaks the watch), time passes, a
// worker pauses past its TTL or crashes, the backend restarts (keeping its
// state; its watches break). The same seed replays the same run exactly,
// save in rare Semaphore runs with faults and in some Session runs (see
// Workload).
//
// The workloads (Workload) and the properties checked on every run
// (Property) are listed with their types; a Result names the first
// property that failed.
package sim

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/memstore"
)

// Workload is what the simulated clients do.
type Workload int

const (
	// Lock: each worker acquires one key (lease.Client.Acquire), writes to
	// the key's guarded register a few times while its Hold says it holds
	// the lease (and sometimes reads it), then releases.
	Lock Workload = iota
	// Election: each worker campaigns (election.Elector.Campaign) on one
	// key, writes to the election's guarded register with its term's token
	// while the term's Err is nil, and resigns now and then; each worker
	// also observes the election (Elector.Observe), over a watch or by
	// reading the leader, as the seed chooses per client.
	Election
	// Semaphore: each worker takes a slot of an N-slot semaphore (Acquire,
	// or sometimes TryAcquire), writes to its slot's guarded register with
	// the slot's token while the slot's Err is nil, then releases. The
	// semaphore waits over a watch or by polling, as the seed chooses per
	// client. The semaphore picks the slot it tries first and jitters its
	// polling from a source seeded by the run's seed (semaphore.WithRand),
	// its queue lease travels on a lane of its own, and requests and watch
	// events made at one instant are put in one order, so a replay is exact
	// without faults; with them, about one replay in 500 still diverges,
	// where a Hold's renewal timer and the worker's release of the queue
	// lease wake at one instant (a backend restart breaking the wait) and
	// race inside lease.Hold.
	Semaphore
	// Session: each worker makes a transfer between two or three accounts:
	// it acquires them into one lease.Session (Session.Acquire, or
	// sometimes TryAcquire), writes to every account's guarded register
	// with that account's token while the session's Err is nil, then
	// closes the session. Half the clients (seeded) renew their holds
	// through RenewBatch, a batch being one message, delayed or lost whole.
	// A replay is not always exact: about one in five diverges (one in
	// fifteen without batches), with or without faults, where a hold's
	// loss, the session's release of its other holds (each in a goroutine
	// of its own) and the Client's next renewal batch wake at one instant
	// and race inside lease.Hold for which holds the batch takes.
	Session
)

func (w Workload) String() string {
	switch w {
	case Lock:
		return "lock"
	case Election:
		return "election"
	case Semaphore:
		return "semaphore"
	case Session:
		return "session"
	}
	return fmt.Sprintf("Workload(%d)", int(w))
}

// Property names a checked property; a Result says which one failed.
type Property string

// The properties. P1–P5 are VERIFICATION.md's; E1–E4, S1–S3 and G1 the
// election's, the semaphore's and the session's.
const (
	// GuardOrder (P1, P2, E2, S3): a resource never accepts a write whose
	// token is below one it already accepted, so two generations' accepted
	// writes never interleave (see Sim.write).
	GuardOrder Property = "guard order"
	// ReadNewest (P3): every read returns the newest accepted write.
	ReadNewest Property = "read newest"
	// TokenOrder (P4, S3): the backend's tokens rise strictly per key.
	TokenOrder Property = "token order"
	// HeldInTime (P5): a Client never reports a lock held once the
	// backend's expiry for it has passed.
	HeldInTime Property = "held in time"
	// HeldIsCurrent (E1, S2): whenever a worker acts on a term or slot its
	// Hold says is held, the backend's current lease on that key, at that
	// instant of its clock, is that very generation. For an election it
	// means no two workers ever act as leader at one instant.
	HeldIsCurrent Property = "held is current"
	// ObservedOrder (E3): the leaders one Observe reports never go back: each
	// non-zero token is at least the previous non-zero one, and each is a
	// term the backend granted, announced with the value it was granted to.
	ObservedOrder Property = "observed order"
	// ObservedFresh (E4): an observer never reports as current a leader
	// whose term has expired on the backend, judged on the observer's own
	// clock (Observe's contract: it reports "no leader known" once the
	// Expires it saw passes with no renewal seen), even when its watch has
	// gone silent (Config.SilentLinks). Checked at every driver decision,
	// for observers that follow a watch.
	ObservedFresh Property = "observed fresh"
	// AtMostN (S1): at no instant of the backend's clock are more than N
	// leases under the semaphore's slots unexpired and unreleased, counted
	// from the backend's own grants, renewals and releases.
	AtMostN Property = "at most N"
	// SessionWhole (G1): whenever a worker acts on a session its Err says
	// lives, every hold in it is the backend's current lease on its key at
	// that instant of its clock: no work goes on under part of the group.
	SessionWhole Property = "session whole"
	// KeptTermEnds (E5, Config.Runner): a term that election.Run kept when
	// its context ended (KeepTermOnCancel) is renewed by the backend at
	// most once more — a renewal already on its way — so that it expires
	// at its TTL and another can lead.
	KeptTermEnds Property = "kept term ends"
)

// Config is one simulated run.
type Config struct {
	Seed     uint64
	Workload Workload
	Clients  int           // default 3, or 4 for Semaphore
	Steps    int           // driver decisions; default 300
	TTL      time.Duration // default 100 ms
	Slots    int           // the semaphore's N; default 2

	// Unguarded removes the guard: the resources take every write (a
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

	// IgnoreDeadline makes election workers ignore their term's I5
	// deadline: a leader writes on without asking its term's Err, until it
	// resigns of its own accord (a negative control, with Unguarded).
	IgnoreDeadline bool
	// UnorderedWatch gives every client a watch, and lets the network
	// deliver a watch's events in any order rather than the backend's (a
	// negative control of Observe).
	UnorderedWatch bool
	// SilentLinks adds a fault: a watch's connection goes silent, its
	// events no longer delivered yet the connection never closed (a frozen
	// proxy, a hung server, a blackholed network).
	SilentLinks bool
	// NaiveObserver replaces Observe by one that believes its watch: it
	// reports the leader the stream last told of until the stream says
	// otherwise, with no timer at the leader's Expires (a negative control
	// of E4, with SilentLinks).
	NaiveObserver bool
	// CountingSemaphore replaces the semaphore by one that counts instead
	// of holding a slot's lease: a worker lists the leases under the slots'
	// prefix and, if it finds fewer than N, acquires a fresh key of its own
	// there. No key, so no token, is shared between two holders, and the
	// count and the acquisition are two steps (a negative control).
	CountingSemaphore bool
	// LooseSession has Session workers ask the Err of the hold they
	// acquired last alone, as with a group whose holds' ends are not tied
	// together (a negative control of G1).
	LooseSession bool

	// Runner has Election workers lead through election.Run, in stints
	// that end (Run's context cancelled) while the process lives on: half
	// the clients (seeded) resign at a stint's end, half keep the term to
	// expire (KeepTermOnCancel), which KeptTermEnds checks.
	Runner bool
	// KeepByHand has Runner workers lead with Campaign instead, and at a
	// stint's end drop a kept term without resigning it or stopping its
	// renewals, as Run's KeepTermOnCancel once did (a negative control of
	// KeptTermEnds).
	KeepByHand bool
}

// Result is what a run found.
type Result struct {
	Workload  Workload
	Runner    bool     // Config.Runner: the election's leaders led through Run
	Violation string   // "" if every property held
	Property  Property // the property that failed, if one did
	Trace     []string // the run up to the violation (or its end)
	Stats     Stats
}

// Stats counts what happened, to show a run exercised something.
type Stats struct {
	Acquired, Writes, Accepted, Rejected, Reads, Lost, Pauses, Crashes, Restarts int
	// Election: terms won, leaders reported by Observe; with
	// Config.Runner, terms Run kept to expire at a stint's end (the cases
	// KeptTermEnds judges).
	Terms, Observed, Kept int
	// Semaphore: slots taken, and grants that left all N slots held.
	Slots, Full int
	// Watches: events delivered, watches broken, watches gone silent.
	Events, Breaks, Silenced int
	// Session: sessions that held all their accounts; renewal batches the
	// backend applied.
	Sessions, Batches int
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.Acquired += o.Acquired
	s.Writes += o.Writes
	s.Accepted += o.Accepted
	s.Rejected += o.Rejected
	s.Reads += o.Reads
	s.Lost += o.Lost
	s.Pauses += o.Pauses
	s.Crashes += o.Crashes
	s.Restarts += o.Restarts
	s.Terms += o.Terms
	s.Observed += o.Observed
	s.Kept += o.Kept
	s.Slots += o.Slots
	s.Full += o.Full
	s.Events += o.Events
	s.Breaks += o.Breaks
	s.Silenced += o.Silenced
	s.Sessions += o.Sessions
	s.Batches += o.Batches
}

const lockKey = "job"

// Sim is one run in progress.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	store *memstore.Store
	start time.Time

	mu          sync.Mutex
	clients     []*simClient
	pending     []*message
	streams     []*stream
	backendUpAt time.Time // the backend is down (restarting) until then
	trace       []string
	asides      []aside
	violation   string
	property    Property
	stats       Stats

	registers map[string]*register
	// The backend's oracle, kept from its answers on the far side of the
	// network.
	highestGrant map[string]lease.Token // highest token granted per key
	grants       map[generation]*granted
	// What each client's observer reports as current now (Election).
	observing map[*simClient]election.Leader
	// The terms Run kept at a stint's end, and the backend's renewals of
	// each since (Config.Runner).
	kept map[generation]int
}

type simClient struct {
	idx         int
	gen         int // incarnation: a crash starts a new one
	seq         [lanes]int
	ctx         context.Context
	cancel      context.CancelFunc
	client      *lease.Client
	opts        []lease.Option // client's options, for election and semaphore
	clock       lease.Clock    // the client's clock, in opts
	watch       bool           // its backend offers lease.Watcher
	batch       bool           // its backend offers lease.BatchRenewer (Session)
	step        chan struct{}
	waiting     bool // blocked waiting for a step
	pausedUntil time.Time
	crashed     bool
	done        chan struct{}
	rng         *rand.Rand // the worker's own choices
	seats       int        // keys taken by the CountingSemaphore control
}

// name is the client's incarnation, as it acquires.
func (c *simClient) name() string { return fmt.Sprintf("c%d.%d", c.idx, c.gen) }

// backend returns the client's view of the backend on lane ln.
func (s *Sim) backend(c *simClient, ln lane) lease.Backend {
	b := &simBackend{s: s, c: c, lane: ln}
	switch {
	case c.watch && c.batch:
		return batchWatchBackend{watchBackend{b}}
	case c.watch:
		return watchBackend{b}
	case c.batch:
		return batchBackend{b}
	}
	return b
}

// Run plays cfg inside a synctest bubble of t.
func Run(t *testing.T, cfg Config) Result {
	var res Result
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New() // in the bubble: its clock is the bubble's
		if err != nil {
			t.Fatal(err)
		}
		res = run(cfg, store)
	})
	return res
}

func run(cfg Config, store *memstore.Store) Result {
	if cfg.Clients == 0 {
		cfg.Clients = 3
		if cfg.Workload == Semaphore {
			cfg.Clients = 4
		}
	}
	if cfg.Slots == 0 {
		cfg.Slots = 2
	}
	if cfg.Steps == 0 {
		cfg.Steps = 300
	}
	if cfg.TTL == 0 {
		cfg.TTL = 100 * time.Millisecond
	}
	s := &Sim{
		cfg:          cfg,
		rng:          rand.New(rand.NewPCG(cfg.Seed, cfg.Seed*0x9e3779b97f4a7c15+1)),
		store:        store,
		start:        time.Now(),
		registers:    map[string]*register{},
		highestGrant: map[string]lease.Token{},
		grants:       map[generation]*granted{},
		observing:    map[*simClient]election.Leader{},
		kept:         map[generation]int{},
	}
	for i := range cfg.Clients {
		s.clients = append(s.clients, nil)
		s.startClient(i)
	}
	synctest.Wait()
	s.flush()
	for range cfg.Steps {
		if s.failed() {
			break
		}
		s.step()
		synctest.Wait()
		s.flush()
	}
	s.drain()
	s.flush()
	return Result{Workload: cfg.Workload, Runner: cfg.Runner, Violation: s.violation, Property: s.property, Trace: s.trace, Stats: s.stats}
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
	s.trace = append(s.trace, s.stamp()+fmt.Sprintf(format, args...))
}

func (s *Sim) stamp() string {
	return fmt.Sprintf("%6.1fms  ", float64(time.Since(s.start).Microseconds())/1000)
}

// An aside is a trace line from a goroutine other than the driver's. Such
// goroutines run at once when woken together, in no fixed order, so their
// lines wait in asides until the driver's next quiet moment and then enter
// the trace sorted by client and lane (one goroutine each, as far as
// asides go), so that a replay's trace matches line for line.
type aside struct {
	client int // -1: the backend
	lane   lane
	line   string
}

func (s *Sim) asideLocked(client int, ln lane, format string, args ...any) {
	s.asides = append(s.asides, aside{client, ln, s.stamp() + fmt.Sprintf(format, args...)})
}

// flush moves the asides into the trace.
func (s *Sim) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
}

func (s *Sim) flushLocked() {
	slices.SortStableFunc(s.asides, func(a, b aside) int {
		if a.client != b.client {
			return cmp.Compare(a.client, b.client)
		}
		return cmp.Compare(a.lane, b.lane)
	})
	for _, a := range s.asides {
		s.trace = append(s.trace, a.line)
	}
	s.asides = s.asides[:0]
}

// violate records the run's first violation, of property p.
func (s *Sim) violate(p Property, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violateLocked(p, format, args...)
}

func (s *Sim) violateLocked(p Property, format string, args ...any) {
	if s.violation == "" {
		s.violation, s.property = fmt.Sprintf(format, args...), p
		s.flushLocked()
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
	if s.cfg.Workload != Lock {
		c.watch = s.cfg.UnorderedWatch || c.rng.IntN(2) == 0
	}
	if s.cfg.Workload == Session {
		c.batch = c.rng.IntN(2) == 0
	}
	var jmu sync.Mutex // the worker's Client and the observer's or semaphore's draw from this source
	c.clock = newDriftClock(1 - drift)
	c.opts = []lease.Option{
		lease.WithClock(c.clock),
		lease.WithJitter(func() float64 {
			jmu.Lock()
			defer jmu.Unlock()
			return jitter.Float64()
		}),
		lease.WithBackoff(5*time.Millisecond, s.cfg.TTL/2),
	}
	lc, err := lease.NewClient(s.backend(c, workerLane), append([]lease.Option{lease.WithOwner(c.name())}, c.opts...)...)
	if err != nil {
		panic(err) // the options above are valid by construction
	}
	c.client = lc
	s.mu.Lock()
	s.clients[i] = c
	s.mu.Unlock()
	switch s.cfg.Workload {
	case Election:
		go s.electionWorker(c)
	case Semaphore:
		go s.semaphoreWorker(c)
	case Session:
		go s.sessionWorker(c)
	default:
		go s.worker(c)
	}
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
	s.checkObserved()
	if faults && s.cfg.SilentLinks && s.rng.IntN(100) < 3 {
		s.silenceLink()
	}
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
		if up := now.Add(d); up.After(s.backendUpAt) {
			s.backendUpAt = up
		}
		s.stats.Restarts++
		s.tracefLocked("backend restarts (down %v, state kept)", d)
		for _, st := range s.streams {
			s.breakLocked(st) // its connections go with it
		}
		s.mu.Unlock()
		time.AfterFunc(d, func() {
			s.mu.Lock()
			if !s.backendDownLocked() {
				s.asideLocked(-1, 0, "backend back")
			}
			s.mu.Unlock()
		})
	}
}

// backendDownLocked reports whether the backend is restarting. It is
// judged on the clock, not set by a timer, so that whoever asks at the
// instant it comes back gets the same answer in every replay.
func (s *Sim) backendDownLocked() bool { return time.Now().Before(s.backendUpAt) }

// drain ends the run: workers stop, every message is delivered, and time
// passes until every lease and timer is gone, so the bubble ends clean.
func (s *Sim) drain() {
	s.mu.Lock()
	s.backendUpAt = time.Time{}
	for _, c := range s.clients {
		c.pausedUntil = time.Time{}
	}
	s.mu.Unlock()
	for _, c := range s.clients {
		c.cancel()
	}
	for range 10000 {
		synctest.Wait()
		s.flush()
		s.mu.Lock()
		msgs := s.deliverableLocked(time.Now())
		s.mu.Unlock()
		if len(msgs) == 0 {
			time.Sleep(s.cfg.TTL)
			synctest.Wait()
			s.mu.Lock()
			n := len(s.pending) + len(s.streams)
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

// Report formats a failed run for a test log: seed, violation, the trace's
// last lines.
func (r Result) Report(seed uint64, lines int) string {
	var b strings.Builder
	test := "TestSimulation"
	if r.Workload != Lock {
		test += strings.ToUpper(r.Workload.String()[:1]) + r.Workload.String()[1:]
	}
	if r.Runner {
		test += "Runner"
	}
	fmt.Fprintf(&b, "seed %d: %s: %s\nreplay: cd tools && LEASE_SIM_SEED=%d go test ./sim -run '%s$' -v\n", seed, r.Property, r.Violation, seed, test)
	switch r.Workload {
	case Semaphore:
		b.WriteString("(a semaphore run with faults replays exactly all but about once in 500: see sim.Semaphore)\n")
	case Session:
		b.WriteString("(a session run replays exactly about four times in five: run the replay again if it passes; see sim.Session)\n")
	}
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
