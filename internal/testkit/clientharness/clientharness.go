// Package clientharness is what the Go tests of the clients in other
// languages (clients/python, clients/typescript) share: the client and
// the `lease` binary built once per test binary and removed after it
// (Build, Kit), the engines and servers their test runners and benchmark
// workers talk to (PostgresURL, MemServer, Serve), the environment a child
// is given (Env), and a child test runner or step run to its end with its
// output (Run, Step).
//
// What stays with each language is what is its own: how its package is
// built and tested (a wheel in a venv and pytest; tsc and node --test),
// and how its runner's summary says that tests passed.
package clientharness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/cli"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/leasehttp"
)

// LeaseBinary is the package of the `lease` binary every client's tests
// start.
const LeaseBinary = "github.com/leasehq/lease/cmd/lease"

// RunTimeout bounds a whole run of a test runner (Run).
const RunTimeout = 10 * time.Minute

// Build is what one language's tests need, made once per test binary by
// Make on first use (Get) and removed when the binary's tests end (Main).
type Build[T any] struct {
	// Lang names the language in failures: "python: …".
	Lang string
	// Make builds T in k. An error wrapped by Missing says a tool is
	// missing: the tests then skip under -short, and fail otherwise.
	Make func(k *Kit) (T, error)

	once sync.Once
	kit  *Kit
	out  T
	err  error
}

// Kit is where a Build makes what it makes: a temporary directory, go
// build, and what to remove at the end.
type Kit struct {
	dir      string
	cleanups []func()
}

// missingError is a tool that is not installed.
type missingError struct{ err error }

func (e missingError) Error() string { return e.err.Error() }
func (e missingError) Unwrap() error { return e.err }

// Missing marks err as a missing tool (an interpreter, node_modules): Get
// then skips under -short instead of failing.
func Missing(err error) error { return missingError{err} }

// Get returns what Make built, making it on the first call, or fails tb
// with Make's error (skips it under -short where a tool is missing).
func (b *Build[T]) Get(tb testing.TB) T {
	tb.Helper()
	b.once.Do(func() {
		b.kit = &Kit{}
		if b.out, b.err = b.Make(b.kit); b.err != nil {
			b.kit.clean()
		}
	})
	if b.err != nil {
		if errors.As(b.err, new(missingError)) && testing.Short() {
			tb.Skipf("%s: %v (skipped under -short)", b.Lang, b.err)
		}
		tb.Fatalf("%s: %v", b.Lang, b.err)
	}
	return b.out
}

// Main runs a client package's tests: with pgtest's throwaway PostgreSQL
// stopped and b's build removed after them, and goroutine leaks checked
// (goleak). It does not return.
func (b *Build[T]) Main(m *testing.M) { goleak.VerifyTestMain(mainRun{pgtest.M(m), b.clean}) }

// clean removes what Make made, if it ran.
func (b *Build[T]) clean() {
	if b.kit != nil {
		b.kit.clean()
	}
}

type mainRun struct {
	m     interface{ Run() int }
	after func()
}

func (r mainRun) Run() int {
	code := r.m.Run()
	r.after()
	return code
}

// Dir returns the kit's temporary directory, made on first use.
func (k *Kit) Dir() (string, error) {
	if k.dir != "" {
		return k.dir, nil
	}
	dir, err := os.MkdirTemp("", "lease-client-")
	if err != nil {
		return "", err
	}
	k.dir = dir
	k.Cleanup(func() { os.RemoveAll(dir) })
	return dir, nil
}

// Cleanup adds f to what is removed at the end, run last first.
func (k *Kit) Cleanup(f func()) { k.cleanups = append(k.cleanups, f) }

// GoBuild builds the Go program pkg into the kit's directory, named for
// the last element of its path, and returns the binary's path.
func (k *Kit) GoBuild(pkg string) (string, error) {
	dir, err := k.Dir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, path.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// Command runs name with args, and says what it printed if it fails.
func (k *Kit) Command(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %v\n%s", name, args, err, out)
	}
	return nil
}

func (k *Kit) clean() {
	for _, f := range slices.Backward(k.cleanups) {
		f()
	}
	k.cleanups = nil
}

// PostgresURL turns a connection string pgx reads (pgtest gives key=value
// pairs) into the URL that psycopg and node-postgres read.
func PostgresURL(tb testing.TB, dsn string) string {
	tb.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	u := url.URL{Scheme: "postgresql", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), Path: "/" + cfg.Database,
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

// Env is this process's environment with vars ("NAME=value") added, for
// a child: LEASE_TEST_BINARY, LEASE_TEST_POSTGRES_URL and the like.
func Env(vars ...string) []string { return append(os.Environ(), vars...) }

// Command is exec.Command for a child of tb, killed after RunTimeout or
// when tb ends.
func Command(tb testing.TB, name string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(tb.Context(), RunTimeout)
	tb.Cleanup(cancel)
	return exec.CommandContext(ctx, name, args...)
}

// Run runs cmd, a test runner of another language (made by Command), to
// its end, logs what it printed and returns it, with the error of its
// exit: the caller judges the runner's summary.
func Run(t *testing.T, name string, cmd *exec.Cmd) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s:\n%s", name, out.String())
	return out.String(), err
}

// Step runs cmd, one step of a test in another language that prints one
// JSON object, and returns the object; a failure or anything but JSON
// fails t. Its standard error goes to this process's.
func Step(t *testing.T, name string, cmd *exec.Cmd) map[string]any {
	t.Helper()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s printed %q: %v", name, out, err)
	}
	return v
}

// MemServer serves memstore through a leasehttp server until tb ends and
// returns its URL: where a client's own cost shows in a benchmark (lease
// serve has no memory store: it would lose tokens).
func MemServer(tb testing.TB) string {
	tb.Helper()
	api, err := leasehttp.NewServer(memtest.New(tb), leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(api)
	tb.Cleanup(func() {
		api.Close()
		hs.Close()
	})
	return hs.URL
}

// Serve starts lease serve in process with its defaults, on dataDir's
// embedded store or, where backend is not empty, on that engine's URL,
// closed when tb ends, and returns its URL.
func Serve(tb testing.TB, dataDir, backend string) string {
	tb.Helper()
	cfg := cli.DefaultServeConfig(dataDir, slog.New(slog.DiscardHandler))
	cfg.Backend = backend
	s, err := cli.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Run(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return "http://" + s.Addr()
}
