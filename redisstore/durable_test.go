package redisstore_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/redistest"
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
	if _, err := redisstore.New(ctx, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New(nil): err = %v, want ErrInvalid", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, ns := range []string{"", "a{b", "a}b", "a\nb", strings.Repeat("n", 65)} {
		if _, err := redisstore.New(ctx, c, redisstore.AllowVolatile(), redisstore.WithNamespace(ns)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("WithNamespace(%q): err = %v, want ErrInvalid", ns, err)
		}
	}
	if _, err := redisstore.New(ctx, c, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New with a nil option: err = %v, want ErrInvalid", err)
	}
}
