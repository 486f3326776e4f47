package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/benchutil"
)

// The throwaway cluster runs with fsync = on and synchronous_commit = on
// (pgtest), commit_delay = 0: PostgreSQL's defaults. Every pgstore acquire
// commits durably; its release commits asynchronously (doc.go).

const benchTTL = time.Minute

// benchEnv is one database with the tables of every contender.
type benchEnv struct {
	pool  *pgxpool.Pool
	store *Store
}

func newBenchEnv(b *testing.B) benchEnv {
	b.Helper()
	db := newTestDB(b, 40)
	ctx := context.Background()
	if _, err := db.pool.Exec(ctx, `CREATE TABLE naive_lease (
		key text COLLATE "C" PRIMARY KEY, token bigint NOT NULL, id bytea NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `CREATE TABLE durable_floor (key text COLLATE "C" PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO durable_floor SELECT 'bench/durable-floor/' || w, 0 FROM generate_series(0, 31) w`); err != nil {
		b.Fatal(err)
	}
	s := db.store(b)
	if err := s.ensureSchema(ctx); err != nil {
		b.Fatal(err)
	}
	return benchEnv{pool: db.pool, store: s}
}

type benchImpl struct {
	name string
	// op is one pair on key; worker is the caller's number.
	op func(ctx context.Context, env benchEnv, worker int, key string) error
}

var (
	select1Pair = benchImpl{"select1-pair", func(ctx context.Context, env benchEnv, _ int, _ string) error {
		var one int
		if err := env.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			return err
		}
		return env.pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
	}}
	// Session advisory locks belong to a connection: lock and unlock on the
	// same one. No token, nothing durable.
	advisoryPair = benchImpl{"advisory-lock-pair", func(ctx context.Context, env benchEnv, _ int, key string) error {
		c, err := env.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		if _, err := c.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
			return err
		}
		var ok bool
		if err := c.QueryRow(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil || !ok {
			return fmt.Errorf("unlock: %v, %v", ok, err)
		}
		return nil
	}}
	// The lease everybody writes first: an upsert that locks and writes even
	// when the key is held, and a DELETE (losing the token high-water mark).
	naiveLease = benchImpl{"naive-lease", func(ctx context.Context, env benchEnv, _ int, key string) error {
		id := lease.NewID()
		for {
			tag, err := env.pool.Exec(ctx, `INSERT INTO naive_lease AS l (key, token, id, expires_at)
				VALUES ($1, 1, $2, clock_timestamp() + interval '1 minute')
				ON CONFLICT (key) DO UPDATE SET token = l.token + 1, id = EXCLUDED.id, expires_at = EXCLUDED.expires_at
				WHERE l.expires_at <= clock_timestamp()`, key, id[:])
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				break
			}
		}
		_, err := env.pool.Exec(ctx, `DELETE FROM naive_lease WHERE key = $1 AND id = $2`, key, id[:])
		return err
	}}
	// pgstore's Acquire and Release; a held key is tried again at once.
	pgstorePair = benchImpl{"pgstore", func(ctx context.Context, env benchEnv, _ int, key string) error {
		for {
			l, err := env.store.Acquire(ctx, key, "bench", benchTTL)
			if errors.Is(err, lease.ErrHeld) {
				continue
			}
			if err != nil {
				return err
			}
			return env.store.Release(ctx, l)
		}
	}}
	// The least a durable token can cost on this server, as a reference:
	// a single-row UPDATE committed durably (the "acquire") and one
	// committed asynchronously (the "release"), no reads, no conditions.
	// Both are HOT updates of an existing row, one WAL record each.
	durableFloor = benchImpl{"durable-floor", func(ctx context.Context, env benchEnv, _ int, key string) error {
		var n int64
		if err := env.pool.QueryRow(ctx, `UPDATE durable_floor SET n = n + 1 WHERE key = $1 RETURNING n`, key).Scan(&n); err != nil {
			return err
		}
		_, err := env.pool.Exec(ctx, `UPDATE durable_floor SET n = n + 1 WHERE key = $1 RETURNING set_config('synchronous_commit', 'off', true)`, key)
		return err
	}}
	// A held key is waited for with WaitChange (LISTEN/NOTIFY).
	pgstoreNotify = benchImpl{"pgstore-notify", func(ctx context.Context, env benchEnv, _ int, key string) error {
		for {
			l, err := env.store.Acquire(ctx, key, "bench", benchTTL)
			if errors.Is(err, lease.ErrHeld) {
				if err := env.store.WaitChange(ctx, key); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			return env.store.Release(ctx, l)
		}
	}}
)

// run benchmarks impl with clients, worker w on keyOf(w), and reports what
// the database wrote per op: transactions that were given a transaction ID
// (each one a commit record; durable ones a WAL flush) and WAL bytes.
func (env benchEnv) run(b *testing.B, clients int, impl benchImpl, keyOf func(worker int) string) {
	ctx := context.Background()
	keys := make([]string, clients)
	for w := range keys {
		keys[w] = keyOf(w)
	}
	xid0, lsn0 := env.walPosition(b)
	benchutil.Run(b, clients, func(w, _ int) error { return impl.op(ctx, env, w, keys[w]) })
	xid1, lsn1 := env.walPosition(b)
	// pg_current_xact_id() takes an ID itself: one per reading.
	b.ReportMetric(float64(xid1-xid0-1)/float64(b.N), "writing-xacts/op")
	b.ReportMetric(float64(lsn1-lsn0)/float64(b.N), "wal-B/op")
}

func (env benchEnv) walPosition(b *testing.B) (xid, lsn int64) {
	err := env.pool.QueryRow(context.Background(),
		`SELECT pg_current_xact_id()::text::bigint, pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&xid, &lsn)
	if err != nil {
		b.Fatal(err)
	}
	return xid, lsn
}

// BenchmarkCompareSQL compares an acquire+release pair on distinct keys (one
// per client) with two SELECT 1 round trips (the physical limit), an
// advisory lock pair (exclusion without a token or durability), the naive
// upsert+DELETE lease, and the durable floor: the cheapest pair of writes
// that makes a token durable (one WAL flush per pair, as pgstore's).
func BenchmarkCompareSQL(b *testing.B) {
	env := newBenchEnv(b)
	for _, c := range []int{1, 32} {
		for _, impl := range []benchImpl{select1Pair, advisoryPair, naiveLease, pgstorePair, durableFloor} {
			b.Run(fmt.Sprintf("c=%d/%s", c, impl.name), func(b *testing.B) {
				env.run(b, c, impl, func(w int) string { return fmt.Sprintf("bench/%s/%d", impl.name, w) })
			})
		}
	}
}

// BenchmarkCompareSQLOneKey has 32 clients racing for one key; one op is one
// client's acquire+release. The advisory lock queues waiters in the lock
// manager; the naive lease and pgstore try again at once when the key is
// held (the naive lease writes on every failed try, pgstore only reads);
// pgstore-notify waits for the release's NOTIFY.
func BenchmarkCompareSQLOneKey(b *testing.B) {
	env := newBenchEnv(b)
	for _, impl := range []benchImpl{advisoryPair, naiveLease, pgstorePair, pgstoreNotify} {
		b.Run("c=32/"+impl.name, func(b *testing.B) {
			env.run(b, 32, impl, func(int) string { return "bench/one-key/" + impl.name })
		})
	}
}
