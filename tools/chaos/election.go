package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/fence"
)

// CrashLeader is a fault of the election workload: the elected worker's process
// dies — its backend connection is closed with no resignation, and its
// term is left to expire on the engine — and a new one campaigns again.
const CrashLeader Fault = "crash"

// ElectionConfig is a run of the election workload (RunElection).
type ElectionConfig struct {
	Engine Engine
	Seed   uint64
	// Workers campaign for one key (default 3); Observers follow it with
	// election.Elector.Observe, each on a connection of its own (default 2).
	Workers, Observers int
	// TTL is the terms' TTL.
	TTL time.Duration
	// Faults is how many faults the driver injects, one at a time, each
	// followed by a wait for progress (a leader's accepted write).
	Faults int
	// Kinds are the faults to choose from: Pause (the leader stops
	// between its check of its term and its write, renewals frozen, until
	// the guard has accepted a newer term's write), CrashLeader, Restart (Engine.Restart: for etcd, a kill
	// of the Raft leader) and the toxics. Default: Pause, CrashLeader, and
	// Restart if the engine has one.
	Kinds []Fault
	// ProgressTimeout bounds the wait for an accepted write after each
	// fault (default 10 s + 10×(TTL + Linger)).
	ProgressTimeout time.Duration
	// Unguarded turns the guard off (a negative control).
	Unguarded bool
	// IgnoreDeadline makes leaders act without checking their term: a
	// leader writes whenever it decides to, however long ago it was
	// elected — an election that ignores the I5 deadline (a negative
	// control of E1).
	IgnoreDeadline bool
	// CheckTimeout bounds each porcupine check (default 2 minutes).
	CheckTimeout time.Duration
}

// ElectionStats counts what an election run did.
type ElectionStats struct {
	Terms, CampaignErrors, Lost int
	RegisterStats
	Pauses, Crashes         int
	Late                    LateWrites // the pauses that made a stale leader, and its writes
	Observed, ObserveBreaks int        // leaders reported by Observe; its streams that broke
	// Successions counts the times an observer reported a leader's token
	// above one it had reported before: the changes where E3 could fail.
	Successions int
	Faults      map[Fault]int // faults injected by the driver
	Duration    time.Duration
}

// ElectionResult is what an election run found.
type ElectionResult struct {
	Stats ElectionStats
	// Register is the register history (the leaders' writes, with their
	// terms' tokens, and reads) against RegisterModel: a guard accepts
	// no write of a leader older than one it accepted.
	Register Verdict
	// Terms is the history of elections against GrantModel: the terms'
	// tokens rise.
	Terms Verdict
	// TwoLeaders lists E1 violations: a leader that found its term held
	// (or, with IgnoreDeadline, acted as leader) after a newer term's
	// Campaign had returned.
	TwoLeaders []string
	// Regressions lists E3 violations: an observer reported a leader's
	// token below one it had reported before.
	Regressions []string
	// Events is a readable tail of the run's events.
	Events string
}

// belief is a leader's finding that it leads, at a time.
type belief struct {
	worker int
	token  lease.Token
	at     int64
}

// termGrant is a won Campaign and when it returned.
type termGrant struct {
	worker int
	token  lease.Token
	ret    int64
}

type candidate struct {
	id      int
	name    string
	reg     Register
	rng     *rand.Rand
	freezer *freezer
	pauseRq chan struct{}
	paused  chan bool // a requested pause is over: whether it made a stale leader
	holding atomic.Bool

	mu      sync.Mutex
	crash   context.CancelFunc // ends the current incarnation
	closeFn func()
}

type electionRun struct {
	cfg     ElectionConfig
	key     string
	rec     *Recorder
	proxies *Proxies
	workers []*candidate

	mu         sync.Mutex
	stats      ElectionStats
	errs       []error
	beliefs    []belief
	grants     []termGrant
	regressive []string
}

func (r *electionRun) count(f func(s *ElectionStats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.stats)
}

