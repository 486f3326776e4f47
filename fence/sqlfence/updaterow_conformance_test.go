package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/guardtest"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// rowsTable is each engine's table of rows that carry their own token,
// keyed by any resource name the suite writes.
var rowsTable = map[sqlfence.Dialect]string{
	sqlfence.MySQL:  "CREATE TABLE IF NOT EXISTS %s (id VARBINARY(512) PRIMARY KEY, value TEXT NOT NULL, fencing_token BIGINT) ENGINE=InnoDB",
	sqlfence.SQLite: "CREATE TABLE IF NOT EXISTS %s (id TEXT PRIMARY KEY, value TEXT NOT NULL, fencing_token INTEGER)",
}

var insertRow = map[sqlfence.Dialect]string{
	sqlfence.MySQL:  "INSERT IGNORE INTO %s (id, value) VALUES (?, '')",
	sqlfence.SQLite: "INSERT INTO %s (id, value) VALUES (?, '') ON CONFLICT DO NOTHING",
}

// rowGuard is UpdateRow as a guardtest.ValueGuard: each resource is a row,
// inserted with a NULL token (never written) before its first update. With
// opts, each update runs in a transaction of its own at that isolation
// level, which reads the table before it updates, so that its snapshot
// can be older than the row.
type rowGuard struct {
	e     engine
	table string
	mode  fence.Mode
	opts  *sql.TxOptions
}

func (g rowGuard) Set(ctx context.Context, resource string, token lease.Token, value string) error {
	if err := lease.ValidateKey(resource); err != nil {
		return err
	}
	if _, err := g.e.db.ExecContext(ctx, fmt.Sprintf(insertRow[g.e.d], g.table), resource); err != nil {
		return err
	}
	return sqlguardtest.RowError(g.update(ctx, sqlfence.Update{Table: []string{g.table}, IDColumn: "id", ID: resource,
		TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": value}, Mode: g.mode}), g.table, resource)
}

func (g rowGuard) update(ctx context.Context, u sqlfence.Update) error {
	if g.opts == nil {
		return sqlfence.UpdateRow(ctx, g.e.db, g.e.d, u)
	}
	tx, err := g.e.db.BeginTx(ctx, g.opts)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+g.table).Scan(&n); err != nil {
		return err
	}
	if err := sqlfence.UpdateRow(ctx, tx, g.e.d, u); err != nil {
		return err
	}
	return tx.Commit()
}

func (g rowGuard) Get(ctx context.Context, resource string) (string, lease.Token, error) {
	var value string
	var token sql.NullInt64
	err := g.e.db.QueryRowContext(ctx, fmt.Sprintf("SELECT value, fencing_token FROM %s WHERE id = ?", g.table), resource).Scan(&value, &token)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !token.Valid {
		return "", 0, fmt.Errorf("%q: %w", resource, lease.ErrNotFound)
	}
	return value, lease.Token(token.Int64), err
}

// TestUpdateRowConformance runs the guard suite on UpdateRow, on each
// engine outside any transaction of the caller's, and on MariaDB also in
// the caller's REPEATABLE READ transaction, whose snapshot predates newer
// writers' tokens.
func TestUpdateRowConformance(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		for _, opts := range []*sql.TxOptions{nil, {Isolation: sql.LevelRepeatableRead}} {
			if opts != nil && e.d != sqlfence.MySQL {
				continue
			}
			name := "no-tx"
			if opts != nil {
				name = strings.ReplaceAll(opts.Isolation.String(), " ", "-")
			}
			t.Run(name, func(t *testing.T) {
				guardtest.TestValueGuard(t, func(t *testing.T, mode fence.Mode) guardtest.ValueGuard {
					table := "rows_" + strings.ReplaceAll(name+"_"+mode.String(), "-", "_")
					if _, err := e.db.ExecContext(testCtx(t), fmt.Sprintf(rowsTable[e.d], table)); err != nil {
						t.Fatal(err)
					}
					return rowGuard{e: e, table: table, mode: mode, opts: opts}
				})
			})
		}
	})
}
