package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/guardtest"
	"github.com/leasehq/lease/fence/redisfence"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fresh returns a name prefix of its own for a test, so that tests never see
// each other's keys, nor those of an earlier run on a server named by
// LEASE_TEST_REDIS_ADDR.
func fresh() string { return "t-" + lease.NewID().Reveal()[:12] }

// newGuard returns a guard on srv under a fresh prefix (unless opts set one).
func newGuard(t *testing.T, srv *redistest.Server, opts ...redisfence.Option) *redisfence.Guard {
	t.Helper()
	opts = append([]redisfence.Option{redisfence.WithPrefix(fresh() + ":")}, opts...)
	g, err := redisfence.New(ctxFor(t), srv.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestSeedScenario is the seed's story end to end on Redis, leases and
// guarded value both in Redis: A's lease (TTL 100 ms) expires while A is
// paused, B acquires and writes, and A's late write is rejected.
func TestSeedScenario(t *testing.T) {
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			store, err := redisstore.Open(ctxFor(t), "redis://"+srv.Addr, redisstore.WithNamespace(fresh()))
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			g := newGuard(t, srv, redisfence.WithMode(mode))
			ctx := ctxFor(t)
			const job, resource = "job", "job-output"

			a, err := store.Acquire(ctx, job, "worker-a", 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if a.Token != 1 {
				t.Fatalf("A's token on a fresh key = %d, want 1", a.Token)
			}
			// A pauses past its TTL; the server expires the lease.
			for deadline := time.Now().Add(5 * time.Second); ; {
				_, err := store.Get(ctx, job)
				if errors.Is(err, lease.ErrNotFound) {
					break
				}
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("A's lease not expired: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			b, err := store.Acquire(ctx, job, "worker-b", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if b.Token != 2 {
				t.Fatalf("B's token = %d, want 2", b.Token)
			}
			if err := g.Set(ctx, resource, b.Token, "written-by-b"); err != nil {
				t.Fatalf("B's write: %v", err)
			}
			// A wakes and writes with its old token.
			err = g.Set(ctx, resource, a.Token, "written-by-a")
			var stale *fence.StaleTokenError
			if !errors.As(err, &stale) || !errors.Is(err, lease.ErrStaleToken) {
				t.Fatalf("A's late write: err = %v, want a *fence.StaleTokenError", err)
			}
			want := fence.StaleTokenError{Resource: resource, Token: 1, Highest: 2, Mode: mode}
			if *stale != want {
				t.Errorf("StaleTokenError = %+v, want %+v", *stale, want)
			}
			v, tok, err := g.Get(ctx, resource)
			if err != nil || v != "written-by-b" || tok != 2 {
				t.Fatalf("final state = %q, token %d, %v; want written-by-b, token 2", v, tok, err)
			}
		})
	}
}

// TestConformance runs the guard suite on Redis: a Guard keeps the guarded
// value itself, so it runs as a guardtest.ValueGuard.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	guardtest.TestValueGuard(t, func(t *testing.T, mode fence.Mode) guardtest.ValueGuard {
		g := newGuard(t, srv, redisfence.WithMode(mode))
		if g.Mode() != mode {
			t.Fatalf("Mode() = %v, want %v", g.Mode(), mode)
		}
		return g
	})
}

func TestValuesAndNamesKeptIntact(t *testing.T) {
	srv := redistest.Start(t)
	g := newGuard(t, srv)
	ctx := ctxFor(t)
	for i, r := range []string{"a*b?[c]", "{tag}", "ünï/🔒", `"q" 'q'`, strings.Repeat("r", lease.MaxKeyLen)} {
		value := fmt.Sprintf("binary\x00value\xff%d\r\n", i)
		if err := g.Set(ctx, r, 1, value); err != nil {
			t.Fatalf("Set(%q): %v", r, err)
		}
		if v, tok, err := g.Get(ctx, r); err != nil || v != value || tok != 1 {
			t.Fatalf("Get(%q) = %q, %d, %v", r, v, tok, err)
		}
	}
	if _, _, err := g.Get(ctx, "never-written"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of an unwritten resource: err = %v, want ErrNotFound", err)
	}
}

