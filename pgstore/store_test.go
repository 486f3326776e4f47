package pgstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest"
)

func TestConformance(t *testing.T) {
	db := newTestDB(t, 40)
	leasetest.TestBackend(t,
		func(t *testing.T) lease.Backend { return db.store(t) },
		// clock_timestamp() has microseconds: the suite's default expiry works.
		leasetest.ExpiryTTL(50*time.Millisecond),
		// Watch: expiries are checked on the server's clock within a few
		// milliseconds (watch.go); generously:
		leasetest.WatchExpiryBound(250*time.Millisecond),
		// A restart of the application: a new pool and Store on the same
		// database. Tokens and held leases live in the table.
		leasetest.Reopen(func(t *testing.T, old lease.Backend) lease.Backend {
			if err := old.(*Store).Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s, err := Open(testCtx(t), db.url)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}),
	)
}

// TestClosesAsIOCloser: code that is handed a lease.Backend closes it
// through io.Closer (lease serve, the CLI), as it does every other store. A
// Store whose Close returns nothing is not an io.Closer, and is silently
// left open: its listener connection and, from Open, its pool.
func TestClosesAsIOCloser(t *testing.T) {
	db := newTestDB(t, 4)
	var b lease.Backend = db.store(t)
	c, ok := b.(io.Closer)
	if !ok {
		t.Fatalf("%T is not an io.Closer: a caller closing the backend it was given skips it", b)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := b.Get(testCtx(t), "k"); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Get after Close through io.Closer: err = %v, want ErrUnavailable", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenBadConnStringIsInvalid(t *testing.T) {
	// A connection string that cannot be parsed is the caller's mistake,
	// not an unreachable server: retrying cannot help.
	for _, cs := range []string{
		"postgres://app@db:notaport/app",
		"postgres://app@db/app?pool_max_conns=lots",
		"host=db port=x",
	} {
		s, err := Open(testCtx(t), cs)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", cs)
			continue
		}
		if !errors.Is(err, lease.ErrInvalid) || errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", cs, err)
		}
	}
}

func TestConformanceOddNames(t *testing.T) {
	db := newTestDB(t, 40)
	schema, prefix := `we"ird 'schema'; --`, `p"'; DROP TABLE x; --ünï_`
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend {
		return db.store(t, WithSchema(schema), WithTablePrefix(prefix))
	})
	var got []string
	rows, err := db.pool.Query(testCtx(t), `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	got, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{prefix + "leases", prefix + "meta"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("tables in schema %q = %q, want %q", schema, got, want)
	}
}

func TestHeldAcquireIsReadOnly(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	held, err := s.Acquire(ctx, "busy", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// xidAfter runs the acquire statement (its lone form, or its batch
	// form with one key) in an explicit transaction and reports whether it
	// was given a transaction ID: without one PostgreSQL writes no commit
	// record and flushes no WAL. (TestBatchHeldKeysAreReadOnly checks
	// batches of several keys.)
	xidAfter := func(batch bool, key string) (acquired bool, xid *int64) {
		t.Helper()
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		id := lease.NewID()
		var token int64
		var gotKey, owner string
		var ttl int64
		var exp time.Time
		var row pgx.Row
		if batch {
			row = tx.QueryRow(ctx, s.q.acquire.many, []string{key}, [][]byte{id[:]}, []string{"other"}, []int64{time.Minute.Nanoseconds()}, s.n.watchChannel, s.ident.Load().id)
		} else {
			row = tx.QueryRow(ctx, s.q.acquire.one, key, id[:], "other", time.Minute.Nanoseconds(), s.n.watchChannel, s.ident.Load().id)
		}
		var told *string
		if err := row.Scan(&gotKey, &acquired, &token, &owner, &ttl, &exp, &told); err != nil {
			t.Fatalf("acquire statement on %q: %v", key, err)
		}
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text::bigint`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return acquired, xid
	}
	for _, batch := range []bool{false, true} {
		if acquired, xid := xidAfter(batch, "busy"); acquired || xid != nil {
			t.Errorf("acquire of a held key (batch form %v): acquired %v, transaction ID %v; want a read-only miss (no ID)", batch, acquired, deref(xid))
		}
		// The check can tell: a successful acquire does write.
		if acquired, xid := xidAfter(batch, "free"); !acquired || xid == nil {
			t.Errorf("acquire of a free key (batch form %v): acquired %v, transaction ID %v; want a write", batch, acquired, deref(xid))
		}
	}

	// Nor does a miss take the row lock: with the row locked by another
	// transaction, it still answers at once instead of waiting.
	locker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, `SELECT 1 FROM public.lease_leases WHERE key = 'busy' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = s.Acquire(quick, "busy", "other", time.Minute)
	var he *lease.HeldError
	if !errors.As(err, &he) || he.Token != held.Token || he.Owner != "holder" {
		t.Fatalf("acquire of a held, row-locked key: err = %v, want a HeldError naming holder token %d", err, held.Token)
	}
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

func TestStatementTimeoutIsAnError(t *testing.T) {
	// An acquire that cannot finish returns an error, not an answer, and
	// changes nothing.
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	l, err := s.Acquire(ctx, "k", "first", lease.MinTTL)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "lease did not expire", func() bool {
		_, err := s.Get(ctx, "k")
		return errors.Is(err, lease.ErrNotFound)
	})
	// The row is expired, so the next acquire upserts it — and waits for
	// this transaction's row lock.
	locker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, `SELECT 1 FROM public.lease_leases WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	short := db.withSetting(t, "statement_timeout", "100ms")
	_, err = short.Acquire(ctx, "k", "second", time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("acquire cut off by statement_timeout: err = %v, want ErrUnavailable", err)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the timed-out acquire Get: %v, want ErrNotFound", err)
	}
	next, err := s.Acquire(ctx, "k", "third", time.Minute)
	if err != nil || next.Token != l.Token+1 {
		t.Fatalf("acquire after the timeout: %+v, %v; want token %d", next, err, l.Token+1)
	}
}

