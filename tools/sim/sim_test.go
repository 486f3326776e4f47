package sim_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/leasehq/lease/tools/sim"
)

// schedules is how many seeded runs TestSimulation plays: LEASE_SIM_SCHEDULES
// (make sim N=…), else 20,000, or 2,000 under -short (a quarter of 500, the
// count before, left the semaphore workload without a rejected late write).
// The election and semaphore workloads each play a quarter as many (share).
func schedules(t *testing.T) int {
	if s := os.Getenv("LEASE_SIM_SCHEDULES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LEASE_SIM_SCHEDULES=%q is not a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 2000
	}
	return 20000
}

func seeds(t *testing.T, n int) []uint64 {
	if s := os.Getenv("LEASE_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LEASE_SIM_SEED: %v", err)
		}
		return []uint64{seed}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func TestSimulation(t *testing.T) {
	list := seeds(t, schedules(t))
	total := playAll(t, sim.Config{}, list)
	t.Logf("%d schedules: %+v", len(list), total)
	// The runs must exercise the dangerous cases, or passing means nothing.
	if len(list) > 100 && (total.Rejected == 0 || total.Pauses == 0 || total.Lost == 0 || total.Crashes == 0 || total.Restarts == 0) {
		t.Fatalf("the schedules never produced some fault or a rejected late write: %+v", total)
	}
}

// Negative control: without the guard, the simulator finds a late write.
func TestNegativeControlUnguarded(t *testing.T) {
	for seed := uint64(1); seed <= 2000; seed++ {
		if r := sim.Run(t, sim.Config{Seed: seed, Unguarded: true}); r.Violation != "" {
			t.Logf("found at seed %d: %s", seed, r.Violation)
			return
		}
	}
	t.Fatal("with the guard off, 2000 schedules found no stale write")
}

// Negative control: a client whose clock runs 25% slow — its deadline far
// outside the drift margin — reports a lease held after the backend expired it.
func TestNegativeControlClientPastDeadline(t *testing.T) {
	for seed := uint64(1); seed <= 2000; seed++ {
		if r := sim.Run(t, sim.Config{Seed: seed, ClientDrift: 0.25}); r.Violation != "" {
			t.Logf("found at seed %d: %s", seed, r.Violation)
			return
		}
	}
	t.Fatal("with the client's clock 25% slow, 2000 schedules found no lease reported past its expiry")
}

// TestReplayIsExact: a seed plays the same run twice, event by event, in
// each workload but the session's (the semaphore's without faults: see
// sim.Semaphore and sim.Session).
func TestReplayIsExact(t *testing.T) {
	for seed := uint64(12340); seed < 12440; seed++ {
		replay(t, sim.Config{Seed: seed})
	}
	for seed := uint64(12340); seed < 12390; seed++ {
		replay(t, sim.Config{Seed: seed, Workload: sim.Election})
	}
	for seed := uint64(12340); seed < 12390; seed++ {
		replay(t, sim.Config{Seed: seed, Workload: sim.Semaphore, NoFaults: true})
	}
}

func replay(t *testing.T, cfg sim.Config) {
	t.Helper()
	a := sim.Run(t, cfg)
	b := sim.Run(t, cfg)
	if len(a.Trace) != len(b.Trace) {
		t.Fatalf("%v seed %d: traces of %d and %d events", cfg.Workload, cfg.Seed, len(a.Trace), len(b.Trace))
	}
	for i := range a.Trace {
		if a.Trace[i] != b.Trace[i] {
			t.Fatalf("%v seed %d diverges at event %d:\n  %s\n  %s", cfg.Workload, cfg.Seed, i, a.Trace[i], b.Trace[i])
		}
	}
}

// TestSimulationElection: leaders write to a guarded register while their
// terms hold, and observers follow the election; see sim.Election.
func TestSimulationElection(t *testing.T) {
	total := simulate(t, sim.Election, share(t, 4))
	if total.Terms == 0 || total.Observed == 0 || total.Events == 0 || total.Breaks == 0 {
		t.Fatalf("the schedules never elected, observed, delivered a watch event or broke a watch: %+v", total)
	}
}