func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	g := newGuard(t, srv)
	ctx := ctxFor(t)
	for name, f := range map[string]func() error{
		"zero token":       func() error { return g.Set(ctx, "r", 0, "v") },
		"token above 2^53": func() error { return g.Set(ctx, "r", lease.MaxToken+1, "v") },
		"empty resource":   func() error { return g.Set(ctx, "", 1, "v") },
		"control char":     func() error { return g.Set(ctx, "a\nb", 1, "v") },
		"Get empty":        func() error { _, _, err := g.Get(ctx, ""); return err },
		"New nil client":   func() error { _, err := redisfence.New(ctx, nil); return err },
		"bad mode": func() error {
			_, err := redisfence.New(ctx, srv.Client(t), redisfence.WithMode(fence.Mode(7)))
			return err
		},
		"nil option": func() error { _, err := redisfence.New(ctx, srv.Client(t), nil); return err },
		"long prefix": func() error {
			_, err := redisfence.New(ctx, srv.Client(t), redisfence.WithPrefix(strings.Repeat("p", 257)))
			return err
		},
	} {
		if err := f(); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, _, err := g.Get(ctx, "r"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("bad input wrote something: Get err = %v", err)
	}
}

func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "stopping the server")
	g := newGuard(t, srv)
	srv.Stop(t)
	if err := g.Set(ctxFor(t), "r", 1, "v"); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Set with the server down: err = %v, want ErrUnavailable", err)
	}
}

// TestCorruptStoredTokenFailsClosed: a resource's hash whose token field is
// not a token the guard can have written (another program wrote the key, or
// it was edited by hand) must make Set fail — changing nothing — rather than
// be read leniently by Lua's tonumber: "nan" compares false with everything,
// so every token, however old, was admitted, and "-1" or " 7" or "0x10" were
// read as numbers the guard never stores.
func TestCorruptStoredTokenFailsClosed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxFor(t)
	prefix := fresh() + ":"
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		g := newGuard(t, srv, redisfence.WithPrefix(prefix), redisfence.WithMode(mode))
		for i, stored := range []string{"nan", "-nan", "inf", "-1", "0", "", "abc", " 7", "7 ", "0x10", "1e3", "1.5", "07",
			"9007199254740993", "99999999999999999999"} {
			resource := fmt.Sprintf("corrupt-%s-%d", mode, i)
			key := prefix + resource
			if err := rdb.HSet(ctx, key, "value", "old", "token", stored).Err(); err != nil {
				t.Fatal(err)
			}
			for _, tok := range []lease.Token{1, 8, 1001, lease.MaxToken} {
				err := g.Set(ctx, resource, tok, "new")
				if err == nil || errors.Is(err, lease.ErrStaleToken) || !errors.Is(err, lease.ErrUnavailable) {
					t.Errorf("%s: Set(token %d) over stored token %q: err = %v, want an error matching ErrUnavailable", mode, tok, stored, err)
				}
			}
			if _, tok, err := g.Get(ctx, resource); !errors.Is(err, lease.ErrUnavailable) {
				t.Errorf("%s: Get over stored token %q = token %d, %v; want an error matching ErrUnavailable", mode, stored, tok, err)
			}
			got, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got["value"] != "old" || got["token"] != stored || len(got) != 2 {
				t.Errorf("%s: hash with stored token %q changed to %q", mode, stored, got)
			}
		}
	}
}

// TestNewReachesTheServer: New loads the guard's script, as pgfence.New and
// sqlfence.New create their table, so a server that cannot be reached
// fails New with an error matching lease.ErrUnavailable rather than the
// first Set; and a New whose ctx has ended does not wait for the server.
func TestNewReachesTheServer(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	if _, err := redisfence.New(ctxFor(t), c); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("New on a closed port: %v, want ErrUnavailable", err)
	}
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := redisfence.New(ctx, srv.Client(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("New with an ended ctx: %v, want context.Canceled", err)
	}
}
