package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/guardtest"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/mysqltest"
	"github.com/leasehq/lease/internal/testkit/sqlguardtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(mysqltest.M(m)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openMySQL returns a pool on a fresh MariaDB database.
func openMySQL(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", mysqltest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openSQLite returns a pool on a fresh SQLite file in journal mode journal
// (WAL or DELETE, SQLite's default), whose connections wait up to 10 s for
// each other's locks.
func openSQLite(t testing.TB, journal string) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode("+journal+")")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { _ = db.Close() })
	var mode string
	if err := db.QueryRowContext(testCtx(t), "PRAGMA journal_mode").Scan(&mode); err != nil || !strings.EqualFold(mode, journal) {
		t.Fatalf("journal_mode = %q, %v; want %s", mode, err, journal)
	}
	return db
}

// engine is one database a test runs on.
type engine struct {
	name string
	d    sqlfence.Dialect
	db   *sql.DB
}

// engines returns a fresh MariaDB database and a fresh SQLite file (WAL).
func engines(t *testing.T) []engine {
	return []engine{{"mariadb", sqlfence.MySQL, openMySQL(t)}, {"sqlite", sqlfence.SQLite, openSQLite(t, "WAL")}}
}

// forEach runs f for each engine in a subtest of its name.
func forEach(t *testing.T, f func(t *testing.T, e engine)) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) { f(t, e) })
	}
}

func newGuard(t testing.TB, e engine, opts ...sqlfence.Option) *sqlfence.Guard {
	t.Helper()
	g, err := sqlfence.New(testCtx(t), e.db, e.d, opts...)
	if err != nil {
		t.Fatalf("sqlfence.New: %v", err)
	}
	return g
}

// txGuard is a sqlfence.Guard as a fence.Guard: each Check is a transaction
// of its own, running Guard.Check and then the write, committed if the write
// succeeds and rolled back otherwise.
type txGuard struct {
	db   *sql.DB
	g    *sqlfence.Guard
	opts *sql.TxOptions
}

func (a txGuard) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	tx, err := a.db.BeginTx(ctx, a.opts)
	if err != nil {
		return err
	}
	if err := a.g.Check(ctx, tx, resource, token); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := write(); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// TestConformance runs the guard suite on each engine, one table per mode;
// on MariaDB in its default isolation (REPEATABLE READ) and in READ
// COMMITTED.
func TestConformance(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		levels := []sql.IsolationLevel{sql.LevelDefault}
		if e.d == sqlfence.MySQL {
			levels = append(levels, sql.LevelReadCommitted)
		}
		for _, level := range levels {
			t.Run(strings.ReplaceAll(level.String(), " ", "-"), func(t *testing.T) {
				guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard {
					table := fmt.Sprintf("fence_%d_%s", level, strings.ReplaceAll(mode.String(), "-", "_"))
					g := newGuard(t, e, sqlfence.WithMode(mode), sqlfence.WithTable(table))
					if g.Mode() != mode || g.Dialect() != e.d {
						t.Fatalf("Mode() = %v, Dialect() = %v; want %v, %v", g.Mode(), g.Dialect(), mode, e.d)
					}
					return txGuard{e.db, g, &sql.TxOptions{Isolation: level}}
				})
			})
		}
	})
}

func TestBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		ctx := testCtx(t)
		g := newGuard(t, e)
		for name, opt := range map[string]sqlfence.Option{
			"mode":        sqlfence.WithMode(fence.Mode(7)),
			"empty table": sqlfence.WithTable(""),
			"NUL table":   sqlfence.WithTable("a\x00"),
			"nil option":  nil,
		} {
			if _, err := sqlfence.New(ctx, e.db, e.d, opt); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("New with bad %s: err = %v, want ErrInvalid", name, err)
			}
		}
		if _, err := sqlfence.New(ctx, nil, e.d); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New(nil): %v", err)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		sqlguardtest.BadInput(t, func(res string, tok lease.Token) error { return g.Check(ctx, tx, res, tok) })
		if err := g.Check(ctx, nil, "r", 1); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Check without a transaction: %v", err)
		}
		if _, err := g.Highest(ctx, nil, "r"); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Highest without a querier: %v", err)
		}
	})
	// Each engine's own limits on names.
	my, lite := engine{"mariadb", sqlfence.MySQL, openMySQL(t)}, engine{"sqlite", sqlfence.SQLite, openSQLite(t, "WAL")}
	for _, c := range []struct {
		e     engine
		table string
	}{{my, strings.Repeat("t", 65)}, {my, "trailing "}, {my, "🔒"}, {lite, "sqlite_fence"}, {lite, "SQLite_x"}} {
		if _, err := sqlfence.New(testCtx(t), c.e.db, c.e.d, sqlfence.WithTable(c.table)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: New with table %q: err = %v, want ErrInvalid", c.e.name, c.table, err)
		}
	}
	newGuard(t, lite, sqlfence.WithTable(strings.Repeat("t", 65)+" 🔒 "))
	for _, d := range []sqlfence.Dialect{0, 3} {
		if _, err := sqlfence.New(testCtx(t), lite.db, d); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New with dialect %v: %v, want ErrInvalid", d, err)
		}
		u := sqlfence.Update{Table: []string{"t"}, IDColumn: "id", ID: 1, TokenColumn: "tok", Token: 1}
		if err := sqlfence.UpdateRow(testCtx(t), lite.db, d, u); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("UpdateRow with dialect %v: %v, want ErrInvalid", d, err)
		}
		if _, _, err := u.SQL(d); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("SQL with dialect %v: %v, want ErrInvalid", d, err)
		}
	}
}

// TestOddNamesAndResources: names are quoted and resources are parameters,
// whatever they hold; resources compare byte-wise (a trailing space makes
// another resource, which MySQL's PAD SPACE collations would not).
func TestOddNamesAndResources(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		ctx := testCtx(t)
		table := "t\"'`; DROP TABLE x; --"
		g := newGuard(t, e, sqlfence.WithTable(table))
		resources := []string{`'; DROP TABLE lease_fence; --`, "`\"\\ %_*", "ünïcødé/日本語/🔒", "job", "job ", "JOB", strings.Repeat("r", lease.MaxKeyLen)}
		for i, res := range resources {
			tok := lease.Token(100 - i) // highest first: one shared mark would reject the later ones
			if err := (txGuard{e.db, g, nil}).Check(ctx, res, tok, func() error { return nil }); err != nil {
				t.Fatalf("Check(%q): %v", res, err)
			}
		}
		for i, res := range resources {
			if got, err := g.Highest(ctx, e.db, res); err != nil || got != lease.Token(100-i) {
				t.Fatalf("Highest(%q) = %d, %v; want %d", res, got, err, 100-i)
			}
		}
		// New on an existing table is fine, and sees the same marks.
		again := newGuard(t, e, sqlfence.WithTable(table))
		if got, err := again.Highest(ctx, e.db, "ünïcødé/日本語/🔒"); err != nil || got != 98 {
			t.Fatalf("second Guard reads %d, %v; want 98", got, err)
		}
	})
}

