package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.M(m)) }

// testDB is a fresh database with a pool on it, closed in cleanup.
type testDB struct {
	url  string
	pool *pgxpool.Pool
}

func newTestDB(t testing.TB, maxConns int) testDB {
	t.Helper()
	return openTestDB(t, pgtest.Start(t), maxConns)
}

// openTestDB is a pool on the database at url, closed in cleanup.
func openTestDB(t testing.TB, url string, maxConns int) testDB {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return testDB{url: url, pool: pool}
}

// store returns a Store on db's pool, closed in cleanup.
func (db testDB) store(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := New(db.pool, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 5 ms until it holds or limit passes.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
