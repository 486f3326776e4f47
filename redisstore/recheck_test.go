package redisstore_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// recheckEvery is the re-check period of the tests' Stores: short, so that
// a change is seen in milliseconds.
const recheckEvery = 10 * time.Millisecond

// TestVolatileSettingAtRuntime checks I7 for the settings no grant's script
// can read: appendfsync, no-appendfsync-on-rewrite and the eviction policy
// changed with CONFIG SET after the Store started (as a restart with another
// redis.conf, or a failover to a node configured otherwise, would change
// them) refuse every grant, Acquire and Bump, with an error matching
// ErrVolatile and lease.ErrUnavailable naming the setting and its fix, once
// the Store's re-check has seen it; a lease held goes on being renewed and
// released; set back, grants resume. Stores with AllowVolatile or
// AssumeDurable are not refused. Before, New's check was the only one:
// grants went on, and a crash could issue their tokens again (I1).
func TestVolatileSettingAtRuntime(t *testing.T) {
	for _, layout := range []string{"single", "cluster"} {
		t.Run(layout, func(t *testing.T) {
			var (
				srv   *redistest.Server
				store func(t *testing.T, opts ...redisstore.Option) *redisstore.Store
			)
			if layout == "single" {
				srv = redistest.Start(t)
				store = func(t *testing.T, opts ...redisstore.Option) *redisstore.Store { return open(t, srv, opts...) }
			} else {
				srv = redistest.Start(t, redistest.Cluster())
				cc := srv.ClusterClient(t)
				store = func(t *testing.T, opts ...redisstore.Option) *redisstore.Store {
					s, err := redisstore.New(cc, append([]redisstore.Option{redisstore.WithNamespace(testNamespace())}, opts...)...)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = s.Close() })
					return s
				}
			}
			srv.RequireOwned(t, "reconfiguring the server")
			// The node as the refusal names it: a one-node cluster knows
			// no address of its own, and reports its port alone.
			node := srv.Addr
			if layout == "cluster" {
				_, port, err := net.SplitHostPort(srv.Addr)
				if err != nil {
					t.Fatal(err)
				}
				node = ":" + port
			}
			raw := srv.Client(t)
			ctx := ctxFor(t)
			s := store(t, redisstore.RecheckEvery(recheckEvery))
			allowed := store(t, redisstore.AllowVolatile(), redisstore.RecheckEvery(recheckEvery))
			assumed := store(t, redisstore.AssumeDurable(), redisstore.RecheckEvery(recheckEvery))
			configSet := func(t *testing.T, pairs ...string) {
				t.Helper()
				for i := 0; i < len(pairs); i += 2 {
					if err := raw.ConfigSet(ctx, pairs[i], pairs[i+1]).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, tc := range []struct {
				name      string
				set, back []string // CONFIG SET name value ...
				setting   string   // named in the refusal
				fix       string   // the command the refusal suggests
			}{
				{"appendfsync everysec", []string{"appendfsync", "everysec"}, []string{"appendfsync", "always"}, "appendfsync", "CONFIG SET appendfsync always"},
				{"appendfsync no", []string{"appendfsync", "no"}, []string{"appendfsync", "always"}, "appendfsync", "CONFIG SET appendfsync always"},
				{"no fsync during rewrite", []string{"no-appendfsync-on-rewrite", "yes"}, []string{"no-appendfsync-on-rewrite", "no"}, "no-appendfsync-on-rewrite", "CONFIG SET no-appendfsync-on-rewrite no"},
				{"allkeys eviction", []string{"maxmemory", "100mb", "maxmemory-policy", "allkeys-lru"}, []string{"maxmemory-policy", "noeviction", "maxmemory", "0"}, "maxmemory-policy", "CONFIG SET maxmemory-policy noeviction"},
				{"volatile eviction", []string{"maxmemory", "100mb", "maxmemory-policy", "volatile-ttl"}, []string{"maxmemory-policy", "noeviction", "maxmemory", "0"}, "maxmemory-policy", "CONFIG SET maxmemory-policy noeviction"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					k := "runtime/" + strings.ReplaceAll(tc.name, " ", "-")
					held, err := s.Acquire(ctx, k+"/held", "holder", time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					configSet(t, tc.set...)
					t.Cleanup(func() { configSet(t, tc.back...) }) // for the next case, if this one fails
					poll.Until(t, 10*time.Second, func() error {
						l, err := s.Acquire(ctx, k, "w", time.Minute)
						if err == nil {
							if err := s.Release(ctx, l); err != nil {
								t.Fatal(err)
							}
							return fmt.Errorf("%s: still granted (token %d)", tc.name, l.Token)
						}
						if !errors.Is(err, redisstore.ErrVolatile) || !errors.Is(err, lease.ErrUnavailable) {
							t.Fatalf("Acquire with %s = %v, want ErrVolatile and ErrUnavailable", tc.name, err)
						}
						for _, want := range []string{tc.setting, tc.fix, node, "AllowVolatile"} {
							if !strings.Contains(err.Error(), want) {
								t.Fatalf("refusal %q does not mention %q", err, want)
							}
						}
						return nil
					})
					// Refused from now on, not once: the verdict stands.
					for range 3 {
						if _, err := s.Acquire(ctx, k, "w", time.Minute); !errors.Is(err, redisstore.ErrVolatile) {
							t.Fatalf("Acquire again with %s = %v, want ErrVolatile", tc.name, err)
						}
					}
					if _, err := s.Bump(ctx, 1); !errors.Is(err, redisstore.ErrVolatile) || !errors.Is(err, lease.ErrUnavailable) {
						t.Fatalf("Bump with %s = %v, want ErrVolatile and ErrUnavailable", tc.name, err)
					}
					// Renewals and releases issue no token: they go on.
					renewed, err := s.Renew(ctx, held, time.Minute)
					if err != nil {
						t.Fatalf("Renew with %s: %v", tc.name, err)
					}
					if renewed.Token != held.Token {
						t.Fatalf("Renew changed the token: %d, want %d", renewed.Token, held.Token)
					}
					if err := s.Release(ctx, renewed); err != nil {
						t.Fatalf("Release with %s: %v", tc.name, err)
					}
					if _, err := s.Get(ctx, k+"/held"); !errors.Is(err, lease.ErrNotFound) {
						t.Fatalf("Get of the released lease = %v, want ErrNotFound", err)
					}
					// The opt-ins are not refused.
					for name, o := range map[string]*redisstore.Store{"AllowVolatile": allowed, "AssumeDurable": assumed} {
						l, err := o.Acquire(ctx, k, "w", time.Minute)
						if err != nil {
							t.Fatalf("Acquire through %s with %s: %v", name, tc.name, err)
						}
						if err := o.Release(ctx, l); err != nil {
							t.Fatal(err)
						}
					}

					configSet(t, tc.back...)
					poll.Until(t, 10*time.Second, func() error {
						l, err := s.Acquire(ctx, k, "w", time.Minute)
						if err != nil {
							if !errors.Is(err, redisstore.ErrVolatile) {
								t.Fatalf("Acquire with %s set back = %v, want a grant (or ErrVolatile until the check)", tc.name, err)
							}
							return err
						}
						return s.Release(ctx, l)
					})
				})
			}
		})
	}
}
