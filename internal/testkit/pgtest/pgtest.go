// Package pgtest gives tests a real PostgreSQL: Start returns the connection
// string of a fresh database on one throwaway cluster per test binary, or on
// the server named by LEASE_TEST_POSTGRES_URL when that is set.
//
// The throwaway cluster is initialised with initdb in a temporary directory,
// runs as the postgres user when the tests run as root (initdb and postgres
// refuse to run as root), listens on a free 127.0.0.1 port with its unix
// socket inside the temporary directory, and keeps PostgreSQL's durability
// defaults: fsync = on and synchronous_commit = on, set explicitly so that
// measurements against it mean what they say. Only initdb's one-off sync of
// the fresh data directory is skipped (--no-sync): it protects nothing a
// throwaway cluster needs.
//
// Packages that use Start run their tests through Main (or M with goleak):
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// which stops the cluster and removes its directory when the tests are done.
// The server is also started with a parent-death signal, so it cannot outlive
// a test binary that crashes or is killed on timeout.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease/internal/testkit/serverproc"
)

// EnvURL names the environment variable that points the tests at an existing
// server instead of a throwaway cluster, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable. The role must
// be allowed to create databases; each Start creates one and drops it in
// cleanup.
const EnvURL = "LEASE_TEST_POSTGRES_URL"

// binGlob is where Debian's postgresql packages put the server binaries.
const binGlob = "/usr/lib/postgresql/*/bin"

// installHint is how to get the binaries on the machines this project runs on.
const installHint = "apt-get install postgresql (or set " + EnvURL + " to a server's URL)"

// cluster is this test binary's throwaway cluster.
var cluster = &serverproc.Shared[*server]{Name: "pgtest", Start: startCluster}

// server is a throwaway cluster.
type server struct {
	dir   string // temporary directory, removed by Stop
	port  int
	admin string // connection string of the postgres database
	proc  *serverproc.Process
}

func (s *server) Process() *serverproc.Process { return s.proc }
func (s *server) LogPath() string              { return filepath.Join(s.dir, "postgres.log") }

// Start returns the connection string of a database nobody else uses, on the
// shared throwaway cluster (started on first use) or on the server named by
// LEASE_TEST_POSTGRES_URL. Missing server binaries fail the test with an
// install hint, or skip it under -short.
func Start(t testing.TB) string {
	t.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		return createDatabase(t, url, true)
	}
	srv := cluster.Get(t)
	// The cluster goes away as a whole, so its databases need no dropping.
	return createDatabase(t, srv.admin, false)
}

// M wraps m so that Run stops the throwaway cluster after the tests, for use
// with wrappers such as goleak.VerifyTestMain(pgtest.M(m)).
func M(m *testing.M) interface{ Run() int } { return serverproc.M(m, Stop) }

// Main runs the tests, stops the throwaway cluster and exits.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// Stop shuts the throwaway cluster down (fast shutdown) and removes its
// directory. Main calls it; calling it again, or without a cluster, does
// nothing. A later Start starts a new cluster.
func Stop() error { return cluster.Stop() }

// Stop shuts the cluster down and removes its directory.
func (s *server) Stop() error {
	// Fast shutdown (disconnect clients, checkpoint, exit), else immediate.
	err := s.proc.Stop(syscall.SIGINT, 30*time.Second, syscall.SIGQUIT)
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("pgtest: removing %s: %w", s.dir, rmErr)
	}
	return err
}

// errMissing marks a start failure caused by missing binaries.
var errMissing = fmt.Errorf("PostgreSQL %w", serverproc.ErrMissing)

func startCluster() (*server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := serverproc.RunAs("postgres", installHint)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	srv, err := startIn(dir, bin, cred)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return srv, nil
}

// findBin returns the newest /usr/lib/postgresql/N/bin holding initdb and
// postgres, or the directory of initdb found on PATH.
func findBin() (string, error) {
	dirs, _ := filepath.Glob(binGlob)
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && executable(filepath.Join(filepath.Dir(p), "postgres")) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("%w in %s or on PATH: %s", errMissing, binGlob, installHint)
}

// version is the N of /usr/lib/postgresql/N/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func startIn(dir, bin string, cred *syscall.Credential, settings ...string) (*server, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: giving %s to the postgres user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data,
		"--auth=trust", "-U", "postgres", "--encoding=UTF8", "--locale=C",
		"--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	// A port that was free a moment ago may be taken by the time the server
	// binds it (other test binaries start clusters too): try a few.
	var lastErr error
	for range 5 {
		port, err := serverproc.FreePort()
		if err != nil {
			return nil, err
		}
		srv, err := launch(dir, bin, data, port, cred, settings...)
		if err == nil {
			return srv, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// launch starts the postmaster in the foreground as our child and waits until
// it accepts connections. settings ("name=value") come after the defaults,
// so they override them.
func launch(dir, bin, data string, port int, cred *syscall.Credential, settings ...string) (*server, error) {
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer logFile.Close()
	args := []string{"-D", data,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + dir,
		// Durability exactly as PostgreSQL ships it, stated rather than assumed.
		"-c", "fsync=on",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=on",
		// Room for the benchmarks' 32 clients and parallel test packages.
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
		"-c", "timezone=UTC",
	}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SIGQUIT (immediate shutdown) if this test binary dies without Stop.
	proc, err := serverproc.Start(cmd, cred, syscall.SIGQUIT)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	srv := &server{dir: dir, port: port, proc: proc,
		admin: fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", port)}
	if err := proc.WaitReady(60*time.Second, srv.ping); err != nil {
		_ = proc.Signal(syscall.SIGQUIT)
		<-proc.Exited()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("pgtest: %w\n%s", err, serverproc.Tail(log))
	}
	return srv, nil
}

// ping connects and answers a ping.
func (s *server) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// createDatabase creates a database with a random name through the server at
// adminURL and returns its connection string. With drop, cleanup drops it.
func createDatabase(t testing.TB, adminURL string, drop bool) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		t.Fatalf("pgtest: parsing %s: %v", EnvURL, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "pgtest_" + strings.ToLower(sanitize(t.Name())) + "_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s:%d: %v", cfg.Host, cfg.Port, err)
	}
	defer conn.Close(ctx)
	// template0 with UTF8 and the C collation: keys compare byte-wise, as
	// in Go, whatever the server's defaults are.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
		" TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	if drop {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Errorf("pgtest: connecting to drop %s: %v", name, err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Errorf("pgtest: dropping database %s: %v", name, err)
			}
		})
	}
	withDB, err := withDatabase(adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return withDB
}

// withDatabase returns connString naming database name instead, keeping every
// other setting (TLS, password, options) as given.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parsing %s: %w", EnvURL, err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	// In a key/value string the last setting of a keyword wins.
	return connString + " dbname='" + name + "'", nil
}

// sanitize keeps the letters and digits of a test name, for database names
// that say which test made them. PostgreSQL names are at most 63 bytes.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	if b.Len() > 32 {
		return strings.Trim(b.String()[:32], "_")
	}
	return strings.Trim(b.String(), "_")
}

// Tool returns the path of PostgreSQL's client program name (pg_dump,
// pg_restore, …): the one beside the server binaries Start uses, else the
// one on PATH. A missing program fails the test with an install hint.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if dir, err := findBin(); err == nil && executable(filepath.Join(dir, name)) {
		return filepath.Join(dir, name)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("pgtest: %s not found in %s or on PATH: apt-get install postgresql-client", name, binGlob)
	return ""
}
