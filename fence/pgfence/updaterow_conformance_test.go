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
	"github.com/leasehq/lease/fence/guardtest"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// rowGuard is UpdateRow as a guardtest.ValueGuard: each resource is a row,
// inserted with a NULL token (never written) before its first update.
type rowGuard struct {
	pool  *pgxpool.Pool
	table string
	mode  fence.Mode
}

func (g rowGuard) Set(ctx context.Context, resource string, token lease.Token, value string) error {
	if err := lease.ValidateKey(resource); err != nil {
		return err
	}
	if _, err := g.pool.Exec(ctx, `INSERT INTO `+g.table+` (id, value) VALUES ($1, '') ON CONFLICT DO NOTHING`, resource); err != nil {
		return err
	}
	return sqlguardtest.RowError(pgfence.UpdateRow(ctx, g.pool, pgfence.Update{Table: pgx.Identifier{g.table}, IDColumn: "id", ID: resource,
		TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": value}, Mode: g.mode}), g.table, resource)
}

func (g rowGuard) Get(ctx context.Context, resource string) (string, lease.Token, error) {
	var value string
	var token *int64
	err := g.pool.QueryRow(ctx, `SELECT value, fencing_token FROM `+g.table+` WHERE id = $1`, resource).Scan(&value, &token)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && token == nil {
		return "", 0, fmt.Errorf("%q: %w", resource, lease.ErrNotFound)
	}
	if err != nil {
		return "", 0, err
	}
	return value, lease.Token(*token), nil
}

// TestUpdateRowConformance runs the guard suite on UpdateRow, outside any
// transaction of the caller's.
func TestUpdateRowConformance(t *testing.T) {
	pool := newPool(t)
	guardtest.TestValueGuard(t, func(t *testing.T, mode fence.Mode) guardtest.ValueGuard {
		table := "rows_" + strings.ReplaceAll(mode.String(), "-", "_")
		if _, err := pool.Exec(testCtx(t), `CREATE TABLE IF NOT EXISTS `+table+` (id text COLLATE "C" PRIMARY KEY, value text NOT NULL, fencing_token bigint)`); err != nil {
			t.Fatal(err)
		}
		return rowGuard{pool: pool, table: table, mode: mode}
	})
}

// retryTxGuard is txGuard in a stricter isolation level, retrying a
// transaction that fails with a serialization error (SQLSTATE 40001), as
// the package doc tells callers to.
type retryTxGuard struct {
	pool  *pgxpool.Pool
	g     *pgfence.Guard
	level pgx.TxIsoLevel
}

func (a retryTxGuard) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	for {
		err := pgx.BeginTxFunc(ctx, a.pool, pgx.TxOptions{IsoLevel: a.level}, func(tx pgx.Tx) error {
			// A read first, so that the snapshot is taken before Check.
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			if err := a.g.Check(ctx, tx, resource, token); err != nil {
				return err
			}
			return write()
		})
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40001" {
			continue
		}
		return err
	}
}

// TestConformanceStricterIsolation runs the guard suite on Check in
// REPEATABLE READ and SERIALIZABLE, where a Check that waited for another
// writer fails with a serialization error and the caller retries.
func TestConformanceStricterIsolation(t *testing.T) {
	pool := newPool(t)
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(strings.ReplaceAll(string(level), " ", "-"), func(t *testing.T) {
			guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard {
				table := "fence_" + strings.ReplaceAll(string(level)+"_"+mode.String(), "-", "_")
				table = strings.ReplaceAll(table, " ", "_")
				return retryTxGuard{pool: pool, g: newGuard(t, pool, pgfence.WithMode(mode), pgfence.WithTable(table)), level: level}
			})
		})
	}
}
