package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/guardtest"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.M(m)) }

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newGuard(t *testing.T, db pgfence.DB, opts ...pgfence.Option) *pgfence.Guard {
	t.Helper()
	g, err := pgfence.New(testCtx(t), db, opts...)
	if err != nil {
		t.Fatalf("pgfence.New: %v", err)
	}
	return g
}

// txGuard is a pgfence.Guard as a fence.Guard: each Check is a transaction
// of its own, running Guard.Check and then the write, committed if the write
// succeeds and rolled back otherwise.
type txGuard struct {
	pool *pgxpool.Pool
	g    *pgfence.Guard
}

func (a txGuard) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	return pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if err := a.g.Check(ctx, tx, resource, token); err != nil {
			return err
		}
		return write()
	})
}

// TestConformance runs the guard suite on PostgreSQL, one table per mode.
func TestConformance(t *testing.T) {
	pool := newPool(t)
	guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard {
		g := newGuard(t, pool, pgfence.WithMode(mode), pgfence.WithTable("fence_"+strings.ReplaceAll(mode.String(), "-", "_")))
		if g.Mode() != mode {
			t.Fatalf("Mode() = %v, want %v", g.Mode(), mode)
		}
		return txGuard{pool, g}
	})
}

func TestBadInput(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	g := newGuard(t, pool)
	for name, opt := range map[string]pgfence.Option{
		"mode":         pgfence.WithMode(fence.Mode(7)),
		"empty table":  pgfence.WithTable(""),
		"long table":   pgfence.WithTable(strings.Repeat("t", 64)),
		"NUL schema":   pgfence.WithSchema("a\x00"),
		"empty schema": pgfence.WithSchema(""),
		"nil option":   nil,
	} {
		if _, err := pgfence.New(ctx, pool, opt); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New with bad %s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := pgfence.New(ctx, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sqlguardtest.BadInput(t, func(res string, tok lease.Token) error { return g.Check(ctx, tx, res, tok) })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, nil, "r", 1); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Check without a transaction: %v", err)
	}
}

