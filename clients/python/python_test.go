// Package python_test runs the Python client's tests (clients/python/tests,
// under pytest) as part of `go test ./...`: it builds the wheel with
// Debian's build tools and no network (`python3 -m build --no-isolation
// --wheel`), installs it into a fresh venv (with the system's site packages,
// where pytest and psycopg are), builds `lease serve` for the tests to start,
// gives them a throwaway PostgreSQL (internal/testkit/pgtest) and runs pytest
// against the installed copy. It also checks that the Python PostgreSQL guard
// and Go's pgfence guard one table alike, both ways.
//
// Python 3.11 or later with build, venv, pytest and psycopg must be
// installed (scripts/deps.sh does it): without them the tests fail with what
// to install, or skip under -short.
package python_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/sqlguard"
	"github.com/leasehq/lease/internal/testkit/clientharness"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

// build is the installed wheel and the lease binary, made once per test
// binary.
var build = clientharness.Build[*built]{Lang: "python", Make: doBuild}

func TestMain(m *testing.M) { build.Main(m) }

// built is what doBuild made.
type built struct {
	python string // the venv's interpreter, with the wheel installed
	lease  string
}

// pythonModules are what building, installing and testing need.
const pythonModules = "import sys, build, setuptools, wheel, venv, ensurepip, pytest, psycopg; assert sys.version_info >= (3, 11)"

// Interpreter returns a Python that has pythonModules: $LEASE_PYTHON, else
// python3 on PATH, else Debian's /usr/bin/python3 (a python3 on PATH from
// pyenv or a venv may lack Debian's packages).
func Interpreter() (string, error) {
	cands := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("LEASE_PYTHON"); p != "" {
		cands = []string{p}
	}
	for _, c := range cands {
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", pythonModules).Run() == nil {
			return p, nil
		}
	}
	return "", errors.New("no Python 3.11+ with build, setuptools, wheel, venv, pytest and psycopg: " +
		"run scripts/deps.sh (Debian: apt-get install python3-build python3-venv python3-setuptools python3-wheel python3-pytest python3-psycopg), " +
		"or point LEASE_PYTHON at one")
}

func doBuild(k *clientharness.Kit) (*built, error) {
	py, err := Interpreter()
	if err != nil {
		return nil, clientharness.Missing(err)
	}
	dir, err := k.Dir()
	if err != nil {
		return nil, err
	}
	// Built from a copy, so that setuptools' build/ and egg-info never land
	// in the source tree (and two test runs never share them).
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{"pyproject.toml", "README.md", "src"} {
		if err := k.Command("cp", "-r", f, filepath.Join(src, f)); err != nil {
			return nil, err
		}
	}
	dist, venv := filepath.Join(dir, "dist"), filepath.Join(dir, "venv")
	if err := k.Command(py, "-m", "build", "--no-isolation", "--wheel", "--outdir", dist, src); err != nil {
		return nil, err
	}
	if err := k.Command(py, "-m", "venv", "--system-site-packages", venv); err != nil {
		return nil, err
	}
	wheels, _ := filepath.Glob(filepath.Join(dist, "leasehq_lease-*.whl"))
	if len(wheels) != 1 {
		return nil, fmt.Errorf("python -m build made %d wheels, want 1", len(wheels))
	}
	b := &built{python: filepath.Join(venv, "bin", "python")}
	if err := k.Command(b.python, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", wheels[0]); err != nil {
		return nil, err
	}
	if b.lease, err = k.GoBuild(clientharness.LeaseBinary); err != nil {
		return nil, err
	}
	return b, nil
}

// pytestSummary is pytest's last line, e.g. "===== 42 passed in 9.1s =====".
var pytestSummary = regexp.MustCompile(`(?m)^=+ (.*\b(\d+) passed.*) =+$`)

// pytestFirstHalf are the test files one pytest runs while another runs
// the rest: the suite mostly waits (for TTLs, renewals, servers), 170 s of
// it on 2026-12-07 for under a minute of processor, and these three took
// about half of it. A new file goes with the rest.
var pytestFirstHalf = []string{"test_client.py", "test_async.py", "test_election.py"}

