package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

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

// fencing says whether a guard of this file fences its writes (on) or, for
// a negative control, stores every write on its server whatever its token
// (off), read back through the guard as ever.
type fencing bool

const (
	fencingOn  fencing = false
	fencingOff fencing = true
)

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
func pgGuard(t *testing.T, off fencing) guardFunc {
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
		return pgRegister{pool: pool, key: key, mode: mode, off: off}
	}
}

type pgRegister struct {
	pool *pgxpool.Pool
	key  string
	mode fence.Mode
	off  fencing
}

func (r pgRegister) Write(ctx context.Context, token lease.Token, value string) error {
	if r.off {
		_, err := r.pool.Exec(ctx, `UPDATE registers SET value = $1, fencing_token = $2 WHERE id = $3`, value, int64(token), r.key)
		return err
	}
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
func mariadbGuard(t *testing.T, off fencing) guardFunc {
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
		return mariadbRegister{db: db, key: key, mode: mode, off: off}
	}
}

type mariadbRegister struct {
	db   *sql.DB
	key  string
	mode fence.Mode
	off  fencing
}

func (r mariadbRegister) Write(ctx context.Context, token lease.Token, value string) error {
	if r.off {
		_, err := r.db.ExecContext(ctx, `UPDATE registers SET value = ?, fencing_token = ? WHERE id = ?`, value, int64(token), r.key)
		return err
	}
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
func redisGuard(t *testing.T, off fencing) guardFunc {
	rdb := redistest.Start(t).Client(t)
	return func(t testing.TB, key string, mode fence.Mode) chaos.Register {
		g, err := redisfence.New(context.Background(), rdb, redisfence.WithMode(mode), redisfence.WithPrefix(redisGuardPrefix))
		if err != nil {
			t.Fatal(err)
		}
		return redisRegister{g: g, rdb: rdb, key: key, off: off}
	}
}

const redisGuardPrefix = "chaos-guard:"

type redisRegister struct {
	g   *redisfence.Guard
	rdb *redis.Client
	key string
	off fencing
}

func (r redisRegister) Write(ctx context.Context, token lease.Token, value string) error {
	if r.off {
		// The hash set.lua keeps, written as it writes it, without its compare.
		return r.rdb.HSet(ctx, redisGuardPrefix+r.key, "value", value, "token", strconv.FormatUint(uint64(token), 10)).Err()
	}
	return r.g.Set(ctx, r.key, token, value)
}

func (r redisRegister) Read(ctx context.Context) (string, lease.Token, error) {
	v, tok, err := r.g.Get(ctx, r.key)
	if errors.Is(err, lease.ErrNotFound) {
		return "", 0, nil // never written
	}
	return v, tok, err
}

// TestChaosNegativeControlRealGuardsOff: each real guard's control. The
// bolt-over-HTTP engine with the guard's server kept but its fencing
// switched off (a plain UPDATE, a plain HSET): a paused worker's late
// write is stored after a newer holder's, and the checker, reading the
// register back through the guard, must find the history illegal.
func TestChaosNegativeControlRealGuardsOff(t *testing.T) {
	for _, g := range []struct {
		name  string
		guard func(*testing.T, fencing) guardFunc
	}{{"pgfence", pgGuard}, {"sqlfence-mariadb", mariadbGuard}, {"redisfence", redisGuard}} {
		t.Run(g.name, func(t *testing.T) {
			ttl := 200 * time.Millisecond
			b := startBoltHTTP(t)
			e := withGuard(b.engine(ttl), g.name+"-off", g.guard(t, fencingOff))
			if os.Getenv(chaos.EnvArtifacts) == "" {
				t.Setenv(chaos.EnvArtifacts, t.TempDir())
			}
			res := chaos.Run(t, chaos.Config{Engine: e, Seed: 14, TTL: ttl, Workers: 3, Faults: 1, Kinds: []chaos.Fault{chaos.Pause}})
			requireLateAccepted(t, res.Stats.Pauses, res.Stats.Late)
			if res.Register.Result != porcupine.Illegal {
				t.Fatalf("with %s's fencing off, the checker found the register history %s (%d operations, %d late writes taken)",
					g.name, res.Register.Result, res.Register.Ops, res.Stats.Late.Accepted)
			}
			t.Logf("found: the register history of %d operations is %s", res.Register.Ops, res.Register.Result)
		})
	}
}
