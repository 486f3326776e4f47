// Package sqlfence guards data in MySQL, MariaDB or SQLite with fencing
// tokens through database/sql, inside the writer's own transaction, so that
// the check and the write commit or roll back together (I6). It is pgfence
// for the engines teams already run beside their applications; the two
// share their statements where the engines agree (internal/sqlguard).
//
// The package imports no driver: register one as usual, and name its
// engine with a Dialect. MySQL is tested with github.com/go-sql-driver/mysql
// on MariaDB, SQLite with modernc.org/sqlite (pure Go, no cgo).
//
// Guard.Check records the highest token accepted per resource in a table of
// its own (lease_fence by default) with one conditional upsert that also
// locks the resource until the transaction ends: a concurrent writer's
// Check waits, then sees the committed token. Use it when a write touches
// several rows or tables:
//
//	tx, err := db.BeginTx(ctx, nil)
//	…
//	defer tx.Rollback()
//	if err := guard.Check(ctx, tx, "job/42", hold.Token()); err != nil {
//		return err // a *fence.StaleTokenError if the token is old
//	}
//	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET result = ? WHERE id = 42`, result); err != nil {
//		return err
//	}
//	return tx.Commit()
//
// UpdateRow (or the statement from Update.SQL, to send it yourself) is the
// single-statement form for a row that carries its own token column:
//
//	UPDATE t SET …, fencing_token = ? WHERE id = ? AND fencing_token <= ?
//
// # MySQL and MariaDB
//
// The guard's table and the data it guards must be InnoDB: the lock and the
// atomic commit are InnoDB's. Check is INSERT … ON DUPLICATE KEY UPDATE,
// which takes the resource row's exclusive lock whether or not it changes
// it, and reads the latest committed token (not the transaction's
// snapshot), so it is right under REPEATABLE READ (the default) and READ
// COMMITTED alike. As with any InnoDB write, a transaction can be chosen as
// a deadlock victim (error 1213, more likely under REPEATABLE READ, whose
// gap locks span neighbouring keys); the caller retries it.
//
// Both statements learn what they need from the insert ID the server
// reports with every answer (Result.LastInsertId), set by LAST_INSERT_ID(x)
// inside the statement: Check, the token the row held before (0: no row);
// UpdateRow, the token when the row matched. Rows affected would not do:
// MySQL counts a row whose values did not change as unaffected, unless the
// connection asked for found rows (clientFoundRows=true), and the guard
// cannot know which the caller's connections did. So both leave the
// session's LAST_INSERT_ID() set to a token: take an insert's ID from its
// own Result, not from a later SELECT LAST_INSERT_ID().
//
// UpdateRow's read after a rejected update (stale, or no such row?) is a
// locking read (SELECT … FOR UPDATE): like the UPDATE, it sees the latest
// committed row, where a plain SELECT in a REPEATABLE READ transaction
// would see the transaction's snapshot, without a newer writer's token or
// row.
//
// # SQLite
//
// SQLite locks the whole database for a write, from a transaction's first
// write to its end: Check, an INSERT … ON CONFLICT … RETURNING as in
// pgfence, takes that lock. Make Check the first statement of the
// transaction, or begin transactions IMMEDIATE (modernc.org/sqlite:
// _txlock=immediate): a deferred transaction that has read before its first
// write cannot wait for the lock (SQLITE_BUSY, or SQLITE_BUSY_SNAPSHOT in WAL
// mode) and must be retried. Set a busy timeout (PRAGMA busy_timeout, or
// _pragma=busy_timeout(5000)) so that writers wait for each other instead of
// failing at once.
package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlguard"
)

// Dialect is the engine a guard speaks to.
type Dialect int