// TestPytest runs every test of the Python package under pytest, against
// the installed wheel, real lease serve processes and PostgreSQL: two
// pytest processes side by side, each over its share of the files.
func TestPytest(t *testing.T) {
	b := build.Get(t)
	dsn := pgtest.Start(t)
	tests, err := filepath.Abs("tests")
	if err != nil {
		t.Fatal(err)
	}
	all, err := filepath.Glob(filepath.Join(tests, "test_*.py"))
	if err != nil || len(all) == 0 {
		t.Fatalf("no test files under %s (%v)", tests, err)
	}
	var first, rest []string
	for _, f := range all {
		if slices.Contains(pytestFirstHalf, filepath.Base(f)) {
			first = append(first, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(first) != len(pytestFirstHalf) {
		t.Fatalf("of %v, only %v are under %s", pytestFirstHalf, first, tests)
	}
	env := clientharness.Env("LEASE_TEST_BINARY="+b.lease, "LEASE_TEST_POSTGRES_URL="+clientharness.PostgresURL(t, dsn),
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+tests)
	for name, files := range map[string][]string{"client-async-election": first, "rest": rest} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// -p no:cacheprovider: no .pytest_cache in the source tree. The
			// working directory is the venv's, so that nothing imports the
			// source tree; --rootdir keeps conftest.py's directory the root.
			cmd := clientharness.Command(t, b.python, append([]string{"-m", "pytest", "-p", "no:cacheprovider", "-rfEs", "-v",
				"--rootdir", tests}, files...)...)
			cmd.Dir = filepath.Dir(b.python)
			cmd.Env = env
			out, err := clientharness.Run(t, "pytest", cmd)
			var exit *exec.ExitError
			switch {
			case errors.As(err, &exit) && exit.ExitCode() == 5:
				t.Fatal("pytest collected no tests (exit 5)")
			case err != nil:
				t.Fatalf("pytest: %v", err)
			}
			m := pytestSummary.FindStringSubmatch(out)
			if m == nil || m[2] == "0" || strings.Contains(m[1], "failed") || strings.Contains(m[1], "error") {
				t.Fatalf("pytest ran, but its summary does not say tests passed and none failed: %q", m)
			}
		})
	}
}

