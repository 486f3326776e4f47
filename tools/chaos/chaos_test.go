package chaos_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease/tools/chaos"
)

// runChaos plays one engine with the guard on and asserts everything: both
// histories linearizable, progress after each fault and a stale writer
// after each of the driver's pauses (inside Run), every fault kind
// injected, and late writes that the guard rejected, every one — or the
// run never produced the danger it is meant to survive. It returns the
// run's result for more checks.
func runChaos(t *testing.T, cfg chaos.Config) chaos.Result {
	t.Helper()
	res := chaos.Run(t, cfg)
	s := res.Stats
	guard := cfg.Engine.GuardName
	if guard == "" {
		guard = "memory"
	}
	t.Logf("%s (guard %s): %v, %d grants, %d writes (%d accepted, %d rejected), %d reads, %d acquire errors, %d losses, %d pauses (%d made a stale writer: %d late writes rejected, %d accepted, %d told their lease was lost), faults %v (%d restarts or heals followed by grants of every key); register check %v on %d ops in %v, grant check %v on %d ops",
		cfg.Engine.Name, guard, s.Duration.Round(time.Millisecond), s.Grants, s.Writes, s.Accepted, s.Rejected, s.Reads,
		s.AcquireErrors, s.Lost, s.Pauses, s.Late.Stale, s.Late.Rejected, s.Late.Accepted, s.Late.Told, s.Faults, s.Regranted, res.Register.Result, res.Register.Ops, res.Register.Elapsed.Round(time.Millisecond),
		res.Grants.Result, res.Grants.Ops)
	chaos.RequireLinearizable(t, res)
	for _, k := range cfg.Kinds {
		if s.Faults[k] == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	requireLateRejected(t, s.Pauses, s.Late)
	if s.Late.Told != s.Late.Stale {
		t.Errorf("of %d stale writers %d asked their lease's Err after their late writes and were told it was lost; want all", s.Late.Stale, s.Late.Told)
	}
	for _, f := range res.HeldAfter {
		t.Errorf("held past the lease's expiry (I5): %s", f)
	}
	return res
}

// requireLateRejected fails t unless the run's pauses made a stale writer
// (a newer token accepted on its key before its next write) and the guard
// rejected every one of its late writes.
func requireLateRejected(t *testing.T, pauses int, late chaos.LateWrites) {
	t.Helper()
	if late.Stale == 0 || late.Rejected == 0 {
		t.Errorf("of %d pauses %d made a stale writer, whose %d late writes were rejected: the run never let a stale writer reach the register, so it proved nothing",
			pauses, late.Stale, late.Rejected)
	}
	if late.Accepted != 0 {
		t.Errorf("the guard accepted %d late writes (and rejected %d) of stale writers", late.Accepted, late.Rejected)
	}
}

// requireLateAccepted, for a negative control with the guard off, fails t
// unless the run's pauses made a stale writer whose late write the
// register took: the danger the checker must then find.
func requireLateAccepted(t *testing.T, pauses int, late chaos.LateWrites) {
	t.Helper()
	if late.Stale == 0 || late.Accepted == 0 {
		t.Fatalf("of %d pauses %d made a stale writer, whose %d late writes the unguarded register took: the control produced no danger to find",
			pauses, late.Stale, late.Accepted)
	}
}

func TestChaosBoltHTTP(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	e := withGuard(b.engine(ttl), "sqlfence-mariadb", mariadbGuard(t, fencingOn))
	runChaos(t, plan(chaos.Config{Engine: e, Seed: 1, TTL: ttl, Kinds: chaos.AllFaults}))
}

func TestChaosRedis(t *testing.T) {
	ttl := 200 * time.Millisecond
	e := withGuard(redisEngine(t), "redisfence", redisGuard(t, fencingOn))
	cfg := plan(chaos.Config{Engine: e, Seed: 2, TTL: ttl})
	runChaos(t, cfg)
}

func TestChaosPostgres(t *testing.T) {
	ttl := 200 * time.Millisecond
	e := withGuard(pgEngine(t), "pgfence", pgGuard(t, fencingOn))
	runChaos(t, plan(chaos.Config{Engine: e, Seed: 4, TTL: ttl}))
}

func TestChaosEtcd(t *testing.T) {
	ttl := 500 * time.Millisecond
	runChaos(t, plan(chaos.Config{Engine: etcdEngine(t), Seed: 5, TTL: ttl}))
}

// TestChaosNegativeControlUnguarded runs the bolt-over-HTTP engine with the
// guard off: the register takes every write, so a paused worker's late
// write lands after a newer holder's, and the checker must say so.
func TestChaosNegativeControlUnguarded(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	cfg := chaos.Config{Engine: b.engine(ttl), Seed: 3, TTL: ttl, Workers: 3, Faults: 4,
		Kinds: []chaos.Fault{chaos.Pause}, Unguarded: true}
	if os.Getenv(chaos.EnvArtifacts) == "" {
		// This failure is expected: its file goes away with the test
		// unless the caller asked to keep artifacts.
		t.Setenv(chaos.EnvArtifacts, t.TempDir())
	}
	res := chaos.Run(t, cfg)
	requireLateAccepted(t, res.Stats.Pauses, res.Stats.Late)
	if res.Register.Result != porcupine.Illegal {
		t.Fatalf("with the guard off, the checker found the register history %s (%d operations, %d pauses, %d late writes taken)",
			res.Register.Result, res.Register.Ops, res.Stats.Pauses, res.Stats.Late.Accepted)
	}
	t.Logf("found: the register history of %d operations is %s; visualisation: %s", res.Register.Ops, res.Register.Result, res.Register.Visualization)
	if res.Grants.Result != porcupine.Ok {
		t.Errorf("the grant history is %s: the guard being off must not change the tokens; visualisation %s", res.Grants.Result, res.Grants.Visualization)
	}
}

// TestChaosNegativeControlSlowClocks: I5's control. Workers whose Clients
// run on clocks at a tenth of the real rate believe in their holds ten
// times as long as they may: one paused until a newer holder wrote is
// told, after its late write (rejected by the guard), that it still
// holds, and the check must list it.
func TestChaosNegativeControlSlowClocks(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	res := chaos.Run(t, chaos.Config{Engine: b.engine(ttl), Seed: 15, TTL: ttl, Workers: 3, Faults: 1,
		Kinds: []chaos.Fault{chaos.Pause}, SlowClocks: true})
	if len(res.HeldAfter) == 0 {
		t.Fatalf("workers on slow clocks, one paused until a newer holder wrote, were never found holding past the lease's expiry (%d stale writers, %d told lost)",
			res.Stats.Late.Stale, res.Stats.Late.Told)
	}
	t.Logf("found: %s", res.HeldAfter[0])
	if res.Register.Result != porcupine.Ok {
		t.Errorf("with the guard on, the register history is %s; want linearizable", res.Register.Result)
	}
	requireLateRejected(t, res.Stats.Pauses, res.Stats.Late)
}

// TestChaosNegativeControlForgetfulRestart: the grant check's control.
// The bolt-over-HTTP engine's restart loses its files, as a store on a
// volume that was not persistent would: the new store issues tokens from 1
// again, and the checker must find the grant history illegal (I1). The
// guard, which remembers the highest token it took, still refuses the
// reissued tokens' writes until they climb past it: the register history
// stays linearizable.
func TestChaosNegativeControlForgetfulRestart(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	e := b.engine(ttl)
	e.Restart = func(t testing.TB, _ time.Duration) {
		b.stop()
		files, err := filepath.Glob(filepath.Join(filepath.Dir(b.path), "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.RemoveAll(f); err != nil {
				t.Fatal(err)
			}
		}
		// Started again at once: how long it stays down matters not here.
		if err := b.start(); err != nil {
			t.Fatalf("restarting the bolt server: %v", err)
		}
	}
	keepArtifactsOnlyIfAsked(t)
	res := chaos.Run(t, chaos.Config{Engine: e, Seed: 13, TTL: ttl, Workers: 3, Faults: 1, Kinds: []chaos.Fault{chaos.Restart}})
	if res.Grants.Result != porcupine.Illegal {
		t.Fatalf("with the engine's files lost at its restart, the checker found the grant history %s (%d operations, %d restarts followed by grants)",
			res.Grants.Result, res.Grants.Ops, res.Stats.Regranted)
	}
	t.Logf("found: the grant history of %d operations is %s; visualisation: %s", res.Grants.Ops, res.Grants.Result, res.Grants.Visualization)
	if res.Register.Result != porcupine.Ok {
		t.Errorf("the register history is %s: the guard must refuse the reissued tokens; visualisation %s", res.Register.Result, res.Register.Visualization)
	}
}