// TestSimulationSemaphore: holders of an N-slot semaphore write to their
// slot's guarded register while their slots hold; see sim.Semaphore.
func TestSimulationSemaphore(t *testing.T) {
	total := simulate(t, sim.Semaphore, share(t, 4))
	if total.Slots == 0 || total.Full == 0 || total.Events == 0 {
		t.Fatalf("the schedules never took a slot, filled all slots or delivered a watch event: %+v", total)
	}
}

// share is the number of schedules a workload other than the lock's plays:
// 1/div of schedules(t), at least 1.
func share(t *testing.T, div int) int { return max(1, schedules(t)/div) }

// simulate plays n seeded schedules of w (or LEASE_SIM_SEED's one, with
// its trace), failing at the first violation; it returns the sum of their
// stats, and checks the faults happened.
func simulate(t *testing.T, w sim.Workload, n int) sim.Stats {
	list := seeds(t, n)
	total := playAll(t, sim.Config{Workload: w}, list)
	t.Logf("%d %v schedules: %+v", len(list), w, total)
	if len(list) > 100 && (total.Rejected == 0 || total.Pauses == 0 || total.Lost == 0 || total.Crashes == 0 || total.Restarts == 0) {
		t.Fatalf("the schedules never produced some fault or a rejected late write: %+v", total)
	}
	return total
}

// findViolation plays seeds 1 to max of cfg until one breaks property
// want, and fails if none does (or another property breaks first: the
// control must find its own violation).
func findViolation(t *testing.T, cfg sim.Config, want sim.Property, max uint64) {
	t.Helper()
	for seed := uint64(1); seed <= max; seed++ {
		cfg.Seed = seed
		r := sim.Run(t, cfg)
		if r.Violation == "" {
			continue
		}
		if r.Property != want {
			t.Fatalf("want a violation of %q, found another first:\n%s", want, r.Report(seed, 40))
		}
		t.Logf("found at seed %d: %s", seed, r.Violation)
		return
	}
	t.Fatalf("%d schedules found no violation of %q", max, want)
}

// TestSimulationElectionRunner: leaders lead through election.Run, in
// stints that end while the process lives on, half of them keeping the
// term to expire (E5, KeptTermEnds), every leader checked as in the
// Election workload (E1–E3); see Config.Runner.
func TestSimulationElectionRunner(t *testing.T) {
	list := seeds(t, share(t, 4))
	total := playAll(t, sim.Config{Workload: sim.Election, Runner: true}, list)
	t.Logf("%d runner schedules: %+v", len(list), total)
	if len(list) > 100 && (total.Terms == 0 || total.Rejected == 0 || total.Crashes == 0 || total.Kept == 0) {
		t.Fatalf("the schedules never elected, rejected a late write, crashed or kept a term to expire (E5): %+v", total)
	}
}

// Negative control of E5: stints written by hand with Campaign that drop
// a kept term at their end, renewals and all, as Run's KeepTermOnCancel
// once did: the backend renews a term nobody leads under.
func TestNegativeControlKeptTermRenewed(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Election, Runner: true, KeepByHand: true}, sim.KeptTermEnds, 2000)
}

// Negative control of E1 for Run: clients whose clocks run 25% slow believe
// in their terms past the backend's expiry, and act as leader under Run's
// term context when another is.
func TestNegativeControlRunnerClientPastDeadline(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Election, Runner: true, ClientDrift: 0.25}, sim.HeldIsCurrent, 2000)
}

// Negative control of E2: leaders that ignore their term's deadline (a
// leader paused past its TTL wakes and writes on), with the guard off: two
// terms' writes are both accepted, interleaved.
func TestNegativeControlElectionIgnoresDeadline(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Election, IgnoreDeadline: true, Unguarded: true}, sim.GuardOrder, 2000)
}

// The same leaders with the guard on: the guard alone keeps E2, rejecting
// the late leaders' writes.
func TestGuardFencesLeadersPastTheirDeadline(t *testing.T) {
	var total sim.Stats
	for seed := uint64(1); seed <= 200; seed++ {
		r := sim.Run(t, sim.Config{Seed: seed, Workload: sim.Election, IgnoreDeadline: true})
		if r.Violation != "" {
			t.Fatal(r.Report(seed, 40))
		}
		total.Add(r.Stats)
	}
	if total.Rejected == 0 {
		t.Fatalf("no late leader's write was rejected: %+v", total)
	}
}