func TestOddNamesAndResources(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	g := newGuard(t, pool, pgfence.WithSchema(`s"'; --`), pgfence.WithTable(`t"'\; DROP TABLE x; --`))
	for i, res := range []string{`'; DROP TABLE lease_fence; --`, `"\ %_*`, "ünïcødé/日本語/🔒", strings.Repeat("r", lease.MaxKeyLen)} {
		tok := lease.Token(i + 1)
		if err := (txGuard{pool, g}).Check(ctx, res, tok, func() error { return nil }); err != nil {
			t.Fatalf("Check(%q): %v", res, err)
		}
		if got, err := g.Highest(ctx, pool, res); err != nil || got != tok {
			t.Fatalf("Highest(%q) = %d, %v; want %d", res, got, err, tok)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = $2`,
		`s"'; --`, `t"'\; DROP TABLE x; --`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("guard table not where asked: %d, %v", n, err)
	}
	// New on an existing table is fine, and sees the same marks.
	again := newGuard(t, pool, pgfence.WithSchema(`s"'; --`), pgfence.WithTable(`t"'\; DROP TABLE x; --`))
	if got, err := again.Highest(ctx, pool, "ünïcødé/日本語/🔒"); err != nil || got != 3 {
		t.Fatalf("second Guard reads %d, %v; want 3", got, err)
	}
}

// TestNewRefusesTableItCannotTrust: a table already under the guard's name
// that would not keep the marks safely fails New with ErrInvalid. Before,
// New took it: with a text token, "10" <= "9" admitted token 9 after 10;
// an UNLOGGED table loses every mark in crash recovery while the data it
// guards survives.
func TestNewRefusesTableItCannotTrust(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	for what, ddl := range map[string]string{
		"text token":   `CREATE TABLE %s (resource text PRIMARY KEY, token text NOT NULL)`,
		"int token":    `CREATE TABLE %s (resource text PRIMARY KEY, token integer NOT NULL)`,
		"no token":     `CREATE TABLE %s (resource text PRIMARY KEY, mark bigint NOT NULL)`,
		"unlogged":     `CREATE UNLOGGED TABLE %s (resource text PRIMARY KEY, token bigint NOT NULL)`,
		"a view":       `CREATE VIEW %s AS SELECT 'r'::text AS resource, 1::bigint AS token`,
		"dropped then": `CREATE TABLE %s (resource text PRIMARY KEY, token bigint, x int); ALTER TABLE %[1]s DROP COLUMN token`,
	} {
		table := "bad_" + strings.ReplaceAll(what, " ", "_")
		if _, err := pool.Exec(ctx, fmt.Sprintf(ddl, table)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if _, err := pgfence.New(ctx, pool, pgfence.WithTable(table)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New on %s: err = %v, want ErrInvalid", what, err)
		}
	}
}

func TestUpdateRow(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE jobs (id int PRIMARY KEY, value text, note text, fencing_token bigint)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (id, value) VALUES (1, 'initial'), (2, 'initial')`); err != nil {
		t.Fatal(err)
	}
	upd := func(id int, tok lease.Token, value string, mode fence.Mode) error {
		return pgfence.UpdateRow(ctx, pool, pgfence.Update{
			Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: id, TokenColumn: "fencing_token", Token: tok,
			Set: map[string]any{"value": value, "note": "by " + value}, Mode: mode,
		})
	}
	read := func(id int) (value string, tok int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT value, coalesce(fencing_token, 0) FROM jobs WHERE id = $1`, id).Scan(&value, &tok); err != nil {
			t.Fatal(err)
		}
		return value, tok
	}
	if err := upd(1, 2, "two", fence.AtLeast); err != nil { // NULL token counts as 0
		t.Fatal(err)
	}
	if err := upd(1, 2, "two-again", fence.AtLeast); err != nil {
		t.Fatalf("AtLeast with the same token: %v", err)
	}
	err := upd(1, 1, "one", fence.AtLeast)
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != 1 || se.Highest != 2 || se.Resource != "jobs/1" {
		t.Fatalf("stale update: err = %v, want StaleTokenError token 1 highest 2 on jobs/1", err)
	}
	if err := upd(1, 2, "strict-same", fence.Strict); !errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("Strict with the same token: err = %v, want ErrStaleToken", err)
	}
	if v, tok := read(1); v != "two-again" || tok != 2 {
		t.Fatalf("row 1 = %q token %d, want two-again token 2", v, tok)
	}
	if err := upd(99, 5, "x", fence.AtLeast); !errors.Is(err, pgx.ErrNoRows) || errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("update of a missing row: err = %v, want pgx.ErrNoRows", err)
	}
	if v, tok := read(2); v != "initial" || tok != 0 {
		t.Fatalf("row 2 touched: %q token %d", v, tok)
	}

	sql, args, err := pgfence.Update{Table: pgx.Identifier{"app", "jobs"}, IDColumn: "id", ID: 7,
		TokenColumn: "fencing_token", Token: 3, Set: map[string]any{"b": 2, "a": 1}}.SQL()
	if err != nil {
		t.Fatal(err)
	}
	wantSQL := `UPDATE "app"."jobs" SET "a" = $1, "b" = $2, "fencing_token" = $3 WHERE "id" = $4 AND coalesce("fencing_token", 0) <= $3::bigint`
	if sql != wantSQL || fmt.Sprint(args) != "[1 2 3 7]" {
		t.Fatalf("SQL() = %s %v\nwant    %s [1 2 3 7]", sql, args, wantSQL)
	}
	for name, u := range map[string]pgfence.Update{
		"no table":        {IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1},
		"id is token":     {Table: pgx.Identifier{"x"}, IDColumn: "t", ID: 1, TokenColumn: "t", Token: 1},
		"sets token":      {Table: pgx.Identifier{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1, Set: map[string]any{"t": 5}},
		"nil id":          {Table: pgx.Identifier{"x"}, IDColumn: "id", TokenColumn: "t", Token: 1},
		"zero token":      {Table: pgx.Identifier{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t"},
		"bad mode":        {Table: pgx.Identifier{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1, Mode: 9},
		"NUL in a column": {Table: pgx.Identifier{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1, Set: map[string]any{"a\x00": 1}},
	} {
		if err := pgfence.UpdateRow(ctx, pool, u); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("UpdateRow with %s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// TestCorruptMarkRefused: a mark no guard writes, in a table of the
// operator's making that New accepts (no CHECK on token, NULL allowed), is
// refused as ErrUnavailable and left alone. Before, 0 and -5 admitted
// every token, a NULL failed with pgx's scan error, and a mark above 2^53
// was a StaleTokenError naming it as the highest accepted.
func TestCorruptMarkRefused(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE ops (resource text PRIMARY KEY, token bigint)`); err != nil {
		t.Fatal(err)
	}
	g := newGuard(t, pool, pgfence.WithTable("ops"))
	sqlguardtest.RefusesCorruptMarks(t, sqlguardtest.MarkTable{
		Put: func(res, mark string) error {
			_, err := pool.Exec(ctx, "INSERT INTO ops (resource, token) VALUES ($1, "+mark+")", res)
			return err
		},
		Stored: func(res string) (string, error) {
			var s string
			err := pool.QueryRow(ctx, "SELECT coalesce(token::text, 'NULL') FROM ops WHERE resource = $1", res).Scan(&s)
			return s, err
		},
		Check: func(res string, tok lease.Token) error {
			return txGuard{pool, g}.Check(ctx, res, tok, func() error { return nil })
		},
		Highest: func(res string) (lease.Token, error) { return g.Highest(ctx, pool, res) },
	})
}

// TestTableReplacedUnderARunningGuard: a guard whose table was dropped and
// made again (by another process's New, say) refuses its Checks rather than
// admit tokens against the new, empty table. Before, the old guard took the
// new table as its own: token 5 was admitted after token 6 had committed.
func TestTableReplacedUnderARunningGuard(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	g := newGuard(t, pool, pgfence.WithTable("replaced"))
	check := func(g *pgfence.Guard, tok lease.Token) error {
		return txGuard{pool, g}.Check(ctx, "job", tok, func() error { return nil })
	}
	if err := check(g, 6); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DROP TABLE replaced`); err != nil {
		t.Fatal(err)
	}
	if err := check(g, 5); err == nil {
		t.Fatal("token 5 admitted with the table dropped")
	}
	other := newGuard(t, pool, pgfence.WithTable("replaced")) // makes it again, empty
	for _, tok := range []lease.Token{5, 6, 7} {
		if err := check(g, tok); !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("token %d on the old guard after its table was made again: err = %v, want ErrUnavailable", tok, err)
		}
	}
	if h, err := other.Highest(ctx, pool, "job"); err != nil || h != 0 {
		t.Errorf("the new table holds %d for job (%v); the old guard recorded into it", h, err)
	}
	// A guard made on the new table uses it: the loss is the operator's to
	// repair, and New cannot tell a lost table from a first one.
	if err := check(other, 5); err != nil {
		t.Errorf("token 5 on a guard made after the table: %v", err)
	}
}

// TestPartitionedTable: a partitioned table under the guard's name is
// taken, and its Checks are not mistaken for a replaced table's (each
// row's tableoid names its partition, not the table).
func TestPartitionedTable(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	for _, ddl := range []string{
		`CREATE TABLE part (resource text COLLATE "C" PRIMARY KEY, token bigint NOT NULL) PARTITION BY HASH (resource)`,
		`CREATE TABLE part_0 PARTITION OF part FOR VALUES WITH (MODULUS 2, REMAINDER 0)`,
		`CREATE TABLE part_1 PARTITION OF part FOR VALUES WITH (MODULUS 2, REMAINDER 1)`,
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	g := newGuard(t, pool, pgfence.WithTable("part"))
	for i := range 8 {
		res := fmt.Sprint("job-", i)
		if err := (txGuard{pool, g}).Check(ctx, res, 3, func() error { return nil }); err != nil {
			t.Fatalf("Check(%s, 3): %v", res, err)
		}
		if err := (txGuard{pool, g}).Check(ctx, res, 2, func() error { return nil }); !errors.Is(err, lease.ErrStaleToken) {
			t.Fatalf("Check(%s, 2) after 3: %v, want ErrStaleToken", res, err)
		}
	}
}

// TestCheckRefusesAnEndedTransaction: a pgx.Tx whose transaction was ended
// by a COMMIT or ROLLBACK sent through it (pgx still takes it for open) is
// refused as ErrInvalid, and records nothing. Before, Check ran on the
// connection in autocommit: the mark was committed on its own at once, so
// the write after it was not fenced with it, and the caller's Rollback
// could not take the mark back.
func TestCheckRefusesAnEndedTransaction(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	g := newGuard(t, pool)
	for _, end := range []string{"COMMIT", "ROLLBACK", "END"} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, end); err != nil {
			t.Fatal(err)
		}
		res := "ended-by-" + end
		if err := g.Check(ctx, tx, res, 5); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Check after %s through the tx: err = %v, want ErrInvalid", end, err)
		}
		_ = tx.Rollback(ctx)
		if h, err := g.Highest(ctx, pool, res); err != nil || h != 0 {
			t.Errorf("after %s and Check: mark %d (%v), want none", end, h, err)
		}
	}
}
