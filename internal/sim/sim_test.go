package sim_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/leasehq/lease/internal/sim"
)

// schedules is how many seeded runs TestSimulation plays: LEASE_SIM_SCHEDULES
// (make sim N=…), else 20,000, or 500 under -short.
func schedules(t *testing.T) int {
	if s := os.Getenv("LEASE_SIM_SCHEDULES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LEASE_SIM_SCHEDULES=%q is not a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 500
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
	var total sim.Stats
	list := seeds(t, schedules(t))
	for _, seed := range list {
		r := sim.Run(t, sim.Config{Seed: seed})
		if r.Violation != "" {
			t.Fatal(r.Report(seed, 40))
		}
		if len(list) == 1 {
			for _, l := range r.Trace {
				t.Log(l)
			}
		}
		add(&total, r.Stats)
	}
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

func TestReplayIsExact(t *testing.T) {
	for seed := uint64(12340); seed < 12440; seed++ {
		a := sim.Run(t, sim.Config{Seed: seed})
		b := sim.Run(t, sim.Config{Seed: seed})
		if len(a.Trace) != len(b.Trace) {
			t.Fatalf("seed %d: traces of %d and %d events", seed, len(a.Trace), len(b.Trace))
		}
		for i := range a.Trace {
			if a.Trace[i] != b.Trace[i] {
				t.Fatalf("seed %d diverges at event %d:\n  %s\n  %s", seed, i, a.Trace[i], b.Trace[i])
			}
		}
	}
}

func add(t *sim.Stats, s sim.Stats) {
	t.Acquired += s.Acquired
	t.Writes += s.Writes
	t.Accepted += s.Accepted
	t.Rejected += s.Rejected
	t.Reads += s.Reads
	t.Lost += s.Lost
	t.Pauses += s.Pauses
	t.Crashes += s.Crashes
	t.Restarts += s.Restarts
}
