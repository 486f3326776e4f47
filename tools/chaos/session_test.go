package chaos_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease/tools/chaos"
)

// sessionPlan is plan for sessions: two keys, each session holding both.
func sessionPlan(cfg chaos.Config) chaos.Config {
	cfg = plan(cfg)
	cfg.Keys, cfg.Session = 2, true
	return cfg
}

// TestChaosSession: workers hold two keys in one lease.Session on `lease
// serve` (boltstore over HTTP, renewals by POST /v1/renew) and write both
// keys' registers while the session lives, under every fault: both
// histories linearizable, and no worker finds its session live after a
// newer grant of one of its keys returned (G1).
func TestChaosSession(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	res := runChaos(t, sessionPlan(chaos.Config{Engine: b.engine(ttl), Seed: 9, TTL: ttl, Kinds: chaos.AllFaults}))
	if len(res.Split) != 0 {
		t.Errorf("work went on under part of a session (G1), %d times; first: %s", len(res.Split), res.Split[0])
	}
}

// TestChaosSessionNegativeControlIgnoresErr: session workers that write
// without asking the session's Err, one paused past its holds' TTL, are
// caught writing after a newer grant of one of their keys (G1); the guard
// still refuses the late writes.
func TestChaosSessionNegativeControlIgnoresErr(t *testing.T) {
	ttl := 200 * time.Millisecond
	b := startBoltHTTP(t)
	keepArtifactsOnlyIfAsked(t)
	res := chaos.Run(t, chaos.Config{Engine: b.engine(ttl), Seed: 10, TTL: ttl, Keys: 2, Workers: 3, Faults: 2,
		Kinds: []chaos.Fault{chaos.Pause}, Session: true, IgnoreSession: true})
	if len(res.Split) == 0 {
		t.Fatalf("session workers that ignore their session's Err, paused past their TTL, were never caught after a newer grant (%d pauses, %d grants)",
			res.Stats.Pauses, res.Stats.Grants)
	}
	t.Logf("found: %s", res.Split[0])
	if res.Register.Result != porcupine.Ok {
		t.Errorf("with the guard on, the register history is %s; want linearizable", res.Register.Result)
	}
	requireLateRejected(t, res.Stats.Pauses, res.Stats.Late)
}
