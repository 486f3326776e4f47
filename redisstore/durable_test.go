package redisstore_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// TestRefusesVolatile checks I7: each configuration that can lose or evict a
// token counter is refused with an error naming the setting and its fix,
// and runs only with the explicit opt-in.
func TestRefusesVolatile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []redistest.Option
		setting string // named in the error
		fix     string // the command the error suggests
	}{
		{"no AOF", []redistest.Option{redistest.Volatile()}, "appendonly", "CONFIG SET appendonly yes"},
		{"fsync every second", []redistest.Option{redistest.Config("appendfsync", "everysec")}, "appendfsync", "CONFIG SET appendfsync always"},
		{"no fsync during rewrite", []redistest.Option{redistest.Config("no-appendfsync-on-rewrite", "yes")}, "no-appendfsync-on-rewrite", "CONFIG SET no-appendfsync-on-rewrite no"},
		{"allkeys eviction", []redistest.Option{redistest.Config("maxmemory", "100mb"), redistest.Config("maxmemory-policy", "allkeys-lru")}, "maxmemory-policy", "CONFIG SET maxmemory-policy noeviction"},
		{"volatile eviction", []redistest.Option{redistest.Config("maxmemory", "100mb"), redistest.Config("maxmemory-policy", "volatile-ttl")}, "maxmemory-policy", "CONFIG SET maxmemory-policy noeviction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.opts...)
			s, err := redisstore.Open(ctxFor(t), "redis://"+srv.Addr)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open accepted a server that can lose tokens")
			}
			if !errors.Is(err, redisstore.ErrVolatile) {
				t.Fatalf("err = %v, want ErrVolatile", err)
			}
			for _, want := range []string{tc.setting, tc.fix, "AllowVolatile", srv.Addr} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			s = open(t, srv, redisstore.AllowVolatile())
			if _, err := s.Acquire(ctxFor(t), "k", "o", lease.MinTTL*100); err != nil {
				t.Fatalf("with AllowVolatile: Acquire: %v", err)
			}
		})
	}
}

func TestAcceptsDurable(t *testing.T) {
	// A memory limit is fine as long as nothing is evicted.
	srv := redistest.Start(t, redistest.Config("maxmemory", "100mb"), redistest.Config("maxmemory-policy", "noeviction"))
	open(t, srv)
}

func TestHiddenConfigRefused(t *testing.T) {
	srv := redistest.Start(t, redistest.Config("rename-command", "CONFIG", `""`))
	_, err := redisstore.Open(ctxFor(t), "redis://"+srv.Addr)
	if !errors.Is(err, redisstore.ErrVolatile) {
		t.Fatalf("Open with CONFIG disabled: err = %v, want ErrVolatile", err)
	}
	for _, want := range []string{"cannot read", "AssumeDurable", "AllowVolatile"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	for i, opt := range []redisstore.Option{redisstore.AssumeDurable(), redisstore.AllowVolatile()} {
		s := open(t, srv, opt)
		if _, err := s.Acquire(ctxFor(t), fmt.Sprintf("k%d", i), "o", lease.MinTTL); err != nil {
			t.Fatalf("Acquire on a server with hidden CONFIG: %v", err)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	_, err = redisstore.Open(ctxFor(t), "redis://"+addr)
	if !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, redisstore.ErrVolatile) {
		t.Fatalf("Open of a closed port: err = %v, want ErrUnavailable (and not ErrVolatile)", err)
	}
}

func TestConstructorValidation(t *testing.T) {
	ctx := ctxFor(t)
	if _, err := redisstore.Open(ctx, "http://nope"); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Open with a bad URL: err = %v, want ErrInvalid", err)
	}
	if _, err := redisstore.New(nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New(nil): err = %v, want ErrInvalid", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, ns := range []string{"", "a{b", "a}b", "a\nb", strings.Repeat("n", 65)} {
		if _, err := redisstore.New(c, redisstore.AllowVolatile(), redisstore.WithNamespace(ns)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("WithNamespace(%q): err = %v, want ErrInvalid", ns, err)
		}
	}
	if _, err := redisstore.New(c, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New with a nil option: err = %v, want ErrInvalid", err)
	}
}

// TestRefusesRing checks that New refuses a *redis.Ring. A Ring sends each
// keyless command to one shard picked at random, so the persistence check
// read the settings of one random shard and passed a Ring with a volatile
// shard about half the time; and a Ring moves keys to the other shards
// whenever its heartbeat marks one shard down, where the lease is not and
// the token counter is missing or old: a second holder and tokens issued
// again (I1, I3), whatever each server's persistence. The release channel
// and List do not span its shards either.
func TestRefusesRing(t *testing.T) {
	durable := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		other *redistest.Server
	}{
		{"two durable shards", redistest.Start(t)},
		{"one volatile shard", redistest.Start(t, redistest.Volatile())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": durable.Addr, "b": tc.other.Addr}})
			defer ring.Close()
			for range 8 { // the old check passed a volatile shard half the time
				s, err := redisstore.New(ring, redisstore.WithNamespace(testNamespace()))
				if err == nil {
					_ = s.Close()
					t.Fatal("New accepted a *redis.Ring, which moves keys between shards and so loses token counters")
				}
				if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "Ring") {
					t.Fatalf("New(ring): err = %v, want ErrInvalid naming the Ring", err)
				}
			}
			// Not even with an explicit opt-in: it would not work (List and
			// the release channel see one shard).
			if s, err := redisstore.New(ring, redisstore.AllowVolatile()); !errors.Is(err, lease.ErrInvalid) {
				if s != nil {
					_ = s.Close()
				}
				t.Fatalf("New(ring, AllowVolatile): err = %v, want ErrInvalid", err)
			}
		})
	}
}
