package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// Engine is a real engine a run is played against.
type Engine struct {
	// Name is the engine's name in logs and artifact names.
	Name string
	// Addrs are the engine's host:port addresses; the run puts a proxy in
	// front of each.
	Addrs []string
	// Connect returns a backend for one worker that reaches the engine only
	// through addrs — the proxies' addresses, in the order of Addrs — and a
	// function that closes it.
	Connect func(ctx context.Context, addrs []string) (lease.Backend, func(), error)
	// Restart stops the engine, waits down, and starts it again on the same
	// data and addresses. It runs on the test goroutine and may fail t. Nil
	// if the engine cannot be restarted by the test.
	Restart func(t testing.TB, down time.Duration)
	// Linger is how much longer than the asked TTL the engine may keep a
	// lease (etcd rounds TTLs up to whole seconds and adds one). It sizes
	// the progress timeout and bounds the pauses by chance (TTL + Linger +
	// up to a TTL more); no pause relies on it to be late: each lasts until
	// a newer token is accepted on its key.
	Linger time.Duration
	// Guard, if set, returns the register of key: a real guard (pgfence,
	// redisfence) admitting tokens by mode, on a server of its own that the
	// faults do not touch, as the protected resource is usually another
	// system than the lease service. Nil: fence.Resource in memory.
	Guard func(t testing.TB, key string, mode fence.Mode) Register
	// GuardName names the guard in logs (default "memory").
	GuardName string
	// Crashes are faults the engine injects itself beyond Restart — killing
	// one of several server processes, say — chosen by their Kind in
	// Config.Kinds.
	Crashes []Crash
}

// Crash is a fault an Engine injects itself. The driver measures progress
// from the moment Inject is called, with the fault still in place (a
// replicated service must go on without the process it lost), then lets
// the fault last its chosen time, heals it, and waits for progress again.
type Crash struct {
	// Kind names the crash in Config.Kinds, the stats and the log.
	Kind Fault
	// Inject applies the fault on the test goroutine (it may fail t) and
	// returns what it did and a function that ends it (restarts what it
	// killed).
	Inject func(t testing.TB, rng *rand.Rand) (what string, heal func(t testing.TB))
}

// Fault is a kind of fault the driver injects.
type Fault string

// The faults. Toxics apply to every proxy and both directions unless said.
const (
	Latency   Fault = "latency"    // latency TTL/10–TTL/2 with jitter
	Bandwidth Fault = "bandwidth"  // 1–16 KB/s each way
	Timeout   Fault = "timeout"    // data stops; connections close after a while (toxic timeout)
	ResetPeer Fault = "reset_peer" // connections are reset (RST) as soon as data flows
	Restart   Fault = "restart"    // Engine.Restart
	Pause     Fault = "pause"      // a worker stops between Hold.Err() and its write, past the lease's expiry
)

// AllFaults is every fault, in the order the driver cycles through them
// before it starts choosing at random.
var AllFaults = []Fault{Pause, Latency, Bandwidth, Timeout, ResetPeer, Restart}

// Config is one run.
type Config struct {
	Engine Engine
	Seed   uint64
	// Keys is how many keys are contended for (default 1); Workers is how
	// many workers contend for each (default 3).
	Keys, Workers int
	// TTL is the lease TTL the workers ask for.
	TTL time.Duration
	// Faults is how many faults the driver injects, one at a time, each
	// followed by a wait for progress.
	Faults int
	// Kinds are the faults to choose from (default AllFaults, without
	// Restart if the engine has none).
	Kinds []Fault
	// PauseChance is the chance that a worker, on its own, pauses before a
	// write (besides the driver's Pause faults), in [0, 1).
	PauseChance float64
	// ProgressTimeout bounds the wait for an accepted write after each
	// fault (default 10 s + 10×(TTL + Linger)).
	ProgressTimeout time.Duration
	// Unguarded turns the guard off: the register takes every write (the
	// negative control).
	Unguarded bool
	// Mode is the guard's mode (default fence.AtLeast).
	Mode fence.Mode
	// CheckTimeout bounds each porcupine check (default 2 minutes).
	CheckTimeout time.Duration
	// AlwaysVisualize writes the register history's visualisation even
	// when it is linearizable.
	AlwaysVisualize bool
	// Session makes each of the Workers workers (not Workers per key) hold
	// every one of the Keys keys in one lease.Session, acquired in key
	// order, and write every key's register with that key's token while
	// the session's Err is nil (issue 31's sessions); Result.Split lists
	// the G1 findings.
	Session bool
	// IgnoreSession has session workers write without asking the
	// session's Err (a negative control of G1).
	IgnoreSession bool
	// SlowClocks runs each worker's Client on a clock at a tenth of the
	// real rate, so that its safe deadline comes ten times as late as it
	// should: a negative control of I5 (Result.HeldAfter, Result.Split).
	SlowClocks bool
}

