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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(removeBuild{pgtest.M(m)}) }

// removeBuild removes what build made once the tests are done.
type removeBuild struct{ m interface{ Run() int } }

func (r removeBuild) Run() int {
	code := r.m.Run()
	if buildOut != nil {
		buildOut.clean()
	}
	return code
}

// built is the compiled TypeScript and the Go programs its tests start,
// made once per test binary.
type built struct {
	js       string // tsc's output directory, inside the package (so node finds node_modules)
	lease    string // the lease binary
	fenced   string // the fenced-service binary
	node     string
	cleanups []func()
}

var (
	buildOnce sync.Once
	buildOut  *built
	buildErr  error
	buildSkip bool // buildErr is a missing tool: a skip under -short
)

// build compiles the tests and the servers, or fails t with how to get what is missing.
func build(t testing.TB) *built {
	t.Helper()
	buildOnce.Do(func() { buildOut, buildErr, buildSkip = doBuild() })
	if buildErr != nil {
		if buildSkip && testing.Short() {
			t.Skipf("typescript: %v (skipped under -short)", buildErr)
		}
		t.Fatalf("typescript: %v", buildErr)
	}
	return buildOut
}

func doBuild() (*built, error, bool) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node not found in PATH: install Node.js 20 or later (Debian: apt-get install nodejs npm)"), true
	}
	tsc := filepath.Join("node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		return nil, errors.New("clients/typescript/node_modules is missing: run `npm ci` in clients/typescript (make test does)"), true
	}
	b := &built{node: node}
	// Inside the package, so that node resolves pg from node_modules; the
	// leading dot keeps it out of the go command's sight (and .gitignore's).
	js, err := os.MkdirTemp(".", ".build-")
	if err != nil {
		return nil, err, false
	}
	b.cleanups = append(b.cleanups, func() { os.RemoveAll(js) })
	b.js = js
	if out, err := exec.Command(tsc, "-p", "tsconfig.json", "--outDir", js).CombinedOutput(); err != nil {
		b.clean()
		return nil, fmt.Errorf("tsc: %v\n%s", err, out), false
	}
	bin, err := os.MkdirTemp("", "lease-ts-bin-")
	if err != nil {
		b.clean()
		return nil, err, false
	}
	b.cleanups = append(b.cleanups, func() { os.RemoveAll(bin) })
	b.lease, b.fenced = filepath.Join(bin, "lease"), filepath.Join(bin, "fenced-service")
	for out, pkg := range map[string]string{b.lease: "github.com/leasehq/lease/cmd/lease", b.fenced: "github.com/leasehq/lease/examples/fenced-service"} {
		if msg, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			b.clean()
			return nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, msg), false
		}
	}
	return b, nil, false
}

func (b *built) clean() {
	for _, f := range slices.Backward(b.cleanups) {
		f()
	}
}

// nodeURL turns a connection string pgx reads (pgtest gives key=value
// pairs) into the URL node-postgres reads.
func nodeURL(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), Path: "/" + cfg.Database,
		RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	if cfg.TLSConfig != nil {
		u.RawQuery = ""
	}
	return u.String()
}

// TestNode runs every test of the TypeScript package under `node --test`
// against real servers: `lease serve` (started by the tests themselves),
// fence.Middleware (examples/fenced-service) and PostgreSQL.
func TestNode(t *testing.T) {
	b := build(t)
	pgURL := nodeURL(t, pgtest.Start(t))
	files, err := filepath.Glob(filepath.Join(b.js, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no compiled tests under %s (%v)", b.js, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Env = append(os.Environ(), "LEASE_TEST_BINARY="+b.lease, "LEASE_TEST_FENCED_SERVICE="+b.fenced, "LEASE_TEST_POSTGRES_URL="+pgURL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node --test:\n%s", out.String())
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
	if !strings.Contains(out.String(), "ℹ fail 0") {
		t.Fatalf("node --test ran, but its summary does not say 0 failed")
	}
}

// TestPgGuardInterop: Go's pgfence.UpdateRow and the TypeScript updateRow
// write one row in turns, each rejecting the other's stale token, and build
// the same statement.
func TestPgGuardInterop(t *testing.T) {
	b := build(t)
	dsn := pgtest.Start(t)
	pgURL := nodeURL(t, dsn)
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
		cmd := exec.CommandContext(ctx, b.node, filepath.Join(b.js, "test", "pg-step.js"), kind, "jobs", "1", fmt.Sprint(token), value, mode)
		cmd.Env = append(os.Environ(), "LEASE_TEST_POSTGRES_URL="+pgURL)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pg-step.js %s: %v", kind, err)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("pg-step.js %s printed %q: %v", kind, out, err)
		}
		return v
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
