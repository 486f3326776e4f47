package cli

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
)

// takeFrom acquires and releases key n times on b and returns the last
// token.
func takeFrom(t *testing.T, b lease.Backend, key string, n int) lease.Token {
	t.Helper()
	var tok lease.Token
	for range n {
		l, err := b.Acquire(t.Context(), key, "o", time.Minute)
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		if err := b.Release(t.Context(), l); err != nil {
			t.Fatalf("release %q: %v", key, err)
		}
		tok = l.Token
	}
	return tok
}

// TestBumpRestoredBackends is the restore of each engine that lease bump
// is for: tokens taken, a backup (pg_dump; DUMP of every key as an RDB
// holds them), more tokens on a key the backup knows and on one it does
// not, the backup restored (pg_restore into a new database; the keys put
// back with RESTORE), lease bump: the next tokens of both keys are above
// every token issued before.
func TestBumpRestoredBackends(t *testing.T) {
	for _, tc := range []struct {
		name string
		// backup takes a backup of the engine at spec and returns the
		// spec of the engine restored from it, once called.
		backup func(t *testing.T, spec string) (restore func() string)
		spec   func(t *testing.T) string
		open   func(t *testing.T, spec string) lease.Backend
	}{
		{
			name: "postgres",
			spec: func(t *testing.T) string { return pgURL(t, pgtest.Start(t)) },
			backup: func(t *testing.T, spec string) func() string {
				dump := filepath.Join(t.TempDir(), "lease.dump")
				runPGTool(t, "pg_dump", "--format=custom", "--file="+dump, "--dbname="+spec)
				return func() string {
					restored := pgURL(t, pgtest.Start(t))
					runPGTool(t, "pg_restore", "--no-owner", "--exit-on-error", "--dbname="+restored, dump)
					return restored
				}
			},
			open: func(t *testing.T, spec string) lease.Backend {
				s, err := pgstore.Open(t.Context(), spec)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
		},
		{
			name: "redis",
			spec: func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr + "/0" },
			backup: func(t *testing.T, spec string) func() string {
				rdb := redisClient(t, spec)
				saved := map[string]string{}
				for _, k := range rdb.Keys(t.Context(), "*").Val() {
					saved[k] = rdb.Dump(t.Context(), k).Val()
				}
				return func() string {
					if err := rdb.FlushDB(t.Context()).Err(); err != nil {
						t.Fatal(err)
					}
					for k, v := range saved {
						if err := rdb.Restore(t.Context(), k, 0, v).Err(); err != nil {
							t.Fatal(err)
						}
					}
					return spec
				}
			},
			open: func(t *testing.T, spec string) lease.Backend {
				s, err := redisstore.Open(t.Context(), spec)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec(t)
			old := tc.open(t, spec)
			backupTop := takeFrom(t, old, "jobs/a", 3)
			restore := tc.backup(t, spec)
			issued := max(takeFrom(t, old, "jobs/a", 4), takeFrom(t, old, "jobs/b", 5))
			restored := restore()

			r := cliHTTP(t, nil, nil, "bump", "--backend", restored, "--bump", "100")
			want := fmt.Sprintf("1 keys, highest token %d; every token from now on is above %d; 0 leases ended", backupTop, backupTop+100)
			if r.code != ExitOK || !strings.Contains(r.stdout, want) {
				t.Fatalf("lease bump: exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
			}
			s := tc.open(t, restored)
			for _, key := range []string{"jobs/a", "jobs/b", "jobs/new"} {
				if tok := takeFrom(t, s, key, 1); tok <= issued {
					t.Errorf("after the restore and lease bump, %s got token %d; the old store issued up to %d", key, tok, issued)
				}
			}
			// A bump past 2^53 is refused.
			r = cliHTTP(t, nil, nil, "bump", "--backend", restored, "--bump", fmt.Sprint(uint64(lease.MaxToken)))
			if r.code != ExitUsage || !strings.Contains(r.stderr, "smaller bump") {
				t.Errorf("lease bump past 2^53: exit %d, stderr %q; want %d and a smaller bump asked for", r.code, r.stderr, ExitUsage)
			}
		})
	}
}

func runPGTool(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(pgtest.Tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func redisClient(t *testing.T, spec string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestBumpRefusals: lease bump is for PostgreSQL and Redis only, needs a
// bump of at least 1, and, like lease serve, refuses an engine that cannot
// keep tokens rising across a crash unless told --allow-volatile.
func TestBumpRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bump"}, ExitUsage, "--backend is required"},
		{[]string{"bump", "--backend", "redis://127.0.0.1:1/0", "--bump", "0"}, ExitUsage, "--bump must be at least 1"},
		{[]string{"bump", "--backend", "etcd://127.0.0.1:2379"}, ExitUsage, "--bump-revision"},
		{[]string{"bump", "--backend", "127.0.0.1:6379"}, ExitUsage, "not a URL"},
		{[]string{"bump", "--backend", "mysql://db/x"}, ExitUsage, `not "mysql"`},
		{[]string{"bump", "extra", "--backend", "redis://127.0.0.1:1/0"}, ExitUsage, "unknown command"},
	} {
		r := cliHTTP(t, nil, nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("lease %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	spec := "redis://" + redistest.Start(t, redistest.Volatile()).Addr + "/0"
	r := cliHTTP(t, nil, nil, "bump", "--backend", spec)
	if r.code != ExitFailure || !strings.Contains(r.stderr, "--allow-volatile") {
		t.Errorf("lease bump of a volatile Redis: exit %d, stderr %q; want %d and the flag named", r.code, r.stderr, ExitFailure)
	}
	r = cliHTTP(t, nil, nil, "bump", "--backend", spec, "--allow-volatile")
	if want := fmt.Sprintf("every token from now on is above %d", uint64(1)<<40); r.code != ExitOK || !strings.Contains(r.stdout, want) {
		t.Errorf("lease bump --allow-volatile with the default bump: exit %d, stdout %q, stderr %q; want %q", r.code, r.stdout, r.stderr, want)
	}
}