// TestNewRefusesTableItCannotTrust: a table already under the guard's name
// that would not keep the marks safely fails New with ErrInvalid. Before,
// New took any table it found: on MariaDB, one without a unique key on
// resource admitted every token (each upsert inserted a row of its own, so
// token 5 was admitted after 9), and on SQLite a TEXT token compared as
// text ("10" < "9").
func TestNewRefusesTableItCannotTrust(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		ctx := testCtx(t)
		bad := map[sqlfence.Dialect]map[string]string{
			sqlfence.MySQL: {
				"no key":          `(resource VARBINARY(512) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`,
				"MyISAM":          `(resource VARBINARY(512) NOT NULL PRIMARY KEY, token BIGINT NOT NULL) ENGINE=MyISAM`,
				"text token":      `(resource VARBINARY(512) NOT NULL PRIMARY KEY, token VARCHAR(20) NOT NULL) ENGINE=InnoDB`,
				"int token":       `(resource VARBINARY(512) NOT NULL PRIMARY KEY, token INT NOT NULL) ENGINE=InnoDB`,
				"folding names":   `(resource VARCHAR(512) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB`,
				"key on token":    `(resource VARBINARY(512) NOT NULL PRIMARY KEY, token BIGINT NOT NULL UNIQUE) ENGINE=InnoDB`,
				"key with token":  `(resource VARBINARY(512) NOT NULL, token BIGINT NOT NULL, PRIMARY KEY (resource, token)) ENGINE=InnoDB`,
				"key on a prefix": `(resource VARBINARY(512) NOT NULL, token BIGINT NOT NULL, PRIMARY KEY (resource(16))) ENGINE=InnoDB`,
				"no token":        `(resource VARBINARY(512) NOT NULL PRIMARY KEY, mark BIGINT NOT NULL) ENGINE=InnoDB`,
				// The insert ID of a first Check would be the counter's, read
				// as the token the row held: "highest accepted is 4".
				"auto-increment": `(id BIGINT AUTO_INCREMENT, resource VARBINARY(512) NOT NULL PRIMARY KEY, token BIGINT NOT NULL, KEY (id)) ENGINE=InnoDB`,
			},
			sqlfence.SQLite: {
				"text token": `(resource TEXT NOT NULL PRIMARY KEY, token TEXT NOT NULL)`,
				"no token":   `(resource TEXT NOT NULL PRIMARY KEY, mark INTEGER NOT NULL)`,
			},
		}[e.d]
		i := 0
		for what, ddl := range bad {
			i++
			table := fmt.Sprintf("bad_%d", i)
			if _, err := e.db.ExecContext(ctx, "CREATE TABLE "+table+" "+ddl); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if _, err := sqlfence.New(ctx, e.db, e.d, sqlfence.WithTable(table)); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("New on a table with %s: err = %v, want ErrInvalid", what, err)
			}
		}
		// A name differing only in case from an existing table is a table
		// of its own (MariaDB on Linux): New makes it and uses it.
		if e.d == sqlfence.MySQL {
			if _, err := e.db.ExecContext(ctx, "CREATE TABLE casefold "+bad["no token"]); err != nil {
				t.Fatal(err)
			}
			g := newGuard(t, e, sqlfence.WithTable("CASEFOLD"))
			if err := (txGuard{e.db, g, nil}).Check(ctx, "job", 3, func() error { return nil }); err != nil {
				t.Errorf("Check on table CASEFOLD, beside casefold: %v", err)
			}
		}
	})
}

// TestRejectedCheckLeavesTxUsable: after a stale token the caller's
// transaction still runs statements (and would commit nothing of the
// guard's).
func TestRejectedCheckLeavesTxUsable(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		ctx := testCtx(t)
		g := newGuard(t, e)
		if err := (txGuard{e.db, g, nil}).Check(ctx, "r", 5, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = g.Check(ctx, tx, "r", 4)
		var se *fence.StaleTokenError
		if !errors.As(err, &se) || se.Highest != 5 {
			t.Fatalf("stale Check: %v, want StaleTokenError with highest 5", err)
		}
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("the transaction after a rejected Check: %d, %v", one, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got, err := g.Highest(ctx, e.db, "r"); err != nil || got != 5 {
			t.Fatalf("after committing a rejected Check: highest %d, %v; want 5", got, err)
		}
	})
}

// jobsTable is each engine's table of rows that carry their own token.
var jobsTable = map[sqlfence.Dialect]string{
	sqlfence.MySQL:  `CREATE TABLE jobs (id INT PRIMARY KEY, value VARCHAR(64), note VARCHAR(64), fencing_token BIGINT) ENGINE=InnoDB`,
	sqlfence.SQLite: `CREATE TABLE jobs (id INTEGER PRIMARY KEY, value TEXT, note TEXT, fencing_token INTEGER)`,
}