func (r *electionRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func electionDefaults(cfg ElectionConfig) ElectionConfig {
	if cfg.Workers == 0 {
		cfg.Workers = 3
	}
	if cfg.Observers == 0 {
		cfg.Observers = 2
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = []Fault{Pause, CrashLeader}
		if cfg.Engine.Restart != nil {
			cfg.Kinds = append(cfg.Kinds, Restart)
		}
	}
	if cfg.ProgressTimeout == 0 {
		cfg.ProgressTimeout = 10*time.Second + 10*(cfg.TTL+cfg.Engine.Linger)
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = 2 * time.Minute
	}
	return cfg
}

// RunElection plays the election workload: cfg.Workers campaign for one
// key through election.Elector on the engine (behind toxiproxy, as in
// Run), and each elected leader writes to the key's fenced register with
// its term's token while its term holds, then resigns; cfg.Observers
// follow the election with Observe. The driver injects cfg.Faults faults,
// each followed by a wait until a leader's write is accepted. Progress and
// the run's own errors are asserted here; the verdicts are returned for the
// caller to judge, since a negative control expects violations.
func RunElection(t *testing.T, cfg ElectionConfig) ElectionResult {
	t.Helper()
	cfg = electionDefaults(cfg)
	proxies, err := NewProxies(cfg.Engine.Addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer proxies.Close()
	r := &electionRun{cfg: cfg, key: "chaos-election-" + cfg.Engine.Name, rec: NewRecorder(), proxies: proxies,
		stats: ElectionStats{Faults: map[Fault]int{}}}
	reg := newRegister(t, cfg.Engine, r.key, fence.AtLeast, cfg.Unguarded)
	for i := range cfg.Workers {
		r.workers = append(r.workers, &candidate{id: i, name: fmt.Sprintf("w%d", i), reg: reg, freezer: newFreezer(),
			rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(i))),
			pauseRq: make(chan struct{}, 1), paused: make(chan bool, 1)})
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	began := time.Now()
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.campaignLoop(ctx, w)
		}()
	}
	for i := range cfg.Observers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.observe(ctx, cfg.Workers+i)
		}()
	}
	func() {
		defer func() {
			stop()
			proxies.Reset()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Errorf("chaos: election workers did not stop within a minute of being told to")
			}
		}()
		r.drive(t)
	}()
	r.stats.Duration = time.Since(began)

	r.mu.Lock()
	for _, err := range r.errs {
		t.Error(err)
	}
	res := ElectionResult{Stats: r.stats, TwoLeaders: twoLeaders(r.beliefs, r.grants), Regressions: r.regressive}
	r.mu.Unlock()

	register, terms, events := r.rec.History()
	res.Events = describeEvents(events, 40)
	dir := ArtifactDir(t.Name())
	var once struct {
		sync.Once
		dir string
		err error
	}
	mkdir := func() (string, error) {
		once.Do(func() { once.dir, once.err = dir() })
		return once.dir, once.err
	}
	if res.Register, err = Check(RegisterModel(fence.AtLeast), register, events, cfg.CheckTimeout, "register", false, mkdir); err != nil {
		t.Error(err)
	}
	if res.Terms, err = Check(GrantModel(), terms, events, cfg.CheckTimeout, "terms", false, mkdir); err != nil {
		t.Error(err)
	}
	return res
}

// twoLeaders finds every belief in a term after a newer term's Campaign
// had returned: the engine had expired the older term by then (it granted
// the newer one), so a leader that still finds its term held acts beside
// another (E1).
func twoLeaders(beliefs []belief, grants []termGrant) []string {
	return actedAfter(beliefs, grants, "leader of term", "term", "elected")
}

// actedAfter finds every belief in a generation after a newer
// generation's grant had returned; role, gen and granted name them in
// the findings.
func actedAfter(beliefs []belief, grants []termGrant, role, gen, granted string) []string {
	sort.Slice(grants, func(i, j int) bool { return grants[i].ret < grants[j].ret })
	var out []string
	for _, b := range beliefs {
		for _, g := range grants {
			if g.ret >= b.at {
				break
			}
			if g.token > b.token {
				out = append(out, fmt.Sprintf("w%d acted as %s t%d at %.3fms, after w%d's %s t%d was %s at %.3fms",
					b.worker, role, b.token, float64(b.at)/1e6, g.worker, gen, g.token, granted, float64(g.ret)/1e6))
				break
			}
		}
	}
	return out
}