// Stats counts what a run did.
type Stats struct {
	Grants, AcquireErrors, Lost int
	RegisterStats
	Pauses int           // worker pauses, the driver's and random ones
	Late   LateWrites    // the pauses that made a stale writer, and its writes
	Faults map[Fault]int // faults injected by the driver
	// Regranted counts the engine restarts and crash heals after which
	// every key was acquired again: the grant history then compares the
	// tokens on both sides of the restart (I1). Run fails when one is
	// not followed by grants.
	Regranted int
	Duration  time.Duration // from the first worker's start to the last one's end
	// Recoveries are, for each Crash injected and each heal, the time from
	// it to the end of the first accepted write invoked after it.
	Recoveries []Recovery
}

// RegisterStats counts a run's calls of its registers: writes, those the
// guard accepted and rejected, and reads.
type RegisterStats struct {
	Writes, Accepted, Rejected, Reads int
}

// LateWrites counts the pauses after which the paused worker was a stale
// writer — a newer token had been accepted on every key it writes, so the
// guard must reject its next writes — and what the guard did with them.
// Pauses counts every pause; those that ended for their limit before a newer
// holder wrote (a chance pause on a loaded machine, say) tested nothing and
// are not counted here.
type LateWrites struct {
	Stale    int // pauses that ended with a newer token accepted on each key of the paused worker
	Rejected int // the stale writer's next writes (one per key) the guard rejected
	Accepted int // and those it took: none unless the guard is off
	// Told counts the stale writers that then asked their Hold's,
	// Session's or Term's Err and were told it was lost. It must be: a
	// newer token granted means the engine had expired the lease (I3),
	// so the client's safe deadline had passed (I5). One told it holds
	// is a finding of Result.HeldAfter, Result.Split or
	// ElectionResult.TwoLeaders instead.
	Told int
}

// count counts one late write.
func (l *LateWrites) count(accepted bool) {
	if accepted {
		l.Accepted++
	} else {
		l.Rejected++
	}
}

// tally counts a write (accepted or not) or a read.
func (s *RegisterStats) tally(write, accepted bool) {
	switch {
	case !write:
		s.Reads++
	case accepted:
		s.Writes++
		s.Accepted++
	default:
		s.Writes++
		s.Rejected++
	}
}

// Recovery is how long the workers took to make progress after a crash.
type Recovery struct {
	Fault Fault
	// Healed is false for the time from the injection (the fault still in
	// place), true for the time from the heal.
	Healed bool
	After  time.Duration
}

// Result is what a run found.
type Result struct {
	Stats    Stats
	Register Verdict // the register history against RegisterModel
	Grants   Verdict // the grant history against GrantModel
	// Events is a readable tail of the run's events, for failure messages.
	Events string
	// Split lists, for Config.Session, every time a worker found its
	// session live (and so wrote every key of it) after another worker's
	// Acquire of one of its keys had returned a newer token: the engine
	// had expired that hold by then, so work went on under part of the
	// group (G1).
	Split []string
	// HeldAfter lists, for the lock workload, every time a worker found
	// its Hold's Err nil after another worker's Acquire of its key had
	// returned a newer token: the engine had expired the lease by then,
	// so the Client said "held" past the lease's expiry (I5, seen from
	// the client's side).
	HeldAfter []string
}

// writesPerHold is how many writes a worker makes under one lease.
const writesPerHold = 5

