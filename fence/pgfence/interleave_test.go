package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// TestInterleavings plays every interleaving of two writers' transactions
// in PostgreSQL's default isolation, READ COMMITTED.
func TestInterleavings(t *testing.T) {
	pool := newPool(t)
	if _, err := pool.Exec(testCtx(t), `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	sqlguardtest.Interleavings(t, func(t *testing.T, mode fence.Mode) sqlguardtest.Engine {
		return pgEngine{t: t, pool: pool, g: newGuard(t, pool, pgfence.WithMode(mode), pgfence.WithTable("fence_"+fmt.Sprint(int(mode))))}
	})
}

// TestInterleavingsSnapshot plays every interleaving of two writers'
// transactions in REPEATABLE READ and SERIALIZABLE, where a Check on a
// snapshot from before the other writer's commit (it waited for that
// writer, or its transaction read before its Check) fails with a
// serialization error (SQLSTATE 40001) rather than decide without that
// commit.
func TestInterleavingsSnapshot(t *testing.T) {
	pool := newPool(t)
	if _, err := pool.Exec(testCtx(t), `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	conflict := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "40001"
	}
	i := 0
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, atBegin := range []bool{false, true} {
			name := strings.ReplaceAll(string(level), " ", "-")
			if atBegin {
				name += "/read-before-check"
			}
			t.Run(name, func(t *testing.T) {
				sqlguardtest.InterleavingsSnapshot(t, func(t *testing.T, mode fence.Mode) sqlguardtest.Engine {
					i++
					table := fmt.Sprintf("fence_snapshot_%d", i)
					return pgEngine{t: t, pool: pool, g: newGuard(t, pool, pgfence.WithMode(mode), pgfence.WithTable(table)),
						level: level, readFirst: atBegin}
				}, sqlguardtest.Snapshot{Conflict: conflict, AtBegin: atBegin})
			})
		}
	}
}

type pgEngine struct {
	t     *testing.T
	pool  *pgxpool.Pool
	g     *pgfence.Guard
	level pgx.TxIsoLevel // "": the server's default, READ COMMITTED
	// readFirst makes Begin read the data table, as a transaction that
	// read before its Check: in a snapshot level, that takes the snapshot.
	readFirst bool
}

func (e pgEngine) Begin(ctx context.Context) (sqlguardtest.Tx, func(), error) {
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: e.level})
	if err != nil {
		c.Release()
		return nil, nil, err
	}
	if e.readFirst {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM data`).Scan(&n); err != nil {
			_ = tx.Rollback(ctx)
			c.Release()
			return nil, nil, err
		}
	}
	return pgTx{e, c, tx}, c.Release, nil
}

func (e pgEngine) Value(ctx context.Context, res string) (string, error) {
	var value string
	err := e.pool.QueryRow(ctx, `SELECT value FROM data WHERE resource = $1`, res).Scan(&value)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return value, err
}

func (e pgEngine) Highest(ctx context.Context, res string) (lease.Token, error) {
	return e.g.Highest(ctx, e.pool, res)
}

type pgTx struct {
	e    pgEngine
	conn *pgxpool.Conn
	tx   pgx.Tx
}

func (x pgTx) Check(ctx context.Context, res string, token lease.Token) error {
	return x.e.g.Check(ctx, x.tx, res, token)
}

// Waiting polls pg_stat_activity for the connection's backend waiting for
// a lock.
func (x pgTx) Waiting(ctx context.Context, stop <-chan struct{}) <-chan struct{} {
	pid := int32(x.conn.Conn().PgConn().PID())
	return sqlguardtest.PollWaiting(x.e.t, func() (waiting bool, err error) {
		err = x.e.pool.QueryRow(ctx, `SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return waiting, err
	}, stop)
}

func (x pgTx) Write(ctx context.Context, res, value string, token lease.Token) error {
	_, err := x.tx.Exec(ctx, `INSERT INTO data (resource, value, token) VALUES ($1, $2, $3)
		ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`, res, value, int64(token))
	return err
}

func (x pgTx) Commit(ctx context.Context) error   { return x.tx.Commit(ctx) }
func (x pgTx) Rollback(ctx context.Context) error { return x.tx.Rollback(ctx) }
