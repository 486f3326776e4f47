// Package pgfence guards data in PostgreSQL with fencing tokens, inside the
// writer's own transaction, so that the check and the write commit or roll
// back together (I6).
//
// Guard.Check records the highest token accepted per resource in a table of
// its own (public.lease_fence by default) with one conditional upsert, which
// also locks the resource's row until the transaction ends: a concurrent
// writer's Check waits, then sees the committed token. Use it when a write
// touches several rows or tables:
//
//	tx, err := pool.Begin(ctx)
//	…
//	defer tx.Rollback(ctx)
//	if err := guard.Check(ctx, tx, "job/42", hold.Token()); err != nil {
//		return err // a *fence.StaleTokenError if the token is old
//	}
//	if _, err := tx.Exec(ctx, `UPDATE jobs SET result = $1 WHERE id = 42`, result); err != nil {
//		return err
//	}
//	return tx.Commit(ctx)
//
// UpdateRow (or the statement from Update.SQL, to send it yourself) is the
// single-statement form for a row that carries its own token column:
//
//	UPDATE t SET …, fencing_token = $t WHERE id = $id AND fencing_token <= $t
//
// In READ COMMITTED (PostgreSQL's default) a Check or UpdateRow that waited
// for another writer's row lock sees that writer's committed token. In
// REPEATABLE READ or SERIALIZABLE it fails instead with a serialization error
// (SQLSTATE 40001), and the caller retries the transaction.
//
// The marks are the table's rows: a table dropped under a running Guard
// takes them along. The Guard remembers its table's OID, and once the
// table has been made again (another process's New makes it, empty) every
// Check it admits fails with an error matching lease.ErrUnavailable rather
// than judge tokens against the empty table. So does a table of another
// OID reached at the same address: a database restored from a dump, or a
// logical replica promoted, whose marks may lag. A Guard made after that
// cannot tell the new table from a first one: restore the marks first.
package pgfence

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlguard"
	"github.com/leasehq/lease/internal/sqlident"
)

// dialect is PostgreSQL as pgx speaks it, for the code pgfence shares with
// sqlfence.
var dialect = sqlguard.Dialect{
	Pkg:          "pgfence",
	Ident:        sqlident.PostgreSQL,
	Quote:        func(name string) string { return pgx.Identifier{name}.Sanitize() },
	Param:        func(n int) string { return "$" + strconv.Itoa(n) },
	Numbered:     true,
	CompareToken: func(p string) string { return p + "::bigint" },
	NoRows:       pgx.ErrNoRows,
}

// Querier is what the package runs statements through: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all qualify.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a Querier that can begin a transaction (or, for a pgx.Tx, a
// savepoint), for creating the guard's table.
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Default names of the guard's table: public.lease_fence.
const (
	DefaultSchema = "public"
	DefaultTable  = "lease_fence"
)

// Option configures a Guard.
type Option func(*config) error

type config struct {
	mode          fence.Mode
	schema, table string
}

// WithMode sets the rule tokens are admitted by: fence.AtLeast (the default)
// or fence.Strict.
func WithMode(m fence.Mode) Option {
	return func(c *config) error {
		if err := dialect.CheckMode(m); err != nil {
			return err
		}
		c.mode = m
		return nil
	}
}

// WithSchema puts the guard's table in schema name, created if missing.
func WithSchema(name string) Option {
	return func(c *config) error {
		if err := dialect.CheckIdent("schema", name); err != nil {
			return err
		}
		c.schema = name
		return nil
	}
}

// WithTable names the guard's table.
func WithTable(name string) Option {
	return func(c *config) error {
		if err := dialect.CheckIdent("table", name); err != nil {
			return err
		}
		c.table = name
		return nil
	}
}

// Guard admits writes by fencing token inside PostgreSQL transactions. It
// holds no connection and is safe for concurrent use.
type Guard struct {
	mode  fence.Mode
	marks sqlguard.Marks
}

// New returns a Guard, creating its table (and schema) in db if they do not
// exist. Concurrent New calls on one database serialise on an advisory lock.
// A table already under that name must be a logged table with a bigint
// token column, or New fails with an error matching lease.ErrInvalid.
func New(ctx context.Context, db DB, opts ...Option) (*Guard, error) {
	if db == nil {
		return nil, invalidf("db is nil")
	}
	cfg := config{mode: fence.AtLeast, schema: DefaultSchema, table: DefaultTable}
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("nil option")
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	// ON CONFLICT DO UPDATE locks the existing row before it evaluates the
	// WHERE, so even a rejected Check holds the row until the transaction
	// ends; an admitted one records the token, to be committed or rolled
	// back with the caller's write.
	g := &Guard{mode: cfg.mode, marks: dialect.Marks(cfg.mode, cfg.schema, cfg.table)}
	if err := g.create(ctx, db, cfg.schema); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Guard) create(ctx context.Context, db DB, schema string) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgfence: creating %s: %w", g.marks.Table, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "pgfence "+g.marks.Table); err != nil {
		return fmt.Errorf("pgfence: locking for table creation: %w", err)
	}
	var exists, hasSchema bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT FROM pg_namespace WHERE nspname = $2)`,
		g.marks.Table, schema).Scan(&exists, &hasSchema); err != nil {
		return fmt.Errorf("pgfence: looking for %s: %w", g.marks.Table, err)
	}
	if exists {
		if err := g.verify(ctx, tx); err != nil {
			return err
		}
	} else {
		// Only when missing: an existing table needs no CREATE privilege.
		if !hasSchema {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
				return fmt.Errorf("pgfence: creating schema: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+g.marks.Table+` (
			resource text COLLATE "C" PRIMARY KEY,
			token    bigint NOT NULL CHECK (token BETWEEN 1 AND 9007199254740992)
		)`); err != nil {
			return fmt.Errorf("pgfence: creating %s: %w", g.marks.Table, err)
		}
	}
	// The table's OID: one dropped and made again has another, and Check
	// refuses to judge tokens against its empty marks. A regclass literal,
	// not tableoid, which names a partition of a partitioned table.
	var oid int64
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1)::oid::bigint`, g.marks.Table).Scan(&oid); err != nil {
		return fmt.Errorf("pgfence: looking for %s: %w", g.marks.Table, err)
	}
	g.marks.ReturnID(oid, regclassLiteral(g.marks.Table)+"::oid::bigint")
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgfence: creating %s: %w", g.marks.Table, err)
	}
	return nil
}

