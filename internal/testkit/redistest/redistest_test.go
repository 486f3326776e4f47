package redistest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/testkit/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDurableSurvivesRestartAndKill(t *testing.T) {
	s := redistest.Start(t)
	if !s.Durable {
		t.Fatal("default server is not durable")
	}
	c := s.Client(t)
	ctx := ctxFor(t)
	for _, name := range []string{"appendonly", "appendfsync"} {
		got, err := c.ConfigGet(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"appendonly": "yes", "appendfsync": "always"}[name]
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	if err := c.Set(ctx, "k", "before-restart", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "before-restart" {
		t.Fatalf("after Restart Get = %q, %v; want before-restart", got, err)
	}
	if err := c.Set(ctx, "k", "before-kill", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart(t)
	// appendfsync always: an acknowledged write survives SIGKILL.
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "before-kill" {
		t.Fatalf("after Kill and Restart Get = %q, %v; want before-kill", got, err)
	}
}

func TestVolatileForgetsOnRestart(t *testing.T) {
	s := redistest.Start(t, redistest.Volatile())
	if s.Durable {
		t.Fatal("Volatile server reports Durable")
	}
	c := s.Client(t)
	ctx := ctxFor(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if _, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("volatile server kept a key across a restart: err = %v", err)
	}
}

func TestConfigOption(t *testing.T) {
	s := redistest.Start(t, redistest.Config("maxmemory-policy", "allkeys-lru"))
	got, err := s.Client(t).ConfigGet(ctxFor(t), "maxmemory-policy").Result()
	if err != nil || got["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("maxmemory-policy = %v, %v; want allkeys-lru", got, err)
	}
}

func TestStopEndsServer(t *testing.T) {
	s := redistest.Start(t, redistest.Volatile())
	c := s.Client(t)
	s.Stop(t)
	if err := c.Ping(ctxFor(t)).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
}

func TestClusterMode(t *testing.T) {
	s := redistest.Start(t, redistest.Cluster(), redistest.Volatile())
	c := s.ClusterClient(t)
	ctx := ctxFor(t)
	// Keys of different slots in one script are refused; one hash tag is fine.
	err := c.Eval(ctx, "return 1", []string{"{a}x", "{b}y"}).Err()
	if err == nil {
		t.Fatal("a script over two hash slots ran: the server is not in cluster mode")
	}
	if err := c.Eval(ctx, "return redis.call('SET', KEYS[1], KEYS[2])", []string{"{a}x", "{a}y"}).Err(); err != nil {
		t.Fatalf("script within one hash tag: %v", err)
	}
	s.Restart(t)
	if got, err := c.Get(ctx, "{a}x").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after restart: Get = %q, %v; want a volatile server to have lost it", got, err)
	}
}