// connect opens a backend for a worker or observer, through the proxies.
func (r *electionRun) connect(ctx context.Context) (lease.Backend, func(), error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return r.cfg.Engine.Connect(cctx, r.proxies.Addrs())
}

// campaignLoop is one candidate process, started again after each crash.
func (r *electionRun) campaignLoop(ctx context.Context, w *candidate) {
	for ctx.Err() == nil {
		b, closeFn, err := r.connect(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("chaos: %s: connecting %s: %w", r.cfg.Engine.Name, w.name, err))
			}
			return
		}
		lc, err := lease.NewClient(freezable(b, w.freezer),
			lease.WithJitter(rand.New(rand.NewPCG(r.cfg.Seed^0x9e3779b97f4a7c15, uint64(w.id))).Float64),
			lease.WithBackoff(5*time.Millisecond, r.cfg.TTL/2))
		if err != nil {
			closeFn()
			r.fail(err)
			return
		}
		e, err := election.New(lc, r.cfg.TTL)
		if err != nil {
			closeFn()
			r.fail(err)
			return
		}
		life, crash := context.WithCancel(ctx)
		w.mu.Lock()
		w.crash, w.closeFn = crash, closeFn
		w.mu.Unlock()
		r.lead(life, w, e)
		crash()
		w.mu.Lock()
		if w.closeFn != nil {
			w.closeFn()
			w.closeFn = nil
		}
		w.mu.Unlock()
	}
}

// kill is the CrashLeader fault: w's process dies at once, without resigning.
func (w *candidate) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.crash != nil {
		w.crash()
	}
	if w.closeFn != nil {
		w.closeFn()
		w.closeFn = nil
	}
}

// lead campaigns and leads until ctx (the incarnation's life) ends.
func (r *electionRun) lead(ctx context.Context, w *candidate, e *election.Elector) {
	ttl := r.cfg.TTL
	seq := 0
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, r.cfg.ProgressTimeout)
		call := r.rec.Now()
		term, err := e.Campaign(actx, r.key, w.name)
		ret := r.rec.Now()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.count(func(s *ElectionStats) { s.CampaignErrors++ })
			r.rec.Event(w.id, call, ret, "campaign failed", "%v", err)
			sleep(ctx, ttl/10)
			continue
		}
		r.rec.Grant(w.id, r.key, term.Token(), call, ret)
		r.mu.Lock()
		r.grants = append(r.grants, termGrant{worker: w.id, token: term.Token(), ret: ret})
		r.stats.Terms++
		r.mu.Unlock()
		w.holding.Store(true)
		for range 3 + w.rng.IntN(6) {
			if ctx.Err() != nil {
				break
			}
			if !r.cfg.IgnoreDeadline {
				asked := r.rec.Now()
				if term.Err() != nil {
					r.count(func(s *ElectionStats) { s.Lost++ })
					r.rec.Event(w.id, r.rec.Now(), r.rec.Now(), "lost", "%v", term.Err())
					break
				}
				r.believe(w, asked, term.Token())
			}
			stale := r.maybePause(ctx, w, term.Token())
			if ctx.Err() != nil {
				break // crashed during the pause: a dead process writes nothing
			}
			if r.cfg.IgnoreDeadline {
				r.believe(w, r.rec.Now(), term.Token())
			}
			seq++
			if !r.write(w, term.Token(), fmt.Sprintf("%s.%d", w.name, seq), stale) {
				break
			}
			if stale && !r.cfg.IgnoreDeadline {
				// A newer term's write was accepted: this term must be over
				// (LateWrites.Told), or it is a finding of TwoLeaders.
				asked := r.rec.Now()
				if term.Err() == nil {
					r.believe(w, asked, term.Token())
				} else {
					r.count(func(s *ElectionStats) { s.Late.Told++ })
				}
			}
			sleep(ctx, ttl/20+time.Duration(w.rng.Int64N(int64(ttl/10))))
		}
		w.holding.Store(false)
		if ctx.Err() != nil {
			return // crashed: no resignation
		}
		rctx, cancel := context.WithTimeout(ctx, ttl+r.cfg.Engine.Linger)
		_ = term.Resign(rctx) // a lost term or an unreachable engine: both expected
		cancel()
	}
}