// Negative control of E1: clients whose clocks run 25% slow believe in
// their terms past the backend's expiry, and act as leader when another is.
func TestNegativeControlElectionClientPastDeadline(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Election, ClientDrift: 0.25}, sim.HeldIsCurrent, 2000)
}

// Negative control of E3: watches whose events arrive out of the backend's
// order make Observe report a leader older than one it reported.
func TestNegativeControlObserveUnordered(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Election, UnorderedWatch: true}, sim.ObservedOrder, 2000)
}

// Negative control of S1: a semaphore that counts holders and takes keys
// of its own, with no slot token between them, admits more than N.
func TestNegativeControlCountingSemaphore(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Semaphore, CountingSemaphore: true}, sim.AtMostN, 2000)
}

// Negative control of S2: slot holders whose clocks run 25% slow act on
// slots the backend has expired.
func TestNegativeControlSemaphoreClientPastDeadline(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Semaphore, ClientDrift: 0.25}, sim.HeldIsCurrent, 2000)
}

// Negative control of S3: without the guard, a slot's register takes a
// late holder's write after its successor's.
func TestNegativeControlSemaphoreUnguarded(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Semaphore, Unguarded: true}, sim.GuardOrder, 2000)
}

// TestSimulationSilentLinks: watches that go silent (no event, no break)
// leave no observer reporting a leader past its term's expiry (E4).
func TestSimulationSilentLinks(t *testing.T) {
	var total sim.Stats
	for seed := uint64(1); seed <= uint64(share(t, 8)); seed++ {
		r := sim.Run(t, sim.Config{Seed: seed, Workload: sim.Election, SilentLinks: true})
		if r.Violation != "" {
			t.Fatal(r.Report(seed, 40))
		}
		total.Add(r.Stats)
	}
	t.Logf("%+v", total)
	if total.Silenced == 0 || total.Observed == 0 {
		t.Fatalf("the schedules never silenced a watch or observed a leader: %+v", total)
	}
}

// Negative control of E4: an observer that believes its watch, with no
// timer at the leader's Expires, reports a dead leader behind a silent link.
func TestNegativeControlObserveBelievesSilentWatch(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Election, SilentLinks: true, NaiveObserver: true}, sim.ObservedFresh, 2000)
}

// TestSimulationSession: transfers between accounts held in one
// lease.Session write to the accounts' guarded registers while the session
// lives, their Clients renewing by batches or one lease at a time; see
// sim.Session.
func TestSimulationSession(t *testing.T) {
	total := simulate(t, sim.Session, share(t, 4))
	if total.Sessions == 0 || total.Batches == 0 {
		t.Fatalf("the schedules never held a whole session or renewed by a batch: %+v", total)
	}
}

// Negative control of G1: workers that ask only their first hold whether
// the group lives act on a session part of which is lost.
func TestNegativeControlLooseSession(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Session, LooseSession: true}, sim.SessionWhole, 2000)
}

// Negative control of G1 through the batch path: clients whose clocks run
// 25% slow believe in holds, renewed by batches or alone, past the
// backend's expiry, and act on their sessions then.
func TestNegativeControlSessionClientPastDeadline(t *testing.T) {
	findViolation(t, sim.Config{Workload: sim.Session, ClientDrift: 0.25}, sim.SessionWhole, 2000)
}

// playAll plays cfg with each seed of list, failing at the first
// violation (with the schedule's trace when list is one seed), and returns
// the sum of their stats.
func playAll(t *testing.T, cfg sim.Config, list []uint64) sim.Stats {
	t.Helper()
	var total sim.Stats
	for _, seed := range list {
		cfg.Seed = seed
		r := sim.Run(t, cfg)
		if r.Violation != "" {
			t.Fatal(r.Report(seed, 40))
		}
		if len(list) == 1 {
			for _, l := range r.Trace {
				t.Log(l)
			}
		}
		total.Add(r.Stats)
	}
	return total
}
