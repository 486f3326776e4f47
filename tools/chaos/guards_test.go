package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/fence/redisfence"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/mysqltest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/tools/chaos"
)

// The real guards as the chaos runs' protected resources. Each is on a
// server of its own (pgtest's shared cluster, mysqltest's shared MariaDB, a
// redis-server of the test's)
// that the faults do not touch, as the resource a lease protects is usually
// another system than the lease service: the run then checks that the
// guard, given the tokens the engine issued through every fault, never
// admits a late write.

type guardFunc = func(t testing.TB, key string, mode fence.Mode) chaos.Register

// withGuard returns e with its register behind guard.
func withGuard(e chaos.Engine, name string, guard guardFunc) chaos.Engine {
	e.Guard, e.GuardName = guard, name
	return e
}

func guardCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pgGuard: each register is a row of one table, written with
// pgfence.UpdateRow (UPDATE … WHERE fencing_token <= $t) and read back with
// its token.
func pgGuard(t *testing.T) guardFunc {
	ctx := guardCtx(t)
	pool, err := pgxpool.New(ctx, pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE registers (id text PRIMARY KEY, value text NOT NULL DEFAULT '', fencing_token bigint)`); err != nil {
		t.Fatal(err)
	}
	return func(t testing.TB, key string, mode fence.Mode) chaos.Register {
		if _, err := pool.Exec(guardCtx(t), `INSERT INTO registers (id) VALUES ($1)`, key); err != nil {
			t.Fatal(err)
		}
		return pgRegister{pool: pool, key: key, mode: mode}
	}
}

type pgRegister struct {
	pool *pgxpool.Pool
	key  string
	mode fence.Mode
}

func (r pgRegister) Write(ctx context.Context, token lease.Token, value string) error {
	return pgfence.UpdateRow(ctx, r.pool, pgfence.Update{Table: pgx.Identifier{"registers"}, IDColumn: "id", ID: r.key,
		TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": value}, Mode: r.mode})
}

func (r pgRegister) Read(ctx context.Context) (string, lease.Token, error) {
	var (
		v   string
		tok int64
	)
	err := r.pool.QueryRow(ctx, `SELECT value, coalesce(fencing_token, 0) FROM registers WHERE id = $1`, r.key).Scan(&v, &tok)
	return v, lease.Token(tok), err
}

// mariadbGuard: each register is a row of one InnoDB table on MariaDB,
// written with sqlfence.UpdateRow (UPDATE … WHERE fencing_token <= ?) and
// read back with its token.
func mariadbGuard(t *testing.T) guardFunc {
	ctx := guardCtx(t)
	db, err := sql.Open("mysql", mysqltest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(ctx, `CREATE TABLE registers (id VARCHAR(64) PRIMARY KEY, value VARCHAR(64) NOT NULL DEFAULT '', fencing_token BIGINT) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	return func(t testing.TB, key string, mode fence.Mode) chaos.Register {
		if _, err := db.ExecContext(guardCtx(t), `INSERT INTO registers (id) VALUES (?)`, key); err != nil {
			t.Fatal(err)
		}
		return mariadbRegister{db: db, key: key, mode: mode}
	}
}

type mariadbRegister struct {
	db   *sql.DB
	key  string
	mode fence.Mode
}

func (r mariadbRegister) Write(ctx context.Context, token lease.Token, value string) error {
	return sqlfence.UpdateRow(ctx, r.db, sqlfence.MySQL, sqlfence.Update{Table: []string{"registers"}, IDColumn: "id", ID: r.key,
		TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": value}, Mode: r.mode})
}

func (r mariadbRegister) Read(ctx context.Context) (string, lease.Token, error) {
	var (
		v   string
		tok int64
	)
	err := r.db.QueryRowContext(ctx, `SELECT value, coalesce(fencing_token, 0) FROM registers WHERE id = ?`, r.key).Scan(&v, &tok)
	return v, lease.Token(tok), err
}

// redisGuard: each register is a redisfence resource (its Lua
// compare-and-set) on a redis-server apart from the engine's.
func redisGuard(t *testing.T) guardFunc {
	rdb := redistest.Start(t).Client(t)
	return func(t testing.TB, key string, mode fence.Mode) chaos.Register {
		g, err := redisfence.New(context.Background(), rdb, redisfence.WithMode(mode), redisfence.WithPrefix("chaos-guard:"))
		if err != nil {
			t.Fatal(err)
		}
		return redisRegister{g: g, key: key}
	}
}

type redisRegister struct {
	g   *redisfence.Guard
	key string
}

func (r redisRegister) Write(ctx context.Context, token lease.Token, value string) error {
	return r.g.Set(ctx, r.key, token, value)
}

func (r redisRegister) Read(ctx context.Context) (string, lease.Token, error) {
	v, tok, err := r.g.Get(ctx, r.key)
	if errors.Is(err, lease.ErrNotFound) {
		return "", 0, nil // never written
	}
	return v, tok, err
}
