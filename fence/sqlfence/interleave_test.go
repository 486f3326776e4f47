package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

// dataTable is each engine's table the interleaved writers write to.
var dataTable = map[sqlfence.Dialect]string{
	sqlfence.MySQL:  `CREATE TABLE data (resource VARBINARY(512) PRIMARY KEY, value VARCHAR(64) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`,
	sqlfence.SQLite: `CREATE TABLE data (resource TEXT PRIMARY KEY, value TEXT NOT NULL, token INTEGER NOT NULL)`,
}

// upsertData writes one writer's row of the data table.
var upsertData = map[sqlfence.Dialect]string{
	sqlfence.MySQL:  `INSERT INTO data (resource, value, token) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value), token = VALUES(token)`,
	sqlfence.SQLite: `INSERT INTO data (resource, value, token) VALUES (?, ?, ?) ON CONFLICT (resource) DO UPDATE SET value = excluded.value, token = excluded.token`,
}

// TestInterleavings plays every interleaving of two writers' transactions:
// on MariaDB in its default isolation, REPEATABLE READ, and in READ
// COMMITTED, SERIALIZABLE and READ UNCOMMITTED (Check's upsert locks and
// reads the latest row in each); on SQLite in its default rollback journal and in WAL mode.
func TestInterleavings(t *testing.T) {
	for _, c := range []struct {
		name      string
		e         func(t *testing.T) engine
		level     sql.IsolationLevel
		readFirst bool
	}{
		{"mariadb/repeatable-read", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelDefault, false},
		{"mariadb/read-committed", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelReadCommitted, false},
		{"mariadb/serializable", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelSerializable, false},
		{"mariadb/read-uncommitted", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelReadUncommitted, false},
		// A caller's transaction that read before its Check has its
		// snapshot; the upsert still reads and locks the latest row.
		{"mariadb/repeatable-read/read-before-check", func(t *testing.T) engine { return engine{"mariadb", sqlfence.MySQL, openMySQL(t)} }, sql.LevelDefault, true},
		{"sqlite/delete", func(t *testing.T) engine { return engine{"sqlite", sqlfence.SQLite, openSQLite(t, "DELETE")} }, sql.LevelDefault, false},
		{"sqlite/wal", func(t *testing.T) engine { return engine{"sqlite", sqlfence.SQLite, openSQLite(t, "WAL")} }, sql.LevelDefault, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := c.e(t)
			if _, err := e.db.ExecContext(testCtx(t), dataTable[e.d]); err != nil {
				t.Fatal(err)
			}
			if e.d == sqlfence.MySQL {
				var level string
				if err := e.db.QueryRowContext(testCtx(t), "SELECT @@tx_isolation").Scan(&level); err != nil || level != "REPEATABLE-READ" {
					t.Fatalf("the server's default isolation is %q (%v), want REPEATABLE-READ", level, err)
				}
			}
			sqlguardtest.Interleavings(t, func(t *testing.T, mode fence.Mode) sqlguardtest.Engine {
				g := newGuard(t, e, sqlfence.WithMode(mode), sqlfence.WithTable(fmt.Sprintf("fence_%d", mode)))
				return txEngine{t: t, e: e, g: g, opts: &sql.TxOptions{Isolation: c.level}, readFirst: c.readFirst}
			})
		})
	}
}

type txEngine struct {
	t         *testing.T
	e         engine
	g         *sqlfence.Guard
	opts      *sql.TxOptions
	readFirst bool // Begin reads the data table, which takes InnoDB's snapshot
}

func (x txEngine) Begin(ctx context.Context) (sqlguardtest.Tx, func(), error) {
	conn, err := x.e.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	tx := &sqlTx{x: x, waiting: make(chan struct{})}
	if x.e.d == sqlfence.MySQL {
		if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&tx.connID); err != nil {
			_ = conn.Close()
			return nil, nil, err
		}
	}
	if tx.tx, err = conn.BeginTx(ctx, x.opts); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	if x.readFirst {
		var n int
		if err := tx.tx.QueryRowContext(ctx, `SELECT count(*) FROM data`).Scan(&n); err != nil {
			_ = tx.tx.Rollback()
			_ = conn.Close()
			return nil, nil, err
		}
	}
	return tx, func() { _ = conn.Close() }, nil
}

func (x txEngine) Value(ctx context.Context, res string) (string, error) {
	var value string
	err := x.e.db.QueryRowContext(ctx, `SELECT value FROM data WHERE resource = ?`, res).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return value, err
}

func (x txEngine) Highest(ctx context.Context, res string) (lease.Token, error) {
	return x.g.Highest(ctx, x.e.db, res)
}

// threadID finds the connection of a transaction in InnoDB's status.
var threadID = regexp.MustCompile(`(?:MariaDB|MySQL) thread id (\d+),`)

type sqlTx struct {
	x      txEngine
	tx     *sql.Tx
	connID int64 // MySQL's CONNECTION_ID() of the transaction's connection

	once    sync.Once
	waiting chan struct{} // SQLite: closed when a Check found the database locked
}

// Check on SQLite turns the busy timeout off for the Check, so that a Check
// finding the database locked by the other writer says so (SQLITE_BUSY)
// instead of waiting unseen; it then tries again every millisecond, as the
// busy handler would.
func (s *sqlTx) Check(ctx context.Context, res string, token lease.Token) error {
	if s.x.e.d == sqlfence.MySQL {
		return s.x.g.Check(ctx, s.tx, res, token)
	}
	if _, err := s.tx.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	defer func() { _, _ = s.tx.ExecContext(ctx, "PRAGMA busy_timeout = 10000") }()
	for {
		err := s.x.g.Check(ctx, s.tx, res, token)
		var se *sqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
			return err
		}
		s.once.Do(func() { close(s.waiting) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// Waiting: on MariaDB, SHOW ENGINE INNODB STATUS lists the connection's
// transaction under LOCK WAIT (information_schema.INNODB_TRX would say so
// too, but from a cache that polling keeps from being refreshed); on
// SQLite, Check saw SQLITE_BUSY.
func (s *sqlTx) Waiting(ctx context.Context, stop <-chan struct{}) <-chan struct{} {
	if s.x.e.d == sqlfence.MySQL {
		return sqlguardtest.PollWaiting(s.x.t, func() (bool, error) {
			var typ, name, status string
			if err := s.x.e.db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
				return false, err
			}
			for _, trx := range strings.Split(status, "---TRANSACTION")[1:] {
				m := threadID.FindStringSubmatch(trx)
				if m != nil && m[1] == strconv.FormatInt(s.connID, 10) && strings.Contains(trx, "\nLOCK WAIT ") {
					return true, nil
				}
			}
			return false, nil
		}, stop)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		select {
		case <-s.waiting:
		case <-stop:
		}
	}()
	return ch
}

func (s *sqlTx) Write(ctx context.Context, res, value string, token lease.Token) error {
	_, err := s.tx.ExecContext(ctx, upsertData[s.x.e.d], res, value, int64(token))
	return err
}

func (s *sqlTx) Commit(context.Context) error   { return s.tx.Commit() }
func (s *sqlTx) Rollback(context.Context) error { return s.tx.Rollback() }