// guardLimit bounds one register call. The guard's server is not faulted,
// so a call that takes this long is a failure of the run.
const guardLimit = 10 * time.Second

type worker struct {
	id      int
	key     string
	reg     Register
	keys    []string   // Config.Session: every key, in order
	regs    []Register // and their registers
	client  *lease.Client
	closeFn func()
	rng     *rand.Rand
	freezer *freezer
	pauseRq chan struct{} // the driver's pause request
	paused  chan bool     // a requested pause is over: whether it made a stale writer
	holding atomic.Bool
}

type run struct {
	cfg     Config
	rec     *Recorder
	keys    []string
	workers []*worker

	mu      sync.Mutex
	stats   Stats
	errs    []error
	beliefs map[string][]belief    // by key, each time a worker found its hold (or session) live
	grants  map[string][]termGrant // and the grants, by key
}

func (r *run) count(f func(s *Stats)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.stats)
}

func (r *run) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// Run plays cfg: it proxies the engine, starts the workers, injects the
// faults from the test goroutine, stops the workers and checks both
// histories. Progress after each fault and the run's own errors are
// asserted here (t.Errorf); the verdicts are returned for the caller to
// judge (see RequireLinearizable), because a negative control expects an
// illegal register history.
func Run(t *testing.T, cfg Config) Result {
	t.Helper()
	cfg = withDefaults(cfg)
	proxies, err := NewProxies(cfg.Engine.Addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer proxies.Close()

	r := &run{cfg: cfg, rec: NewRecorder(), stats: Stats{Faults: map[Fault]int{}},
		beliefs: map[string][]belief{}, grants: map[string][]termGrant{}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var regs []Register
	for k := range cfg.Keys {
		key := fmt.Sprintf("chaos-%s-%d", cfg.Engine.Name, k)
		r.keys = append(r.keys, key)
		regs = append(regs, newRegister(t, cfg.Engine, key, cfg.Mode, cfg.Unguarded))
	}
	keys := r.keys
	for k, key := range keys {
		reg := regs[k]
		if cfg.Session && k > 0 {
			break // each session worker holds every key
		}
		for range cfg.Workers {
			id := len(r.workers)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			b, closeFn, err := cfg.Engine.Connect(cctx, proxies.Addrs())
			cancel()
			if err != nil {
				r.closeWorkers()
				t.Fatalf("chaos: %s: connecting worker %d: %v", cfg.Engine.Name, id, err)
			}
			w := &worker{id: id, key: key, reg: reg, keys: keys, regs: regs, closeFn: closeFn, freezer: newFreezer(),
				rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(id))),
				pauseRq: make(chan struct{}, 1), paused: make(chan bool, 1)}
			r.workers = append(r.workers, w)
			opts := []lease.Option{lease.WithOwner(fmt.Sprintf("w%d", id)),
				lease.WithJitter(rand.New(rand.NewPCG(cfg.Seed^0x9e3779b97f4a7c15, uint64(id))).Float64),
				lease.WithBackoff(5*time.Millisecond, cfg.TTL/2)}
			if cfg.SlowClocks {
				opts = append(opts, lease.WithClock(slowClock{start: time.Now()}))
			}
			w.client, err = lease.NewClient(freezable(b, w.freezer), opts...)
			if err != nil {
				r.closeWorkers()
				t.Fatalf("chaos: lease.NewClient: %v", err)
			}
		}
	}

	began := time.Now()
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.Session {
				r.workSession(ctx, w)
				return
			}
			r.work(ctx, w)
		}()
	}
	// However the driver ends (t.Fatal included), the workers stop and
	// their connections close before Run returns.
	workersDone := make(chan struct{})
	stopWorkers := func() {
		stop()
		proxies.Reset()
		go func() { wg.Wait(); close(workersDone) }()
		select {
		case <-workersDone:
		case <-time.After(time.Minute):
			t.Errorf("chaos: workers did not stop within a minute of being told to")
		}
		r.closeWorkers()
	}
	func() {
		defer stopWorkers()
		r.drive(t, proxies)
	}()
	r.stats.Duration = time.Since(began)

	r.mu.Lock()
	for _, err := range r.errs {
		t.Error(err)
	}
	r.mu.Unlock()

	register, grants, events := r.rec.History()
	res := Result{Stats: r.stats, Events: describeEvents(events, 40)}
	for _, key := range keys {
		if !cfg.Session {
			for _, f := range actedAfter(r.beliefs[key], r.grants[key], "holder of token", "token", "granted") {
				res.HeldAfter = append(res.HeldAfter, key+": "+f)
			}
			continue
		}
		for _, f := range actedAfter(r.beliefs[key], r.grants[key], "a session's holder of token", "token", "granted") {
			res.Split = append(res.Split, key+": "+f)
		}
	}
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
	if res.Register, err = Check(RegisterModel(cfg.Mode), register, events, cfg.CheckTimeout, "register", cfg.AlwaysVisualize, mkdir); err != nil {
		t.Error(err)
	}
	if res.Grants, err = Check(GrantModel(), grants, events, cfg.CheckTimeout, "grants", false, mkdir); err != nil {
		t.Error(err)
	}
	return res
}