const (
	// MySQL is MySQL or MariaDB with InnoDB tables.
	MySQL Dialect = iota + 1
	// SQLite is SQLite 3.35 or later (for RETURNING).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// spelling returns the shared code's view of d, or an error for an unknown d.
func (d Dialect) spelling() (*sqlguard.Dialect, error) {
	switch d {
	case MySQL:
		return &mysqlDialect, nil
	case SQLite:
		return &sqliteDialect, nil
	}
	return nil, fmt.Errorf("sqlfence: %w: unknown dialect %v", lease.ErrInvalid, d)
}

// Querier is what the package runs statements through: *sql.DB, *sql.Conn
// and *sql.Tx all qualify.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DefaultTable is the default name of the guard's table.
const DefaultTable = "lease_fence"

// Option configures a Guard.
type Option func(*config) error

type config struct {
	mode  fence.Mode
	table string
}

// WithMode sets the rule tokens are admitted by: fence.AtLeast (the default)
// or fence.Strict.
func WithMode(m fence.Mode) Option {
	return func(c *config) error {
		if err := fence.ValidateMode(m); err != nil {
			return fmt.Errorf("sqlfence: %w", err)
		}
		c.mode = m
		return nil
	}
}

// WithTable names the guard's table, in the connection's database (MySQL)
// or the main database (SQLite).
func WithTable(name string) Option {
	return func(c *config) error {
		c.table = name // checked by New, which knows the dialect
		return nil
	}
}

// Guard admits writes by fencing token inside database/sql transactions. It
// holds no connection and is safe for concurrent use.
type Guard struct {
	dialect Dialect
	d       *sqlguard.Dialect
	mode    fence.Mode
	marks   sqlguard.Marks
}

// New returns a Guard for the engine d speaks, creating its table in db if
// it does not exist (CREATE TABLE IF NOT EXISTS, so concurrent News are
// safe). On MySQL, CREATE TABLE commits any transaction it runs in: pass a
// *sql.DB or *sql.Conn; given a *sql.Tx, New refuses (lease.ErrInvalid)
// unless the table is already there.
//
// A table already under that name must be one the guard can trust, or New
// fails with an error matching lease.ErrInvalid: on MySQL an InnoDB table
// whose one unique key is its binary resource column, with a BIGINT token
// (without that key every token would be admitted as a resource's first);
// on SQLite one whose token has INTEGER affinity (as TEXT, "10" < "9").
// On MySQL the table must also have no AUTO_INCREMENT column.
func New(ctx context.Context, db Querier, d Dialect, opts ...Option) (*Guard, error) {
	sp, err := d.spelling()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, sp.Invalidf("db is nil")
	}
	cfg := config{mode: fence.AtLeast, table: DefaultTable}
	for _, opt := range opts {
		if opt == nil {
			return nil, sp.Invalidf("nil option")
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	if err := sp.CheckIdent("table", cfg.table); err != nil {
		return nil, err
	}
	if d == SQLite && strings.HasPrefix(strings.ToLower(cfg.table), "sqlite_") {
		return nil, sp.Invalidf("table %q: SQLite keeps names that begin with sqlite_ for itself", cfg.table)
	}
	marks := sp.Marks(cfg.mode, cfg.table)
	if d == SQLite {
		// Qualified: unqualified, SQLite looks in temp first, where a
		// TEMP table of that name on the writer's connection would hide
		// the marks.
		marks = sp.Marks(cfg.mode, "main", cfg.table)
	}
	g := &Guard{dialect: d, d: sp, mode: cfg.mode, marks: marks}
	if d == MySQL {
		g.marks.Upsert = mysqlCheck(g.marks.Table, cfg.mode)
	}
	if err := g.create(ctx, db, cfg.table); err != nil {
		return nil, err
	}
	return g, nil
}

// Mode returns the rule the guard admits tokens by.
func (g *Guard) Mode() fence.Mode { return g.mode }

// Dialect returns the engine the guard speaks to.
func (g *Guard) Dialect() Dialect { return g.dialect }

// Check admits token for resource within tx and records it as the highest
// accepted, to commit or roll back with tx; the resource stays locked
// against other Checks until tx ends. A rejected token returns a
// *fence.StaleTokenError (matching lease.ErrStaleToken) and records nothing;
// tx stays usable, and the caller should roll it back. A resource whose
// row holds a token no guard writes (NULL, below 1 or above
// lease.MaxToken, put there by hand) admits nothing: the error matches
// lease.ErrUnavailable. Other errors are the database's, wrapped.
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, resource string, token lease.Token) error {
	if tx == nil {
		return g.d.Invalidf("tx is nil: Check must run in the writer's transaction")
	}
	if g.dialect == MySQL {
		return g.checkMySQL(ctx, tx, resource, token)
	}
	return g.marks.Check(ctx, query(tx), resource, token)
}

// Highest returns the highest token accepted for resource, as q sees it; 0
// if none, and an error matching lease.ErrUnavailable if its row holds a
// token no guard writes.
func (g *Guard) Highest(ctx context.Context, q Querier, resource string) (lease.Token, error) {
	if q == nil {
		return 0, g.d.Invalidf("querier is nil")
	}
	return g.marks.Highest(ctx, query(q), resource)
}

// query is q's QueryRowContext for the shared code.
func query(q Querier) sqlguard.Query {
	return func(ctx context.Context, sql string, args ...any) (n int64, err error) {
		err = q.QueryRowContext(ctx, sql, args...).Scan(&n)
		return n, err
	}
}

// checkMySQL runs mysqlCheck: the insert ID of its answer is the token the
// row held before (0 if there was no row), which decides.
func (g *Guard) checkMySQL(ctx context.Context, tx *sql.Tx, resource string, token lease.Token) error {
	if err := g.d.Validate(resource, token); err != nil {
		return err
	}
	t := int64(token)
	res, err := tx.ExecContext(ctx, g.marks.Upsert, resource, t, t, t)
	if err != nil {
		return fmt.Errorf("sqlfence: checking %q token %d: %w", resource, token, err)
	}
	before, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("sqlfence: checking %q token %d: %w", resource, token, err)
	}
	switch {
	case before == 0 || g.mode.Admits(token, lease.Token(before)):
		return nil
	case before < 1 || lease.Token(before) > lease.MaxToken:
		return g.marks.Corrupt(resource, "NULL, below 1 or above 2^53")
	}
	return g.marks.Stale(resource, token, lease.Token(before))
}