// TestPgGuardInterop: Go's pgfence (Guard.Check on its table, and UpdateRow)
// and the Python guard (PgGuard.check, update_row) write one resource in
// turns, each refusing the other's stale token, and build the same
// UpdateRow statement.
func TestPgGuardInterop(t *testing.T) {
	b := build.Get(t)
	dsn := pgtest.Start(t)
	url := clientharness.PostgresURL(t, dsn)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE jobs (id int PRIMARY KEY, value text NOT NULL, fencing_token bigint);
		INSERT INTO jobs VALUES (1, 'initial', NULL)`); err != nil {
		t.Fatal(err)
	}
	step := func(args ...string) map[string]any {
		t.Helper()
		cmd := clientharness.Command(t, b.python, append([]string{filepath.Join("tests", "pg_step.py")}, args...)...)
		cmd.Env = clientharness.Env("LEASE_TEST_POSTGRES_URL=" + url)
		return clientharness.Step(t, fmt.Sprintf("pg_step.py %v", args), cmd)
	}
	tok := func(n lease.Token) string { return fmt.Sprint(n) }

	// The same UPDATE both sides, in both modes.
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		sql, _, err := pgfence.Update{Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: 1, TokenColumn: "fencing_token",
			Token: 5, Set: map[string]any{"value": "v"}, Mode: mode}.SQL()
		if err != nil {
			t.Fatal(err)
		}
		if py := step("sql", "5", "v", mode.String()); py["text"] != sql {
			t.Errorf("%s: Python builds\n%v\nGo builds\n%s", mode, py["text"], sql)
		}
	}

	// update_row against pgfence.UpdateRow on one row.
	goWrite := func(token lease.Token, value string, mode fence.Mode) error {
		return pgfence.UpdateRow(ctx, conn, pgfence.Update{Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: 1,
			TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": value}, Mode: mode})
	}
	if err := goWrite(5, "go-5", fence.AtLeast); err != nil {
		t.Fatalf("Go writes token 5: %v", err)
	}
	if got := step("row", tok(4), "py-4", "at-least"); got["written"] != false || got["highest"] != float64(5) {
		t.Fatalf("Python writes token 4 after Go's 5: %v, want refused with highest 5", got)
	}
	if got := step("row", tok(6), "py-6", "at-least"); got["written"] != true {
		t.Fatalf("Python writes token 6 after Go's 5: %v, want written", got)
	}
	var stale *fence.StaleTokenError
	if err := goWrite(5, "go-late", fence.AtLeast); !errors.As(err, &stale) || stale.Highest != 6 {
		t.Fatalf("Go writes token 5 after Python's 6: %v, want a StaleTokenError with highest 6", err)
	}
	if got := step("row", tok(6), "py-6-again", "strict"); got["written"] != false || got["highest"] != float64(6) {
		t.Fatalf("Python writes token 6 again in strict mode: %v, want refused", got)
	}
	var v string
	if err := conn.QueryRow(ctx, `SELECT value FROM jobs WHERE id = 1`).Scan(&v); err != nil || v != "py-6" {
		t.Fatalf("the row is %q (%v), want py-6", v, err)
	}

	// PgGuard.check against pgfence's Guard.Check on its own table: Python
	// creates it first, Go uses it, and the other way round on a second table.
	for _, first := range []string{"python", "go"} {
		table := "fence_" + first + "_first"
		newGo := func() *pgfence.Guard {
			g, err := pgfence.New(ctx, conn, pgfence.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		var g *pgfence.Guard
		if first == "go" {
			g = newGo()
		}
		goCheck := func(token lease.Token) error {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if err := g.Check(ctx, tx, "job/42", token); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
		if got := step("check", table, tok(3), "at-least"); got["written"] != true {
			t.Fatalf("%s first: Python checks token 3: %v", first, got)
		}
		if g == nil {
			g = newGo()
		}
		if err := goCheck(2); !errors.As(err, &stale) || stale.Highest != 3 {
			t.Fatalf("%s first: Go checks token 2 after Python's 3: %v, want stale with highest 3", first, err)
		}
		if err := goCheck(7); err != nil {
			t.Fatalf("%s first: Go checks token 7: %v", first, err)
		}
		if got := step("check", table, tok(6), "at-least"); got["written"] != false || got["highest"] != float64(7) {
			t.Fatalf("%s first: Python checks token 6 after Go's 7: %v, want refused with highest 7", first, got)
		}
		if got := step("check", table, tok(7), "strict"); got["written"] != false {
			t.Fatalf("%s first: Python checks token 7 again in strict mode: %v, want refused", first, got)
		}
		if h, err := g.Highest(ctx, conn, "job/42"); err != nil || h != 7 {
			t.Fatalf("%s first: highest is %d (%v), want 7", first, h, err)
		}
	}

	// PgGuard.upsert_sql is the statement pgfence's Check sends, in each
	// mode: pgx prepared it on conn, and PostgreSQL keeps its text. The
	// table's name has a "%", which psycopg reads as a placeholder unless
	// PgGuard doubles it, and a quote and a backslash, which the regclass
	// literal escapes.
	const sqlTable = `fence%s'\_sql`
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		g, err := pgfence.New(ctx, conn, pgfence.WithTable(sqlTable), pgfence.WithMode(mode))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx, tx, "job/sql-"+mode.String(), 1); err != nil {
			t.Fatalf("%s: Go checks token 1: %v", mode, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var sent string
		if err := conn.QueryRow(ctx, `SELECT statement FROM pg_prepared_statements
			WHERE statement LIKE 'INSERT INTO %' AND strpos(statement, $1) > 0 AND strpos(statement, $2) > 0`,
			`"`+sqlTable+`"`, "f.token "+sqlguard.Cmp(mode)+" EXCLUDED.token").Scan(&sent); err != nil {
			t.Fatalf("%s: finding the upsert Go sent: %v", mode, err)
		}
		if py := step("upsert", sqlTable, mode.String()); py["text"] != sent {
			t.Errorf("%s: Python's upsert_sql is\n%v\nGo's Check sent\n%s", mode, py["text"], sent)
		}
	}
}
