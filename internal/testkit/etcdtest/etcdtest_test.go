package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.VerifyTestMain(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStart(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	if _, err := cli.Put(ctx(t), "etcdtest/start", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	resp, err := cli.Get(ctx(t), "etcdtest/start")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v; want v", resp, err)
	}
	// The minimum lease TTL the harness's timings give is 1 s.
	g, err := cli.Grant(ctx(t), 1)
	if err != nil || g.TTL != 1 {
		t.Fatalf("Grant(1) = %+v, %v; want TTL 1", g, err)
	}
}

func TestClusterKillRestart(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	cli := c.Client(t)
	if _, err := cli.Put(ctx(t), "etcdtest/k", "before"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	for round := range 2 {
		old := c.Leader(t)
		c.Kill(t, old)
		if c.Running(old) {
			t.Fatalf("round %d: member %d still running after Kill", round, old)
		}
		next := c.Leader(t)
		if next == old {
			t.Fatalf("round %d: killed member %d is still the leader", round, old)
		}
		if _, err := cli.Put(ctx(t), "etcdtest/k", "during"); err != nil {
			t.Fatalf("round %d: Put with a member down: %v", round, err)
		}
		c.Restart(t, old)
		// The restarted member has its data and catches up.
		one := etcdtest.NewClient(t, []string{c.Endpoint(old)})
		resp, err := one.Get(ctx(t), "etcdtest/k")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "during" {
			t.Fatalf("round %d: Get from restarted member = %v, %v", round, resp, err)
		}
	}
	c.Stop(t, 0)
	c.Restart(t, 0)
}

func TestStartUsesExternal(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd")
	}
	t.Setenv(etcdtest.EnvEndpoints, "http://127.0.0.1:1")
	// Start hands out the external endpoints without starting anything.
	if got := etcdtest.Start(t); len(got) != 1 || got[0] != "http://127.0.0.1:1" {
		t.Fatalf("Start with %s set = %v", etcdtest.EnvEndpoints, got)
	}
}
