package chaos_test

import (
	"context"
	neturl "net/url"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/tools/chaos"
)

// electionPlan sizes an election run: the short form for make test, the
// long one for make chaos (LEASE_CHAOS_LONG).
func electionPlan(cfg chaos.ElectionConfig) chaos.ElectionConfig {
	if long() {
		cfg.Workers, cfg.Faults = 4, 30
		cfg.Kinds = []chaos.Fault{chaos.Pause, chaos.CrashLeader, chaos.Restart, chaos.Latency, chaos.Timeout, chaos.ResetPeer}
	} else {
		cfg.Faults = 3 // one of each: a paused leader, a crashed leader, the etcd leader killed
	}
	return cfg
}

func logElection(t *testing.T, cfg chaos.ElectionConfig, res chaos.ElectionResult) {
	t.Helper()
	s := res.Stats
	t.Logf("%s election: %v, %d terms, %d writes (%d accepted, %d rejected), %d reads, %d campaign errors, %d losses, %d pauses (%d made a stale leader: %d late writes rejected, %d accepted, %d told their term was lost), %d crashes, %d leaders observed (%d breaks, %d successions), faults %v; register %v on %d ops, terms %v on %d ops",
		cfg.Engine.Name, s.Duration.Round(time.Millisecond), s.Terms, s.Writes, s.Accepted, s.Rejected, s.Reads, s.CampaignErrors, s.Lost,
		s.Pauses, s.Late.Stale, s.Late.Rejected, s.Late.Accepted, s.Late.Told, s.Crashes, s.Observed, s.ObserveBreaks, s.Successions, s.Faults, res.Register.Result, res.Register.Ops, res.Terms.Result, res.Terms.Ops)
}

// TestChaosElectionEtcd: leaders elected through package election on a
// three-member etcd cluster write to a guarded register while a leader is
// paused past its term, a leader's process crashes, and etcd's own Raft
// leader is killed. No two leaders' writes are both accepted out of term
// order, terms' tokens rise, no leader finds its term held after a newer
// term was elected, and no observer sees a leader's token go back.
func TestChaosElectionEtcd(t *testing.T) {
	ttl := 500 * time.Millisecond
	e := etcdEngine(t)
	cfg := electionPlan(chaos.ElectionConfig{Engine: e, Seed: 6, TTL: ttl})
	res := chaos.RunElection(t, cfg)
	logElection(t, cfg, res)
	requireElection(t, res)
	for _, k := range cfg.Kinds {
		if res.Stats.Faults[k] == 0 {
			t.Errorf("fault %s was never injected", k)
		}
	}
	requireLateRejected(t, res.Stats.Pauses, res.Stats.Late)
	if res.Stats.Late.Told != res.Stats.Late.Stale {
		t.Errorf("of %d stale leaders %d asked their term's Err after their late writes and were told it was lost; want all", res.Stats.Late.Stale, res.Stats.Late.Told)
	}
	if res.Stats.Observed == 0 || res.Stats.Crashes == 0 {
		t.Errorf("nothing was observed (%d) or no leader crashed (%d)", res.Stats.Observed, res.Stats.Crashes)
	}
	if res.Stats.Successions == 0 {
		t.Errorf("no observer saw one leader follow another (%d leaders observed): E3 was never tried", res.Stats.Observed)
	}
}

// requireElection fails t unless every check of res passed.
func requireElection(t *testing.T, res chaos.ElectionResult) {
	t.Helper()
	chaos.RequireLinearizable(t, chaos.Result{Register: res.Register, Grants: res.Terms, Events: res.Events})
	for _, v := range res.TwoLeaders {
		t.Errorf("two leaders: %s", v)
	}
	for _, v := range res.Regressions {
		t.Errorf("observed leader went back: %s", v)
	}
}

// singleEtcd is etcdstore on a single-node etcd, without restarts: enough
// for the negative controls, which need only pauses.
func singleEtcd(t *testing.T) chaos.Engine {
	var addrs []string
	for _, ep := range etcdtest.Start(t) {
		u, err := neturl.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, u.Host)
	}
	return chaos.Engine{
		Name:  "etcd1",
		Addrs: addrs,
		Connect: func(ctx context.Context, addrs []string) (lease.Backend, func(), error) {
			eps := make([]string, len(addrs))
			for i, a := range addrs {
				eps[i] = "http://" + a
			}
			s, err := etcdstore.Open(ctx, eps, etcdstore.WithPrefix("/"+t.Name()+"/"))
			if err != nil {
				return nil, nil, err
			}
			return s, func() { _ = s.Close() }, nil
		},
		Linger: 2500 * time.Millisecond,
	}
}

func keepArtifactsOnlyIfAsked(t *testing.T) {
	if os.Getenv(chaos.EnvArtifacts) == "" {
		// The failures below are expected: their files go away with the
		// test unless the caller asked to keep artifacts.
		t.Setenv(chaos.EnvArtifacts, t.TempDir())
	}
}

// TestChaosElectionNegativeControlIgnoresDeadline: leaders that act
// without checking their term (an election that ignores the I5 deadline)
// are caught acting beside a newer leader once one of them is paused past
// its term; the guard alone still refuses their late writes.
func TestChaosElectionNegativeControlIgnoresDeadline(t *testing.T) {
	ttl := 500 * time.Millisecond
	e := singleEtcd(t)
	keepArtifactsOnlyIfAsked(t)
	res := chaos.RunElection(t, chaos.ElectionConfig{Engine: e, Seed: 7, TTL: ttl, Faults: 1,
		Kinds: []chaos.Fault{chaos.Pause}, IgnoreDeadline: true})
	if len(res.TwoLeaders) == 0 {
		t.Fatalf("leaders that ignore their deadline, one paused past it, were never caught beside a newer one (%d pauses, %d terms)",
			res.Stats.Pauses, res.Stats.Terms)
	}
	t.Logf("found: %s", res.TwoLeaders[0])
	if res.Register.Result != porcupine.Ok {
		t.Errorf("with the guard on, the register history is %s; want linearizable", res.Register.Result)
	}
	requireLateRejected(t, res.Stats.Pauses, res.Stats.Late)
}

// TestChaosElectionNegativeControlUnguarded: with the guard off, a leader
// paused past its term writes after its successor, and the register
// history is illegal.
func TestChaosElectionNegativeControlUnguarded(t *testing.T) {
	ttl := 500 * time.Millisecond
	e := singleEtcd(t)
	keepArtifactsOnlyIfAsked(t)
	res := chaos.RunElection(t, chaos.ElectionConfig{Engine: e, Seed: 8, TTL: ttl, Faults: 1,
		Kinds: []chaos.Fault{chaos.Pause}, Unguarded: true})
	requireLateAccepted(t, res.Stats.Pauses, res.Stats.Late)
	if res.Register.Result != porcupine.Illegal {
		t.Fatalf("with the guard off, the checker found the register history %s (%d operations, %d pauses)",
			res.Register.Result, res.Register.Ops, res.Stats.Pauses)
	}
	t.Logf("found: the register history of %d operations is %s; visualisation: %s", res.Register.Ops, res.Register.Result, res.Register.Visualization)
	if len(res.TwoLeaders) != 0 || res.Terms.Result != porcupine.Ok {
		t.Errorf("the guard being off must change nothing else: two leaders %q, terms %s", res.TwoLeaders, res.Terms.Result)
	}
}
