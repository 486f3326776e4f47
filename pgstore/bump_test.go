package pgstore

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/leasetest"
)

func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(pgtest.Tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestBumpAfterRestore is a restore as an operator makes one: pg_dump of
// the database, more grants on the old one (on a key the dump knows and on
// a key created after it), pg_restore into a new database, Bump. Every
// token the restored tables issue is then above every token the old ones
// issued, for the key the dump knows and for the one it does not, through
// a lone acquire and through a batch; the lease the dump held is ended.
func TestBumpAfterRestore(t *testing.T) {
	ctx := testCtx(t)
	old := newTestDB(t, 8)
	s := old.store(t)
	before := leasetest.Grants(t, testCtx(t), s, "A", 3, true)
	held := leasetest.Grants(t, testCtx(t), s, "held", 2, false)
	dump := filepath.Join(t.TempDir(), "lease.dump")
	runTool(t, "pg_dump", "--format=custom", "--file="+dump, "--dbname="+old.url)
	after := leasetest.Grants(t, testCtx(t), s, "A", 4, true)
	newKey := leasetest.Grants(t, testCtx(t), s, "B", 5, true)
	issued := leasetest.Highest(before, held, after, newKey)

	restored := openTestDB(t, pgtest.Start(t), 8)
	runTool(t, "pg_restore", "--no-owner", "--exit-on-error", "--dbname="+restored.url, dump)
	r := restored.store(t)
	const n = 100
	rep, err := r.Bump(ctx, n)
	if err != nil {
		t.Fatalf("Bump: %v", err)
	}
	if backupTop := leasetest.Highest(before, held); rep.Keys != 2 || rep.Top != backupTop || rep.Floor != backupTop+n || rep.Leases != 1 {
		t.Fatalf("Bump: %+v; want 2 keys, top %d, floor %d, 1 lease ended", rep, backupTop, backupTop+n)
	}

	// The lease the dump held is over.
	last := held[len(held)-1]
	if _, err := r.Get(ctx, "held"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get of the lease the dump held, after Bump: %v, want ErrNotFound", err)
	}
	if _, err := r.Renew(ctx, last, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Renew of the lease the dump held, after Bump: %v, want ErrNotHeld", err)
	}

	check := func(l lease.Lease) {
		t.Helper()
		if l.Token <= issued || l.Token <= rep.Floor {
			t.Errorf("after the restore and Bump, %q got token %d; the old tables issued up to %d, the floor is %d", l.Key, l.Token, issued, rep.Floor)
		}
	}
	// A lone acquire of the key created after the dump.
	check(leasetest.Grants(t, testCtx(t), r, "B", 1, true)[0])
	// A batch: the key the dump knows, the one it held, a key nobody knew.
	acq := logStatements(r.acquires)
	unblock := blockAcquires(t, restored, r)
	keys := []string{"A", "C", "held"}
	res := acquireAsync(ctx, r, keys)
	waitQueued(t, len(keys), r.acquires.state)
	unblock()
	for i, ch := range res {
		a := <-ch
		if a.err != nil {
			t.Fatalf("batched acquire of %q: %v", keys[i], a.err)
		}
		check(a.l)
	}
	if len(acq.with("A")) != 1 || len(acq.with("A")[0]) != len(keys) {
		t.Fatalf("statements holding A: %q, want one with all of %q", acq.with("A"), keys)
	}
}

// version1DDL is the tables as SchemaVersion 1 made them, frozen here.
const version1DDL = `
CREATE TABLE public.lease_meta (
	one     boolean PRIMARY KEY DEFAULT true CHECK (one),
	version integer NOT NULL
);
INSERT INTO public.lease_meta (version) VALUES (1);
CREATE TABLE public.lease_leases (
	key        text COLLATE "C" PRIMARY KEY,
	token      bigint NOT NULL CHECK (token BETWEEN 1 AND 9007199254740992),
	id         bytea NOT NULL,
	owner      text NOT NULL,
	ttl_ns     bigint NOT NULL,
	expires_at timestamptz NOT NULL,
	wanted     boolean NOT NULL DEFAULT false
) WITH (fillfactor = 70);
INSERT INTO public.lease_leases VALUES
	('old', 7, '\x00000000000000000000000000000000', 'o', 60000000000, '-infinity'),
	('live', 3, '\x00000000000000000000000000000000', 'o', 60000000000, now() + interval '1 hour');`

// TestMigrateVersion1 opens tables an earlier release made (schema version
// 1, no token floor): the Store migrates them in place, the keys' tokens
// go on from their rows, and Bump works on them.
func TestMigrateVersion1(t *testing.T) {
	ctx := testCtx(t)
	db := newTestDB(t, 4)
	if _, err := db.pool.Exec(ctx, version1DDL); err != nil {
		t.Fatal(err)
	}
	s := db.store(t)
	if l := leasetest.Grants(t, testCtx(t), s, "old", 1, true)[0]; l.Token != 8 {
		t.Fatalf("first token of a version-1 row at 7: %d, want 8", l.Token)
	}
	if l := leasetest.Grants(t, testCtx(t), s, "new", 1, true)[0]; l.Token != 1 {
		t.Fatalf("first token of a new key before any bump: %d, want 1", l.Token)
	}
	var version int
	var floor int64
	if err := db.pool.QueryRow(ctx, `SELECT version, token_floor FROM public.lease_meta`).Scan(&version, &floor); err != nil {
		t.Fatalf("reading the migrated meta table: %v", err)
	}
	if version != SchemaVersion || floor != 0 {
		t.Fatalf("migrated meta: version %d, floor %d; want %d, 0", version, floor, SchemaVersion)
	}
	rep, err := s.Bump(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Keys != 3 || rep.Top != 8 || rep.Floor != 18 || rep.Leases != 1 {
		t.Fatalf("Bump over old(8), new(1), live(3, held): %+v; want 3 keys, top 8, floor 18, 1 lease ended", rep)
	}
	for _, k := range []string{"old", "new", "live", "unknown"} {
		if l := leasetest.Grants(t, testCtx(t), s, k, 1, true)[0]; l.Token != 19 {
			t.Errorf("first token of %q after the bump to 18: %d, want 19", k, l.Token)
		}
	}
	// A second bump goes on from the floor or the highest token, whichever
	// is higher (here the tokens, 19).
	if rep, err := s.Bump(ctx, 5); err != nil || rep.Top != 19 || rep.Floor != 24 {
		t.Fatalf("second Bump: %+v, %v; want top 19, floor 24", rep, err)
	}
}

// TestBumpLimits: tokens stay within 2^53 (lease.MaxToken). A bump whose
// floor would leave no room for one more token is refused and changes
// nothing; the highest floor allowed issues exactly 2^53.
func TestBumpLimits(t *testing.T) {
	ctx := testCtx(t)
	db := newTestDB(t, 4)
	s := db.store(t)
	if _, err := s.Bump(ctx, 0); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Bump(0): %v, want ErrInvalid", err)
	}
	l := leasetest.Grants(t, testCtx(t), s, "k", 1, false)[0]
	for _, n := range []uint64{uint64(lease.MaxToken) - 1, 1 << 63, ^uint64(0)} {
		if _, err := s.Bump(ctx, n); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("Bump(%d) over token 1: %v, want ErrInvalid", n, err)
		}
	}
	// Refused bumps ended nothing and raised nothing.
	if _, err := s.Renew(ctx, l, time.Minute); err != nil {
		t.Fatalf("Renew after refused bumps: %v", err)
	}
	rep, err := s.Bump(ctx, uint64(lease.MaxToken)-2)
	if err != nil || rep.Floor != lease.MaxToken-1 {
		t.Fatalf("Bump to 2^53 - 1: %+v, %v", rep, err)
	}
	if l := leasetest.Grants(t, testCtx(t), s, "other", 1, true)[0]; l.Token != lease.MaxToken {
		t.Fatalf("first token above the floor 2^53 - 1: %d, want 2^53", l.Token)
	}
	if _, err := s.Acquire(ctx, "other", "o", time.Minute); err == nil {
		t.Fatal("a token past 2^53 was issued")
	}
}