// withSetting returns a Store on its own pool whose sessions set name.
func (db testDB) withSetting(t *testing.T, name, value string) *Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams[name] = value
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestDroppedConnections(t *testing.T) {
	// Connections are killed under a stream of operations. Every answer that
	// comes back must be true; failures must be errors matching
	// ErrUnavailable, never ErrHeld or ErrNotHeld for a lease we hold.
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	if _, err := s.Get(ctx, "warm-up"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)

	stop := make(chan struct{})
	var killed int
	var killerWG sync.WaitGroup
	stopKiller := sync.OnceFunc(func() { close(stop); killerWG.Wait() })
	defer stopKiller()
	killerWG.Add(1)
	go func() {
		defer killerWG.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			var n int
			err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
			if err != nil {
				t.Errorf("terminating backends: %v", err)
				return
			}
			killed += n
		}
	}()

	const ttl = 200 * time.Millisecond
	var (
		last      lease.Token
		successes int
		failures  int
	)
	// ghostUntil: an acquire that failed may still have committed, leaving
	// a lease nobody knows the secret of until its TTL runs out.
	var ghostUntil time.Time
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		l, err := s.Acquire(ctx, "k", "worker", ttl)
		switch {
		case err == nil:
			if l.Token <= last {
				t.Fatalf("token %d after %d", l.Token, last)
			}
			last = l.Token
			successes++
		case errors.Is(err, lease.ErrHeld):
			var he *lease.HeldError
			if errors.As(err, &he) && (he.Owner != "worker" || he.Token < last) {
				t.Fatalf("held by %q token %d, but only our last lease (token %d) or failed acquires could hold it", he.Owner, he.Token, last)
			}
			if start.After(ghostUntil.Add(50 * time.Millisecond)) {
				t.Fatalf("key held %v after the last failed acquire's TTL ended: %v", start.Sub(ghostUntil), err)
			}
			// Until the ghost expires or is released, as lease.Client
			// waits: the store's own wait, which ends early (an error)
			// when the killer cuts its listener; the loop then asks again.
			_ = s.WaitChange(ctx, "k")
			continue
		case errors.Is(err, lease.ErrUnavailable):
			failures++
			ghostUntil = time.Now().Add(ttl)
			continue
		default:
			t.Fatalf("Acquire: unexpected error %v", err)
		}
		// We hold l. Renew it and release it; errors are allowed, wrong
		// answers are not.
		if r, err := s.Renew(ctx, l, ttl); err == nil {
			if r.Token != l.Token {
				t.Fatalf("renew changed token %d to %d", l.Token, r.Token)
			}
		} else if !errors.Is(err, lease.ErrUnavailable) {
			if time.Since(start) < ttl/2 {
				t.Fatalf("Renew of a lease we hold, %v after acquiring: %v", time.Since(start), err)
			}
		} else {
			failures++
		}
		err = s.Release(ctx, l)
		switch {
		case err == nil:
			if g, err := s.Get(ctx, "k"); err == nil && g.Token == l.Token {
				t.Fatalf("released lease token %d still reported held", l.Token)
			}
		case errors.Is(err, lease.ErrUnavailable):
			failures++
			ghostUntil = time.Now().Add(ttl) // the release may not have happened
		case errors.Is(err, lease.ErrNotHeld):
			if time.Since(start) < ttl/2 {
				t.Fatalf("Release of a lease we hold, %v after acquiring: %v", time.Since(start), err)
			}
		default:
			t.Fatalf("Release: unexpected error %v", err)
		}
	}
	stopKiller()
	t.Logf("%d leases, %d failed operations, %d connections killed", successes, failures, killed)
	if killed == 0 || failures == 0 {
		t.Fatalf("the test did not exercise broken connections: %d killed, %d failures", killed, failures)
	}
	if successes == 0 {
		t.Fatal("no operation got through between the kills")
	}
}