// regclassLiteral is name as a regclass constant, an escape string (E'…')
// so that it reads the same whatever standard_conforming_strings says. In
// a prepared statement it is resolved when the statement is analysed, and
// again when a dropped table makes PostgreSQL analyse it anew.
func regclassLiteral(name string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(name) + "'::regclass"
}

// verify checks that the existing table is one the guard can trust: a
// plain table, logged (an UNLOGGED table is emptied by crash recovery, and
// every mark with it, while the data it guards survives), whose token is a
// bigint (as text, "10" < "9").
func (g *Guard) verify(ctx context.Context, tx pgx.Tx) error {
	var kind, persistence, token string
	if err := tx.QueryRow(ctx, `SELECT c.relkind::text, c.relpersistence::text,
		coalesce((SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attname = 'token' AND a.attnum > 0 AND NOT a.attisdropped), '')
		FROM pg_class c WHERE c.oid = to_regclass($1)`, g.marks.Table).Scan(&kind, &persistence, &token); err != nil {
		return fmt.Errorf("pgfence: checking %s: %w", g.marks.Table, err)
	}
	var why string
	switch {
	case kind != "r" && kind != "p":
		why = fmt.Sprintf("it is not a table (relkind %q)", kind)
	case persistence != "p":
		why = fmt.Sprintf("it is unlogged or temporary (relpersistence %q): a crash would empty it", persistence)
	case token != "bigint":
		why = fmt.Sprintf("column token is %q, want bigint", token)
	default:
		return nil
	}
	return invalidf("table %s exists but cannot hold the guard's marks: %s (drop or rename it, or name another WithTable)", g.marks.Table, why)
}

// Mode returns the rule the guard admits tokens by.
func (g *Guard) Mode() fence.Mode { return g.mode }

// Check admits token for resource within tx and records it as the highest
// accepted, to commit or roll back with tx; the resource stays locked
// against other Checks until tx ends. A rejected token returns a
// *fence.StaleTokenError (matching lease.ErrStaleToken) and records nothing;
// tx stays usable, and the caller should roll it back. A tx whose
// connection is no longer in a transaction (a COMMIT or ROLLBACK sent
// through tx.Exec) is refused, matching lease.ErrInvalid. A resource whose
// row holds a token no guard writes (NULL, below 1 or above
// lease.MaxToken, put there by hand) admits nothing: the error matches
// lease.ErrUnavailable. Other errors are the database's, wrapped.
func (g *Guard) Check(ctx context.Context, tx pgx.Tx, resource string, token lease.Token) error {
	if tx == nil {
		return invalidf("tx is nil: Check must run in the writer's transaction")
	}
	// A COMMIT or ROLLBACK sent through tx ends the transaction without
	// pgx knowing: the upsert would then commit alone, at once, fencing
	// nothing. The server reports its transaction status with every
	// answer, so asking costs nothing.
	if c := tx.Conn(); c != nil && c.PgConn() != nil && c.PgConn().TxStatus() == 'I' {
		return invalidf("tx's connection is not in a transaction (a COMMIT or ROLLBACK was sent through it): Check would commit the mark alone, apart from the write")
	}
	return g.marks.Check(ctx, query(tx), resource, token)
}

// Highest returns the highest token accepted for resource, as q sees it; 0
// if none, and an error matching lease.ErrUnavailable if its row holds a
// token no guard writes.
func (g *Guard) Highest(ctx context.Context, q Querier, resource string) (lease.Token, error) {
	if q == nil {
		return 0, invalidf("querier is nil")
	}
	return g.marks.Highest(ctx, query(q), resource)
}

// query is q's QueryRow for the shared code.
func query(q Querier) sqlguard.Query {
	return func(ctx context.Context, sql string, args ...any) (n int64, err error) {
		err = q.QueryRow(ctx, sql, args...).Scan(&n)
		return n, err
	}
}

// invalidf returns an error matching lease.ErrInvalid.
func invalidf(format string, args ...any) error { return dialect.Invalidf(format, args...) }
