package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// TestRace runs many writers with random tokens at once on one resource —
// on MariaDB in REPEATABLE READ, READ COMMITTED and SERIALIZABLE, on SQLite
// in WAL and rollback-journal mode — reading before the Check or not, and
// checks the history their transactions committed: no write replaced a
// token its mode does not admit below it (sqlguardtest.Race).
func TestRace(t *testing.T) {
	const trials, writers = 100, 6
	seed := uint64(100)
	for _, c := range []struct {
		name  string
		e     func(t *testing.T) engine
		level sql.IsolationLevel
	}{
		{"mariadb/repeatable-read", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelDefault},
		{"mariadb/read-committed", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelReadCommitted},
		{"mariadb/serializable", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelSerializable},
		{"sqlite/wal", func(t *testing.T) engine { return engine{"sqlite", sqlfence.SQLite, openSQLite(t, "WAL")} }, sql.LevelDefault},
		{"sqlite/delete", func(t *testing.T) engine { return engine{"sqlite", sqlfence.SQLite, openSQLite(t, "DELETE")} }, sql.LevelDefault},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := c.e(t)
			ctx := testCtx(t)
			ddl := []string{
				`CREATE TABLE race_data (resource VARBINARY(512) PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB`,
				`CREATE TABLE race_hist (resource VARBINARY(512) NOT NULL, replaced BIGINT NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`,
			}
			if e.d == sqlfence.SQLite {
				ddl = []string{
					`CREATE TABLE race_data (resource TEXT PRIMARY KEY, token INTEGER NOT NULL)`,
					`CREATE TABLE race_hist (resource TEXT NOT NULL, replaced INTEGER NOT NULL, token INTEGER NOT NULL)`,
				}
			}
			for _, stmt := range ddl {
				if _, err := e.db.ExecContext(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
				t.Run(mode.String(), func(t *testing.T) {
					seed++
					g := newGuard(t, e, sqlfence.WithMode(mode), sqlfence.WithTable(fmt.Sprintf("race_fence_%d", mode)))
					re := sqlguardtest.RaceEngine{
						Begin: func(ctx context.Context, readFirst bool) (sqlguardtest.RaceTx, error) {
							tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: c.level})
							if err != nil {
								return nil, err
							}
							if readFirst {
								var n int
								if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM race_data`).Scan(&n); err != nil {
									_ = tx.Rollback()
									return nil, err
								}
							}
							return raceTx{e.d, g, tx}, nil
						},
						History: func(ctx context.Context, res string) ([][2]int64, error) {
							rows, err := e.db.QueryContext(ctx, `SELECT replaced, token FROM race_hist WHERE resource = ?`, res)
							if err != nil {
								return nil, err
							}
							defer rows.Close()
							var hist [][2]int64
							for rows.Next() {
								var h [2]int64
								if err := rows.Scan(&h[0], &h[1]); err != nil {
									return nil, err
								}
								hist = append(hist, h)
							}
							return hist, rows.Err()
						},
						Highest: func(ctx context.Context, res string) (lease.Token, error) { return g.Highest(ctx, e.db, res) },
						Retry: func(err error) bool {
							var me *mysql.MySQLError
							var se *sqlite.Error
							// InnoDB's deadlock victim; SQLite's busy (a
							// deferred transaction that read first cannot
							// wait for the write lock).
							return errors.As(err, &me) && me.Number == 1213 ||
								errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
						},
					}
					committed, stale, retried := sqlguardtest.Race(t, re, mode, trials, writers, seed)
					t.Logf("%d trials of %d writers: %d writes committed, %d refused as stale, %d retried; none committed late", trials, writers, committed, stale, retried)
				})
			}
		})
	}
}

type raceTx struct {
	d  sqlfence.Dialect
	g  *sqlfence.Guard
	tx *sql.Tx
}

func (x raceTx) Check(ctx context.Context, res string, token lease.Token) error {
	return x.g.Check(ctx, x.tx, res, token)
}

// Record reads the data row as the latest committed (FOR UPDATE on
// MariaDB, whose plain SELECT reads the transaction's snapshot; SQLite's
// writer sees the latest database).
func (x raceTx) Record(ctx context.Context, res string, token lease.Token) error {
	read := `SELECT token FROM race_data WHERE resource = ?`
	upsert := `INSERT INTO race_data VALUES (?, ?) ON CONFLICT (resource) DO UPDATE SET token = excluded.token`
	if x.d == sqlfence.MySQL {
		read += ` FOR UPDATE`
		upsert = `INSERT INTO race_data VALUES (?, ?) ON DUPLICATE KEY UPDATE token = VALUES(token)`
	}
	var replaced int64
	if err := x.tx.QueryRowContext(ctx, read, res).Scan(&replaced); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, err := x.tx.ExecContext(ctx, `INSERT INTO race_hist VALUES (?, ?, ?)`, res, replaced, int64(token)); err != nil {
		return err
	}
	_, err := x.tx.ExecContext(ctx, upsert, res, int64(token))
	return err
}

func (x raceTx) Commit(context.Context) error   { return x.tx.Commit() }
func (x raceTx) Rollback(context.Context) error { return x.tx.Rollback() }