func withDefaults(cfg Config) Config {
	if cfg.Keys == 0 {
		cfg.Keys = 1
	}
	if cfg.Workers == 0 {
		cfg.Workers = 3
	}
	if len(cfg.Kinds) == 0 {
		for _, f := range AllFaults {
			if f != Restart || cfg.Engine.Restart != nil {
				cfg.Kinds = append(cfg.Kinds, f)
			}
		}
		for _, c := range cfg.Engine.Crashes {
			cfg.Kinds = append(cfg.Kinds, c.Kind)
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

func (r *run) closeWorkers() {
	for _, w := range r.workers {
		if w.closeFn != nil {
			w.closeFn()
			w.closeFn = nil
		}
	}
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pauseLength bounds a pause by chance (the driver's are bounded by the
// progress timeout): long enough for the paused worker's lease to have
// expired on the engine, plus up to a TTL so that another worker may have
// acquired and written, on an unloaded machine. Such a pause may end before
// a newer holder writes; it is then not counted in Stats.Late.
func (r *run) pauseLength(rng *rand.Rand) time.Duration {
	ttl := r.cfg.TTL
	return ttl + r.cfg.Engine.Linger + ttl/2 + time.Duration(rng.Int64N(int64(ttl/2)+1))
}

// work is one worker: the application under test.
func (r *run) work(ctx context.Context, w *worker) {
	ttl := r.cfg.TTL
	seq := 0
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, r.cfg.ProgressTimeout)
		call := r.rec.Now()
		h, err := w.client.Acquire(actx, w.key, ttl)
		ret := r.rec.Now()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.count(func(s *Stats) { s.AcquireErrors++ })
			r.rec.Event(w.id, call, ret, "acquire failed", "%v", err)
			sleep(ctx, ttl/10)
			continue
		}
		r.rec.Grant(w.id, w.key, h.Token(), call, ret)
		r.mu.Lock()
		r.grants[w.key] = append(r.grants[w.key], termGrant{worker: w.id, token: h.Token(), ret: ret})
		r.mu.Unlock()
		r.count(func(s *Stats) { s.Grants++ })
		w.holding.Store(true)
		for range writesPerHold {
			if ctx.Err() != nil {
				break
			}
			asked := r.rec.Now()
			if h.Err() != nil {
				r.count(func(s *Stats) { s.Lost++ })
				r.rec.Event(w.id, r.rec.Now(), r.rec.Now(), "lost", "%v", h.Err())
				break
			}
			r.believe(w.id, asked, h)
			// The window that matters: the client said "held" a moment
			// ago, and now the worker stops before its write lands.
			stale := r.maybePause(ctx, w, []string{w.key}, []Register{w.reg}, []lease.Token{h.Token()})
			seq++
			if !r.writeOnce(w, w.key, w.reg, h.Token(), seq, stale) {
				break
			}
			if stale {
				asked := r.rec.Now()
				r.told(w.id, asked, h.Err(), h)
			}
			sleep(ctx, ttl/20+time.Duration(w.rng.Int64N(int64(ttl/10))))
		}
		w.holding.Store(false)
		rctx, cancel := context.WithTimeout(context.Background(), ttl+r.cfg.Engine.Linger)
		_ = h.Release(rctx) // an error here is a lost lease or an unreachable engine: both expected
		cancel()
	}
}

// writeOnce writes the register reg of key with token, and sometimes reads
// it back, recording both, and counting the write in Stats.Late if it is
// late (w is a stale writer); false if the run must stop using the register.
func (r *run) writeOnce(w *worker, key string, reg Register, token lease.Token, seq int, late bool) bool {
	err := guardedWrite(r.rec, w.rng, w.id, key, reg, token, fmt.Sprintf("w%d.%d", w.id, seq), func(write, ok bool) {
		r.count(func(s *Stats) {
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

// guardedWrite writes value with token to reg, the register of key, and
// one time in three (rng) reads it back, recording both in rec as worker's
// and telling tally of each: a write (and whether the guard accepted it)
// or a read. An error means the run must stop using the register.
func guardedWrite(rec *Recorder, rng *rand.Rand, worker int, key string, reg Register, token lease.Token, value string, tally func(write, accepted bool)) error {
	call := rec.Now()
	// Not the worker's context: a write cut off as the run stops, or by a
	// crash, would have an unknown outcome that the history cannot hold.
	gctx, gcancel := context.WithTimeout(context.Background(), guardLimit)
	werr := reg.Write(gctx, token, value)
	gcancel()
	ret := rec.Now()
	ok, err := accepted(werr)
	if err != nil {
		return err
	}
	rec.Write(worker, key, token, value, call, ret, ok)
	tally(true, ok)
	if rng.IntN(3) == 0 {
		call := rec.Now()
		gctx, gcancel := context.WithTimeout(context.Background(), guardLimit)
		v, tok, err := reg.Read(gctx)
		gcancel()
		if err != nil {
			return fmt.Errorf("chaos: register read failed: %w", err)
		}
		rec.Read(worker, key, v, tok, call, rec.Now())
		tally(false, false)
	}
	return nil
}

// workSession is work for Config.Session: acquire every key into one
// lease.Session, in key order, then, while the session's Err is nil, write
// every key's register with that key's token, a few times; then Close.
// Each time it finds the session live it records a belief per key, which
// Run checks against the other workers' grants (G1).
func (r *run) workSession(ctx context.Context, w *worker) {
	ttl := r.cfg.TTL
	seq := 0
	for ctx.Err() == nil {
		sess := w.client.NewSession()
		holds := make([]*lease.Hold, 0, len(w.keys))
		for _, key := range w.keys {
			actx, cancel := context.WithTimeout(ctx, r.cfg.ProgressTimeout)
			call := r.rec.Now()
			h, err := sess.Acquire(actx, key, ttl)
			ret := r.rec.Now()
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.count(func(s *Stats) { s.AcquireErrors++ })
					r.rec.Event(w.id, call, ret, "acquire failed", "%s: %v", key, err)
				}
				break
			}
			r.rec.Grant(w.id, key, h.Token(), call, ret)
			r.mu.Lock()
			r.grants[key] = append(r.grants[key], termGrant{worker: w.id, token: h.Token(), ret: ret})
			r.mu.Unlock()
			r.count(func(s *Stats) { s.Grants++ })
			holds = append(holds, h)
		}
		if len(holds) == len(w.keys) {
			w.holding.Store(true)
			for range writesPerHold {
				if ctx.Err() != nil {
					break
				}
				asked := r.rec.Now()
				if err := sess.Err(); err != nil && !r.cfg.IgnoreSession {
					r.count(func(s *Stats) { s.Lost++ })
					r.rec.Event(w.id, r.rec.Now(), r.rec.Now(), "lost", "%v", err)
					break
				}
				r.believe(w.id, asked, holds...)
				tokens := make([]lease.Token, len(holds))
				for i, h := range holds {
					tokens[i] = h.Token()
				}
				stale := r.maybePause(ctx, w, w.keys, w.regs, tokens)
				if r.cfg.IgnoreSession {
					// It acts now, on a session it never asked about.
					r.believe(w.id, r.rec.Now(), holds...)
				}
				ok := true
				for i, h := range holds {
					seq++
					if ok = r.writeOnce(w, w.keys[i], w.regs[i], h.Token(), seq, stale); !ok {
						break
					}
				}
				if !ok {
					break
				}
				if stale && !r.cfg.IgnoreSession {
					asked := r.rec.Now()
					r.told(w.id, asked, sess.Err(), holds...)
				}
				sleep(ctx, ttl/20+time.Duration(w.rng.Int64N(int64(ttl/10))))
			}
			w.holding.Store(false)
		} else {
			sleep(ctx, ttl/10)
		}
		rctx, cancel := context.WithTimeout(context.Background(), ttl+r.cfg.Engine.Linger)
		_ = sess.Close(rctx) // an error here is a lost lease or an unreachable engine: both expected
		cancel()
	}
}

// maybePause pauses w, which holds tokens on keys (whose registers are
// regs), if the driver asked or by chance: frozen until the guard has
// accepted, and answered, a newer token on every one of them
// (freezer.pauseUntilSuperseded), for the
// driver's pause at most the progress timeout, for one by chance at most
// pauseLength. It reports whether w is now a stale writer.
func (r *run) maybePause(ctx context.Context, w *worker, keys []string, regs []Register, tokens []lease.Token) bool {
	var limit time.Duration
	requested := false
	select {
	case <-w.pauseRq:
		requested, limit = true, r.cfg.ProgressTimeout
	default:
		if r.cfg.PauseChance > 0 && w.rng.Float64() < r.cfg.PauseChance {
			limit = r.pauseLength(w.rng)
		}
	}
	if limit == 0 {
		return false
	}
	start := r.rec.Now()
	stale, err := w.freezer.pauseUntilSuperseded(ctx, r.rec, keys, regs, tokens, limit, pollEvery(r.cfg.TTL))
	if err != nil {
		r.fail(err)
	}
	end := r.rec.Now()
	r.rec.Event(w.id, start, end, "pause", "paused %v between Hold.Err() and the write, renewals frozen: %s",
		time.Duration(end-start).Round(time.Millisecond), pauseOutcome(stale, tokens))
	r.count(func(s *Stats) {
		s.Pauses++
		if stale {
			s.Late.Stale++
		}
	})
	if requested {
		w.paused <- stale
	}
	return stale
}

// believe records that worker found holds live (their Hold's or their
// Session's Err nil) when it asked, at, for Result.HeldAfter and
// Result.Split. at is taken before the asking: a grant recorded as
// returned before it had really returned before the answer, where a time
// taken after the answer could follow a grant that came meanwhile.
func (r *run) believe(worker int, at int64, holds ...*lease.Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range holds {
		r.beliefs[h.Key()] = append(r.beliefs[h.Key()], belief{worker: worker, token: h.Token(), at: at})
	}
}

// told takes err, what a stale writer (worker) was told of its holds when
// it asked at after its late writes: lost, as it must be
// (LateWrites.Told), or live, a belief that Result.HeldAfter or
// Result.Split will list, as a newer token of a key of holds had been
// granted by then.
func (r *run) told(worker int, at int64, err error, holds ...*lease.Hold) {
	if err == nil {
		r.believe(worker, at, holds...)
		return
	}
	r.count(func(s *Stats) { s.Late.Told++ })
}

// pauseOutcome says how a pause of a holder of tokens ended.
func pauseOutcome(stale bool, tokens []lease.Token) string {
	if stale {
		return fmt.Sprintf("a newer token than %v accepted, the next write late", tokens)
	}
	return fmt.Sprintf("no newer token than %v accepted by its limit, the next write not late", tokens)
}

// pollEvery is how often a pause reads the guards.
func pollEvery(ttl time.Duration) time.Duration { return max(time.Millisecond, ttl/20) }

// drive injects cfg.Faults faults one at a time, each followed by a wait
// for progress. It runs on the test goroutine.
func (r *run) drive(t *testing.T, proxies *Proxies) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xfa017))
	ttl := r.cfg.TTL
	// A quiet start: every engine must work without faults first.
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
		if c, ok := r.crash(kind); ok {
			r.crashAndHeal(t, c, i+1, d, rng)
			time.Sleep(ttl + time.Duration(rng.Int64N(int64(ttl))))
			continue
		}
		start := r.rec.Now()
		var what string
		switch kind {
		case Pause:
			what = r.requestPause(t, rng)
		case Restart:
			what = fmt.Sprintf("engine down for %v", d.Round(time.Millisecond))
			r.cfg.Engine.Restart(t, d)
		default:
			x := toxicFor(kind, rng, ttl)
			what = x.String()
			if err := proxies.Add(x); err != nil {
				t.Fatal(err)
			}
			time.Sleep(d) // the fault itself: it lasts d of real time
			proxies.Reset()
		}
		end := r.rec.Now()
		r.rec.Event(-1, start, end, string(kind), "%s", what)
		r.count(func(s *Stats) { s.Faults[kind]++ })
		r.awaitProgress(t, fmt.Sprintf("fault %d (%s: %s)", i+1, kind, what), end)
		if kind == Restart {
			r.awaitGrants(t, fmt.Sprintf("fault %d (%s: %s)", i+1, kind, what), end)
		}
		// Some ordinary work between faults.
		time.Sleep(ttl + time.Duration(rng.Int64N(int64(ttl))))
	}
}

// crash returns the engine's Crash of kind, if it has one.
func (r *run) crash(kind Fault) (Crash, bool) {
	for _, c := range r.cfg.Engine.Crashes {
		if c.Kind == kind {
			return c, true
		}
	}
	return Crash{}, false
}

// crashAndHeal injects c as fault number n, waits for progress with the
// fault in place, keeps it d in all, heals it and waits for progress again,
// recording both recoveries.
func (r *run) crashAndHeal(t *testing.T, c Crash, n int, d time.Duration, rng *rand.Rand) {
	began := time.Now()
	start := r.rec.Now()
	what, heal := c.Inject(t, rng)
	if t.Failed() {
		if heal != nil {
			heal(t)
		}
		return
	}
	r.awaitProgress(t, fmt.Sprintf("fault %d (%s: %s), while it lasted", n, c.Kind, what), start)
	r.recovered(c.Kind, false, start)
	if left := d - time.Since(began); left > 0 {
		time.Sleep(left)
	}
	healed := r.rec.Now()
	heal(t)
	end := r.rec.Now()
	r.rec.Event(-1, start, end, string(c.Kind), "%s, healed after %v", what, time.Duration(healed-start).Round(time.Millisecond))
	r.count(func(s *Stats) { s.Faults[c.Kind]++ })
	r.awaitProgress(t, fmt.Sprintf("healing fault %d (%s: %s)", n, c.Kind, what), healed)
	r.recovered(c.Kind, true, healed)
	r.awaitGrants(t, fmt.Sprintf("healing fault %d (%s: %s)", n, c.Kind, what), healed)
}

// recovered records how long after since the first write invoked after it
// was accepted (awaitProgress has seen one, unless it failed).
func (r *run) recovered(kind Fault, healed bool, since int64) {
	ret, ok := r.rec.FirstAcceptedAfter(since)
	if !ok {
		return
	}
	r.count(func(s *Stats) {
		s.Recoveries = append(s.Recoveries, Recovery{Fault: kind, Healed: healed, After: time.Duration(ret - since)})
	})
}

// requestPause asks a worker that holds a lease (or any, if none does right
// now) to pause at its next write, and waits until the pause is over. A
// pause that ends without a newer token accepted on the worker's keys, or
// is never taken, fails t: the fault tested nothing.
func (r *run) requestPause(t *testing.T, rng *rand.Rand) string {
	var holders []*worker
	for _, w := range r.workers {
		if w.holding.Load() {
			holders = append(holders, w)
		}
	}
	if len(holders) == 0 {
		holders = r.workers
	}
	w := holders[rng.IntN(len(holders))]
	w.pauseRq <- struct{}{}
	var stale bool
	select {
	case stale = <-w.paused:
	case <-time.After(r.cfg.ProgressTimeout):
		select {
		case <-w.pauseRq: // never taken: withdraw it
			t.Errorf("chaos: %s: w%d, asked to pause, wrote nothing within %v", r.cfg.Engine.Name, w.id, r.cfg.ProgressTimeout)
			return fmt.Sprintf("w%d was asked to pause but wrote nothing meanwhile", w.id)
		default:
			stale = <-w.paused // taken just now: it ends within its limit
		}
	}
	if !stale {
		t.Errorf("chaos: %s: w%d's pause ended after %v with no newer token accepted on its keys: its late write tested nothing",
			r.cfg.Engine.Name, w.id, r.cfg.ProgressTimeout)
		return fmt.Sprintf("w%d paused before a write, but no newer holder wrote", w.id)
	}
	return fmt.Sprintf("w%d paused before a write until a newer token was accepted on its keys", w.id)
}

func toxicFor(kind Fault, rng *rand.Rand, ttl time.Duration) Toxic {
	ms := func(d time.Duration) int64 { return max(1, d.Milliseconds()) }
	switch kind {
	case Latency:
		lat := ttl/10 + time.Duration(rng.Int64N(int64(ttl*2/5)))
		return Toxic{Name: "chaos", Type: "latency", Stream: "downstream",
			Attributes: map[string]int64{"latency": ms(lat), "jitter": ms(lat / 2)}}
	case Bandwidth:
		return Toxic{Name: "chaos", Type: "bandwidth", Stream: "downstream",
			Attributes: map[string]int64{"rate": 1 + rng.Int64N(16)}}
	case Timeout:
		// Half the time data stops until the toxic goes; otherwise the
		// connections are also closed after a while.
		var after int64
		if rng.IntN(2) == 0 {
			after = ms(ttl/2 + time.Duration(rng.Int64N(int64(ttl))))
		}
		return Toxic{Name: "chaos", Type: "timeout", Stream: "upstream",
			Attributes: map[string]int64{"timeout": after}}
	case ResetPeer:
		return Toxic{Name: "chaos", Type: "reset_peer", Stream: "upstream",
			Attributes: map[string]int64{"timeout": rng.Int64N(ms(ttl / 4))}}
	}
	panic(fmt.Sprintf("chaos: no toxic for fault %q", kind)) // unreachable: drive handles the others
}

// awaitProgress waits until a write invoked after since is accepted, or
// fails t after the progress timeout.
func (r *run) awaitProgress(t *testing.T, after string, since int64) {
	deadline := time.Now().Add(r.cfg.ProgressTimeout)
	for !r.rec.ProgressAfter(since) {
		if time.Now().After(deadline) {
			t.Errorf("chaos: %s: no write was accepted within %v after %s", r.cfg.Engine.Name, r.cfg.ProgressTimeout, after)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitGrants waits until every key has been acquired by a call invoked
// after since, the end of a restart or a crash's heal, and counts it
// in Stats.Regranted; or fails t after the progress timeout: tokens were
// never compared across the restart.
func (r *run) awaitGrants(t *testing.T, after string, since int64) {
	deadline := time.Now().Add(r.cfg.ProgressTimeout)
	for _, key := range r.keys {
		for !r.rec.GrantedAfter(key, since) {
			if time.Now().After(deadline) {
				t.Errorf("chaos: %s: %s was not acquired within %v after %s", r.cfg.Engine.Name, key, r.cfg.ProgressTimeout, after)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r.count(func(s *Stats) { s.Regranted++ })
}

// RequireLinearizable fails t unless both histories of res are
// linearizable, naming the visualisation to open.
func RequireLinearizable(t *testing.T, res Result) {
	t.Helper()
	for _, c := range []struct {
		name string
		v    Verdict
	}{{"register", res.Register}, {"grant", res.Grants}} {
		if c.v.Result != porcupine.Ok {
			t.Errorf("chaos: the %s history (%d operations) is %s; visualisation: %s\nlast events:\n%s",
				c.name, c.v.Ops, c.v.Result, c.v.Visualization, res.Events)
		}
	}
}