// believe records that w found its term of token held when it asked, at
// (taken before the asking, as run.believe says why), or acted as its
// leader then (IgnoreDeadline).
func (r *electionRun) believe(w *candidate, at int64, token lease.Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beliefs = append(r.beliefs, belief{worker: w.id, token: token, at: at})
}

// write writes value with token to the register and sometimes reads it
// back, recording both, and counting the write in Stats.Late if it is late
// (w is a stale leader); false if the run must stop using the register.
func (r *electionRun) write(w *candidate, token lease.Token, value string, late bool) bool {
	err := guardedWrite(r.rec, w.rng, w.id, r.key, w.reg, token, value, func(write, ok bool) {
		r.count(func(s *ElectionStats) {
			s.tally(write, ok)
			if write && late {
				s.Late.count(ok)
			}
		})
	})
	if err != nil {
		r.fail(err)
		return false
	}
	return true
}

// maybePause pauses w, the leader of the term of token, if the driver
// asked: frozen until the guard has accepted, and answered, a newer term's
// write (freezer.pauseUntilSuperseded), at most the progress timeout, or
// until the process crashes. It reports whether w is now a stale leader.
func (r *electionRun) maybePause(ctx context.Context, w *candidate, token lease.Token) bool {
	select {
	case <-w.pauseRq:
	default:
		return false
	}
	start := r.rec.Now()
	stale, err := w.freezer.pauseUntilSuperseded(ctx, r.rec, []string{r.key}, []Register{w.reg}, []lease.Token{token}, r.cfg.ProgressTimeout, pollEvery(r.cfg.TTL))
	if err != nil {
		r.fail(err)
	}
	end := r.rec.Now()
	r.rec.Event(w.id, start, end, "pause", "leader paused %v before a write, renewals frozen: %s",
		time.Duration(end-start).Round(time.Millisecond), pauseOutcome(stale, []lease.Token{token}))
	r.count(func(s *ElectionStats) {
		s.Pauses++
		if stale {
			s.Late.Stale++
		}
	})
	w.paused <- stale
	return stale
}

// observe follows the election as observer id until ctx ends, observing
// again after each break, and checks that the leaders' tokens it sees
// never go back (E3), across breaks too.
func (r *electionRun) observe(ctx context.Context, id int) {
	var highest lease.Token
	for ctx.Err() == nil {
		b, closeFn, err := r.connect(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("chaos: %s: connecting observer %d: %w", r.cfg.Engine.Name, id, err))
			}
			return
		}
		lc, err := lease.NewClient(b)
		if err != nil {
			closeFn()
			r.fail(err)
			return
		}
		e, err := election.New(lc, r.cfg.TTL)
		if err != nil {
			closeFn()
			r.fail(err)
			return
		}
		// Observe follows its watch across breaks (lease.FollowKey): each
		// is counted here, and tokens must not go back across them.
		onBreak := lease.FollowOnBreak(func(err error, _ time.Duration) error {
			r.rec.Event(id, r.rec.Now(), r.rec.Now(), "observe broke", "%v", err)
			r.count(func(s *ElectionStats) { s.ObserveBreaks++ })
			return nil
		})
		for l, err := range e.Observe(ctx, r.key, onBreak) {
			if err != nil {
				r.rec.Event(id, r.rec.Now(), r.rec.Now(), "observe ended", "%v", err)
				break
			}
			r.count(func(s *ElectionStats) { s.Observed++ })
			if l.Token == 0 {
				continue // no leader now
			}
			if highest != 0 && l.Token > highest {
				r.count(func(s *ElectionStats) { s.Successions++ })
			}
			if l.Token < highest {
				r.mu.Lock()
				r.regressive = append(r.regressive, fmt.Sprintf("observer %d reported t%d (%s) after t%d, at %.3fms",
					id, l.Token, l.Value, highest, float64(r.rec.Now())/1e6))
				r.mu.Unlock()
			}
			highest = max(highest, l.Token)
		}
		closeFn()
		sleep(ctx, r.cfg.TTL/10)
	}
}

