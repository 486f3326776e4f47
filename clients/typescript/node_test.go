// Package typescript_test runs the TypeScript client's tests (clients/typescript/test,
// under `node --test`) as part of `go test ./...`: it compiles them with the
// package's own tsc, builds `lease serve` and examples/fenced-service for
// them to start, and gives them a throwaway PostgreSQL (internal/testkit/pgtest).
// It also checks that the TypeScript PostgreSQL guard and Go's pgfence
// guard one table alike.
//
// Node.js and the package's dependencies (`npm ci` here; `make test` runs
// it) must be installed: without them the tests fail with what to install,
// or skip under -short.
package typescript_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/clientharness"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

// build is the compiled TypeScript and the Go programs its tests start,
// made once per test binary.
var build = clientharness.Build[*built]{Lang: "typescript", Make: doBuild}

func TestMain(m *testing.M) { build.Main(m) }

// built is what doBuild made.
type built struct {
	js     string // tsc's output directory, inside the package (so node finds node_modules)
	lease  string // the lease binary
	fenced string // the fenced-service binary
	node   string
}

func doBuild(k *clientharness.Kit) (*built, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, clientharness.Missing(errors.New("node not found in PATH: install Node.js 20 or later (Debian: apt-get install nodejs npm)"))
	}
	tsc := filepath.Join("node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		return nil, clientharness.Missing(errors.New("clients/typescript/node_modules is missing: run `npm ci` in clients/typescript (make test does)"))
	}
	b := &built{node: node}
	// Inside the package, so that node resolves pg from node_modules; the
	// leading dot keeps it out of the go command's sight (and .gitignore's).
	if b.js, err = os.MkdirTemp(".", ".build-"); err != nil {
		return nil, err
	}
	k.Cleanup(func() { os.RemoveAll(b.js) })
	if err := k.Command(tsc, "-p", "tsconfig.json", "--outDir", b.js); err != nil {
		return nil, err
	}
	if b.lease, err = k.GoBuild(clientharness.LeaseBinary); err != nil {
		return nil, err
	}
	if b.fenced, err = k.GoBuild("github.com/leasehq/lease/examples/fenced-service"); err != nil {
		return nil, err
	}
	return b, nil
}

// TestNode runs every test of the TypeScript package under `node --test`
// against real servers: `lease serve` (started by the tests themselves),
// fence.Middleware (examples/fenced-service) and PostgreSQL.
func TestNode(t *testing.T) {
	b := build.Get(t)
	pgURL := clientharness.PostgresURL(t, pgtest.Start(t))
	files, err := filepath.Glob(filepath.Join(b.js, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no compiled tests under %s (%v)", b.js, err)
	}
	cmd := clientharness.Command(t, b.node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Env = clientharness.Env("LEASE_TEST_BINARY="+b.lease, "LEASE_TEST_FENCED_SERVICE="+b.fenced, "LEASE_TEST_POSTGRES_URL="+pgURL)
	out, err := clientharness.Run(t, "node --test", cmd)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
	if !strings.Contains(out, "ℹ fail 0") {
		t.Fatalf("node --test ran, but its summary does not say 0 failed")
	}
}

// TestPgGuardInterop: Go's pgfence.UpdateRow and the TypeScript updateRow
// write one row in turns, each rejecting the other's stale token, and build
// the same statement.
func TestPgGuardInterop(t *testing.T) {
	b := build.Get(t)
	dsn := pgtest.Start(t)
	pgURL := clientharness.PostgresURL(t, dsn)
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
	step := func(kind string, token int, value string, mode string) map[string]any {
		t.Helper()
		cmd := clientharness.Command(t, b.node, filepath.Join(b.js, "test", "pg-step.js"), kind, "jobs", "1", fmt.Sprint(token), value, mode)
		cmd.Env = clientharness.Env("LEASE_TEST_POSTGRES_URL=" + pgURL)
		return clientharness.Step(t, "pg-step.js "+kind, cmd)
	}
	goWrite := func(token lease.Token, value string, mode fence.Mode) error {
		return pgfence.UpdateRow(ctx, conn, pgfence.Update{Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: 1,
			TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": value}, Mode: mode})
	}
	read := func() (string, int64) {
		var v string
		var tok int64
		if err := conn.QueryRow(ctx, `SELECT value, fencing_token FROM jobs WHERE id = 1`).Scan(&v, &tok); err != nil {
			t.Fatal(err)
		}
		return v, tok
	}

	// The same statement, both sides, in both modes.
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		sql, args, err := pgfence.Update{Table: pgx.Identifier{"jobs"}, IDColumn: "id", ID: 1, TokenColumn: "fencing_token",
			Token: 5, Set: map[string]any{"value": "v"}, Mode: mode}.SQL()
		if err != nil {
			t.Fatal(err)
		}
		ts := step("sql", 5, "v", mode.String())
		if ts["text"] != sql {
			t.Errorf("%s: TypeScript builds\n%v\nGo builds\n%s", mode, ts["text"], sql)
		}
		if want := []any{"v", float64(5), float64(1)}; !reflect.DeepEqual(ts["values"], want) || len(args) != 3 {
			t.Errorf("%s: TypeScript arguments %v, want %v (Go: %v)", mode, ts["values"], want, args)
		}
	}

	if err := goWrite(5, "go-5", fence.AtLeast); err != nil {
		t.Fatalf("Go writes token 5: %v", err)
	}
	if got := step("write", 4, "ts-4", "at-least"); got["written"] != false || got["highest"] != float64(5) {
		t.Fatalf("TypeScript writes token 4 after Go's 5: %v, want refused with highest 5", got)
	}
	if got := step("write", 6, "ts-6", "at-least"); got["written"] != true {
		t.Fatalf("TypeScript writes token 6 after Go's 5: %v, want written", got)
	}
	var stale *fence.StaleTokenError
	if err := goWrite(5, "go-late", fence.AtLeast); !errors.As(err, &stale) || stale.Highest != 6 {
		t.Fatalf("Go writes token 5 after TypeScript's 6: %v, want a StaleTokenError with highest 6", err)
	}
	if got := step("write", 6, "ts-6-again", "strict"); got["written"] != false || got["highest"] != float64(6) {
		t.Fatalf("TypeScript writes token 6 again in strict mode: %v, want refused", got)
	}
	if v, tok := read(); v != "ts-6" || tok != 6 {
		t.Fatalf("the row is %q with token %d, want ts-6 with 6", v, tok)
	}
}