func TestUpdateRow(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		ctx := testCtx(t)
		for _, stmt := range []string{jobsTable[e.d], `INSERT INTO jobs (id, value) VALUES (1, 'initial'), (2, 'initial')`} {
			if _, err := e.db.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		upd := func(id int, tok lease.Token, value string, mode fence.Mode) error {
			return sqlfence.UpdateRow(ctx, e.db, e.d, sqlfence.Update{
				Table: []string{"jobs"}, IDColumn: "id", ID: id, TokenColumn: "fencing_token", Token: tok,
				Set: map[string]any{"value": value, "note": "by " + value}, Mode: mode,
			})
		}
		read := func(id int) (value string, tok int64) {
			t.Helper()
			if err := e.db.QueryRowContext(ctx, `SELECT value, coalesce(fencing_token, 0) FROM jobs WHERE id = ?`, id).Scan(&value, &tok); err != nil {
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
		// The same write again changes no value: MySQL counts the row as
		// unaffected, yet it matched and the write is admitted.
		if err := upd(1, 2, "two-again", fence.AtLeast); err != nil {
			t.Fatalf("AtLeast with the same token and the same values: %v", err)
		}
		err := upd(1, 1, "one", fence.AtLeast)
		var se *fence.StaleTokenError
		if !errors.As(err, &se) || se.Token != 1 || se.Highest != 2 || se.Resource != "jobs/1" || se.Mode != fence.AtLeast {
			t.Fatalf("stale update: err = %v, want StaleTokenError token 1 highest 2 on jobs/1", err)
		}
		for _, value := range []string{"two-again", "strict-same"} {
			if err := upd(1, 2, value, fence.Strict); !errors.Is(err, lease.ErrStaleToken) {
				t.Fatalf("Strict with the same token (value %q): err = %v, want ErrStaleToken", value, err)
			}
		}
		if v, tok := read(1); v != "two-again" || tok != 2 {
			t.Fatalf("row 1 = %q token %d, want two-again token 2", v, tok)
		}
		if err := upd(1, 3, "three", fence.Strict); err != nil {
			t.Fatalf("Strict with a newer token: %v", err)
		}
		if err := upd(99, 5, "x", fence.AtLeast); !errors.Is(err, sql.ErrNoRows) || errors.Is(err, lease.ErrStaleToken) {
			t.Fatalf("update of a missing row: err = %v, want sql.ErrNoRows", err)
		}
		if v, tok := read(2); v != "initial" || tok != 0 {
			t.Fatalf("row 2 touched: %q token %d", v, tok)
		}
		// In the caller's transaction, rolled back: nothing stays.
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sqlfence.UpdateRow(ctx, tx, e.d, sqlfence.Update{Table: []string{"jobs"}, IDColumn: "id", ID: 2,
			TokenColumn: "fencing_token", Token: 9, Set: map[string]any{"value": "rolled back"}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if v, tok := read(2); v != "initial" || tok != 0 {
			t.Fatalf("row 2 after a rolled-back update: %q token %d", v, tok)
		}

		for name, u := range map[string]sqlfence.Update{
			"no table":        {IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1},
			"id is token":     {Table: []string{"x"}, IDColumn: "t", ID: 1, TokenColumn: "t", Token: 1},
			"sets token":      {Table: []string{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1, Set: map[string]any{"t": 5}},
			"nil id":          {Table: []string{"x"}, IDColumn: "id", TokenColumn: "t", Token: 1},
			"zero token":      {Table: []string{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t"},
			"bad mode":        {Table: []string{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1, Mode: 9},
			"NUL in a column": {Table: []string{"x"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1, Set: map[string]any{"a\x00": 1}},
		} {
			if err := sqlfence.UpdateRow(ctx, e.db, e.d, u); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("UpdateRow with %s: err = %v, want ErrInvalid", name, err)
			}
		}
		if err := sqlfence.UpdateRow(ctx, nil, e.d, sqlfence.Update{Table: []string{"jobs"}, IDColumn: "id", ID: 1, TokenColumn: "t", Token: 1}); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("UpdateRow without a querier: %v", err)
		}
	})
}

// TestUpdateRowStaleInSnapshot: in the caller's REPEATABLE READ
// transaction on MariaDB, a stale UpdateRow on a row written or inserted
// after the transaction's snapshot is a StaleTokenError naming the newer
// token. The UPDATE reads the latest committed row, so the read that tells
// stale from missing must too: a snapshot read saw the older token (and
// retried until it gave up with ErrUnavailable) or no row (ErrNoRows), so a
// late write went uncounted as one, and a stale writer was told the row
// was missing.
func TestUpdateRowStaleInSnapshot(t *testing.T) {
	e := engine{"mariadb", sqlfence.MySQL, openMySQL(t)}
	ctx := testCtx(t)
	for _, stmt := range []string{jobsTable[e.d], `INSERT INTO jobs (id, value, fencing_token) VALUES (1, 'initial', 5)`} {
		if _, err := e.db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	upd := func(q sqlfence.Querier, id int, tok lease.Token, value string) error {
		return sqlfence.UpdateRow(ctx, q, e.d, sqlfence.Update{Table: []string{"jobs"}, IDColumn: "id", ID: id,
			TokenColumn: "fencing_token", Token: tok, Set: map[string]any{"value": value}})
	}
	tx, err := e.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	// A newer writer, outside the transaction, after its snapshot.
	if err := upd(e.db, 1, 9, "nine"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, `INSERT INTO jobs (id, value, fencing_token) VALUES (2, 'new', 9)`); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{1, 2} {
		err := upd(tx, id, 7, "late")
		var stale *fence.StaleTokenError
		if !errors.As(err, &stale) || stale.Highest != 9 || stale.Token != 7 {
			t.Errorf("token 7 on row %d, whose token became 9 after the snapshot: err = %v, want a StaleTokenError with highest 9", id, err)
		}
	}
	if err := upd(tx, 1, 9, "nine again"); err != nil {
		t.Errorf("token 9 on row 1 in the transaction: %v", err)
	}
}

// TestUpdateSQL: each dialect's statement, quoted its way; MySQL's ?
// placeholders take the token twice, SQLite's ?3 names it twice.
func TestUpdateSQL(t *testing.T) {
	u := sqlfence.Update{Table: []string{"app", "jo`b\"s"}, IDColumn: "id", ID: 7,
		TokenColumn: "fencing_token", Token: 3, Set: map[string]any{"b": 2, "a": 1}}
	for _, c := range []struct {
		d        sqlfence.Dialect
		sql, arg string
	}{
		{sqlfence.MySQL, "UPDATE `app`.`jo``b\"s` SET `a` = ?, `b` = ?, `fencing_token` = LAST_INSERT_ID(?) WHERE `id` = ? AND coalesce(`fencing_token`, 0) <= ?", "[1 2 3 7 3]"},
		{sqlfence.SQLite, `UPDATE "app"."jo` + "`" + `b""s" SET "a" = ?1, "b" = ?2, "fencing_token" = ?3 WHERE "id" = ?4 AND coalesce("fencing_token", 0) <= ?3`, "[1 2 3 7]"},
	} {
		sql, args, err := u.SQL(c.d)
		if err != nil || sql != c.sql || fmt.Sprint(args) != c.arg {
			t.Errorf("%v: SQL() = %s %v, %v\nwant %s %s", c.d, sql, args, err, c.sql, c.arg)
		}
	}
}

// TestCorruptMarkRefused: a mark no guard writes, in a table of the
// operator's making that New accepts (no CHECK on token, NULL allowed), is
// refused as ErrUnavailable and left alone. Before, on MariaDB a NULL mark
// admitted every token and recorded none (LAST_INSERT_ID(NULL) answered 0,
// a fresh insert's ID), so a late writer's token 1 was admitted forever;
// on SQLite 0 and -5 admitted every token; and a negative mark on MariaDB,
// or one above 2^53 on either, was a StaleTokenError naming it as the
// highest accepted (18446744073709551611 for -5).
func TestCorruptMarkRefused(t *testing.T) {
	forEach(t, func(t *testing.T, e engine) {
		ctx := testCtx(t)
		ddl := `(resource VARBINARY(512) NOT NULL PRIMARY KEY, token BIGINT) ENGINE=InnoDB`
		if e.d == sqlfence.SQLite {
			ddl = `(resource TEXT NOT NULL PRIMARY KEY, token INTEGER)`
		}
		if _, err := e.db.ExecContext(ctx, "CREATE TABLE ops "+ddl); err != nil {
			t.Fatal(err)
		}
		g := newGuard(t, e, sqlfence.WithTable("ops"))
		sqlguardtest.RefusesCorruptMarks(t, sqlguardtest.MarkTable{
			Put: func(res, mark string) error {
				_, err := e.db.ExecContext(ctx, "INSERT INTO ops (resource, token) VALUES (?, "+mark+")", res)
				return err
			},
			Stored: func(res string) (string, error) {
				var s sql.NullString
				err := e.db.QueryRowContext(ctx, "SELECT CAST(token AS CHAR) FROM ops WHERE resource = ?", res).Scan(&s)
				if !s.Valid {
					return "NULL", err
				}
				return s.String, err
			},
			Check: func(res string, tok lease.Token) error {
				return txGuard{e.db, g, nil}.Check(ctx, res, tok, func() error { return nil })
			},
			Highest: func(res string) (lease.Token, error) { return g.Highest(ctx, e.db, res) },
		})
	})
}

// TestSQLiteTempTableDoesNotShadowTheMarks: a TEMP table under the guard's
// name on the writer's connection (SQLite looks in temp before main) is
// not where Check looks. Before, the unqualified name found the TEMP
// table, empty, and token 5 was admitted after token 6 had committed.
func TestSQLiteTempTableDoesNotShadowTheMarks(t *testing.T) {
	e := engine{"sqlite", sqlfence.SQLite, openSQLite(t, "WAL")}
	ctx := testCtx(t)
	g := newGuard(t, e)
	if err := (txGuard{e.db, g, nil}).Check(ctx, "job", 6, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE TEMP TABLE lease_fence (resource TEXT PRIMARY KEY, token INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var stale *fence.StaleTokenError
	if err := g.Check(ctx, tx, "job", 5); !errors.As(err, &stale) || stale.Highest != 6 {
		t.Fatalf("token 5 after 6, with a TEMP lease_fence on the connection: %v, want stale with highest 6", err)
	}
}

// TestNewInATransactionOnMySQL: New given a *sql.Tx on MySQL, with its
// table missing, refuses (ErrInvalid) rather than run CREATE TABLE, which
// commits the caller's transaction then and there, leaving its connection
// in autocommit for every statement after (a Check included: its mark
// committed alone). Before, the caller's rollback found its insert already
// committed. With the table there, New in a transaction is fine.
func TestNewInATransactionOnMySQL(t *testing.T) {
	e := engine{"mariadb", sqlfence.MySQL, openMySQL(t)}
	ctx := testCtx(t)
	if _, err := e.db.ExecContext(ctx, `CREATE TABLE notes (id INT PRIMARY KEY) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO notes VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlfence.New(ctx, tx, e.d, sqlfence.WithTable("made_in_tx")); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New in a transaction, table missing: err = %v, want ErrInvalid", err)
	}
	_ = tx.Rollback()
	var n int
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM notes`).Scan(&n); err != nil || n != 0 {
		t.Errorf("after the caller's rollback, notes holds %d rows (%v): New committed its transaction", n, err)
	}
	newGuard(t, e, sqlfence.WithTable("made_in_tx"))
	tx, err = e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := sqlfence.New(ctx, tx, e.d, sqlfence.WithTable("made_in_tx")); err != nil {
		t.Errorf("New in a transaction, table there: %v", err)
	}
}