// drive injects the faults one at a time, each followed by a wait for
// progress. It runs on the test goroutine.
func (r *electionRun) drive(t *testing.T) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xe1ec7))
	ttl := r.cfg.TTL
	r.awaitProgress(t, "the start", 0)
	for i := range r.cfg.Faults {
		if t.Failed() {
			return
		}
		kind := r.cfg.Kinds[i%len(r.cfg.Kinds)]
		if i >= len(r.cfg.Kinds) {
			kind = r.cfg.Kinds[rng.IntN(len(r.cfg.Kinds))]
		}
		d := ttl/2 + time.Duration(rng.Int64N(int64(3*ttl/2)))
		start := r.rec.Now()
		var what string
		switch kind {
		case Pause:
			what = r.pauseLeader(t, rng)
		case CrashLeader:
			what = r.crashLeader(rng)
		case Restart:
			what = fmt.Sprintf("engine down for %v", d.Round(time.Millisecond))
			r.cfg.Engine.Restart(t, d)
		default:
			x := toxicFor(kind, rng, ttl)
			what = x.String()
			if err := r.proxies.Add(x); err != nil {
				t.Fatal(err)
			}
			time.Sleep(d)
			r.proxies.Reset()
		}
		end := r.rec.Now()
		r.rec.Event(-1, start, end, string(kind), "%s", what)
		r.count(func(s *ElectionStats) { s.Faults[kind]++ })
		r.awaitProgress(t, fmt.Sprintf("fault %d (%s: %s)", i+1, kind, what), end)
		time.Sleep(ttl + time.Duration(rng.Int64N(int64(ttl))))
	}
}

// leader waits up to the progress timeout for a worker that leads, and
// returns it (nil if none did).
func (r *electionRun) leader(rng *rand.Rand) *candidate {
	deadline := time.Now().Add(r.cfg.ProgressTimeout)
	for time.Now().Before(deadline) {
		var leaders []*candidate
		for _, w := range r.workers {
			if w.holding.Load() {
				leaders = append(leaders, w)
			}
		}
		if len(leaders) > 0 {
			return leaders[rng.IntN(len(leaders))]
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// pauseLeader asks the leader to pause before its next write, until a
// newer term's write is accepted, and waits until the pause is over. No
// leader to pause, a pause never taken, or one that ends with no newer
// term's write accepted fails t: the fault tested nothing.
func (r *electionRun) pauseLeader(t *testing.T, rng *rand.Rand) string {
	w := r.leader(rng)
	if w == nil {
		t.Errorf("chaos: %s election: no leader to pause within %v", r.cfg.Engine.Name, r.cfg.ProgressTimeout)
		return "no leader to pause"
	}
	w.pauseRq <- struct{}{}
	var stale bool
	select {
	case stale = <-w.paused:
	case <-time.After(r.cfg.ProgressTimeout):
		select {
		case <-w.pauseRq:
			t.Errorf("chaos: %s election: leader w%d, asked to pause, wrote nothing within %v", r.cfg.Engine.Name, w.id, r.cfg.ProgressTimeout)
			return fmt.Sprintf("leader w%d was asked to pause but wrote nothing meanwhile", w.id)
		default:
			stale = <-w.paused // taken just now: it ends within its limit
		}
	}
	if !stale {
		t.Errorf("chaos: %s election: leader w%d's pause ended after %v with no newer term's write accepted: its late write tested nothing",
			r.cfg.Engine.Name, w.id, r.cfg.ProgressTimeout)
		return fmt.Sprintf("leader w%d paused before a write, but no newer leader wrote", w.id)
	}
	return fmt.Sprintf("leader w%d paused before a write until a newer term's write was accepted", w.id)
}

// crashLeader kills the leader's process.
func (r *electionRun) crashLeader(rng *rand.Rand) string {
	w := r.leader(rng)
	if w == nil {
		return "no leader to crash"
	}
	w.kill()
	r.count(func(s *ElectionStats) { s.Crashes++ })
	return fmt.Sprintf("leader w%d crashed (connection closed, no resignation)", w.id)
}

// awaitProgress waits until a write invoked after since is accepted.
func (r *electionRun) awaitProgress(t *testing.T, after string, since int64) {
	deadline := time.Now().Add(r.cfg.ProgressTimeout)
	for !r.rec.ProgressAfter(since) {
		if time.Now().After(deadline) {
			t.Errorf("chaos: %s election: no leader's write was accepted within %v after %s", r.cfg.Engine.Name, r.cfg.ProgressTimeout, after)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
