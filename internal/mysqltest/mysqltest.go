// Package mysqltest gives tests a real MariaDB: Start returns the DSN
// (github.com/go-sql-driver/mysql format) of a fresh database on one
// throwaway server per test binary, or on the server named by
// LEASE_TEST_MYSQL_DSN when that is set.
//
// The throwaway server is Debian's mariadb-server: mariadb-install-db makes
// a data directory in a temporary directory, and mariadbd runs on it as the
// mysql user when the tests run as root (mariadbd refuses root), listening
// on a free 127.0.0.1 port, with its unix socket in the temporary
// directory. It keeps InnoDB's durability defaults
// (innodb_flush_log_at_trx_commit = 1, the doublewrite buffer on), set
// explicitly so that measurements against it mean what they say, and
// MariaDB's default isolation, REPEATABLE READ. Its character set is
// utf8mb4 with the binary collation, so that text compares byte-wise, as in
// Go. Tests connect as a user of their own (not root) that has all
// privileges on its databases and PROCESS, to see lock waits (SHOW ENGINE
// INNODB STATUS).
//
// Packages that use Start run their tests through Main (or M with goleak):
//
//	func TestMain(m *testing.M) { mysqltest.Main(m) }
//
// which stops the server and removes its directory when the tests are done.
// The server is also started with a parent-death signal, so it cannot
// outlive a test binary that crashes or is killed on timeout.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// EnvDSN names the environment variable that points tests at an existing
// server instead of a throwaway one: a go-sql-driver/mysql DSN such as
// root:secret@tcp(127.0.0.1:3306)/. Its user must be allowed to create and
// drop databases (and, for the tests that watch lock waits, hold PROCESS);
// each Start creates a database and drops it in cleanup.
const EnvDSN = "LEASE_TEST_MYSQL_DSN"

// installHint is how to get the binaries on the machines this project runs on.
const installHint = "apt-get install mariadb-server (or set " + EnvDSN + " to a server's DSN)"

// binDirs are searched for the server binaries after PATH: Debian puts
// mariadbd in /usr/sbin, which a non-root PATH may lack.
var binDirs = []string{"/usr/sbin", "/usr/bin"}

// testUser is the account tests connect as on the throwaway server.
const testUser = "lease"

var (
	mu      sync.Mutex
	shared  *server // nil until the first Start
	initErr error   // a failed start is not retried: every test would repeat it
	skipErr bool    // initErr is a missing binary
)

// server is the throwaway MariaDB of this test binary.
type server struct {
	dir      string // temporary directory, removed by stop
	port     int
	admin    string        // DSN of root over the unix socket
	password string        // testUser's
	exited   chan struct{} // closed when mariadbd has exited
	proc     *os.Process
	err      error // mariadbd's exit, valid after exited is closed
}

// Start returns the DSN of a database nobody else uses, on the shared
// throwaway server (started on first use) or on the server named by
// LEASE_TEST_MYSQL_DSN. Missing server binaries fail the test with an
// install hint, or skip it under -short.
func Start(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("mysqltest: parsing %s: %v", EnvDSN, err)
		}
		name := createDatabase(t, cfg, "")
		t.Cleanup(func() { dropDatabase(t, cfg, name) })
		cfg.DBName = name
		return cfg.FormatDSN()
	}
	mu.Lock()
	if shared == nil && initErr == nil {
		shared, initErr = startServer()
	}
	srv, err, missing := shared, initErr, skipErr
	mu.Unlock()
	if err != nil {
		if missing && testing.Short() {
			t.Skipf("mysqltest: %v", err)
		}
		t.Fatalf("mysqltest: %v", err)
	}
	select {
	case <-srv.exited:
		t.Fatalf("mysqltest: the throwaway MariaDB has exited: %v (log: %s)", srv.err, filepath.Join(srv.dir, "mariadb.log"))
	default:
	}
	admin, err := mysql.ParseDSN(srv.admin)
	if err != nil {
		t.Fatal(err)
	}
	// The server goes away as a whole, so its databases need no dropping.
	name := createDatabase(t, admin, testUser+"@127.0.0.1")
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = testUser, srv.password
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.port))
	cfg.DBName = name
	return cfg.FormatDSN()
}

// M wraps m so that Run stops the throwaway server after the tests, for use
// with wrappers such as goleak.VerifyTestMain(mysqltest.M(m)).
func M(m interface{ Run() int }) interface{ Run() int } { return runner{m} }

type runner struct{ m interface{ Run() int } }

func (r runner) Run() int {
	code := r.m.Run()
	if err := Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Main runs the tests, stops the throwaway server and exits.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// Stop shuts the throwaway server down and removes its directory. Main
// calls it; calling it again, or without a server, does nothing. A later
// Start starts a new server.
func Stop() error {
	mu.Lock()
	srv := shared
	shared, initErr, skipErr = nil, nil, false
	mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.stop()
}

func (s *server) stop() error {
	_ = s.proc.Signal(syscall.SIGTERM) // normal shutdown
	var err error
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.proc.Kill()
		<-s.exited
		err = errors.New("mysqltest: MariaDB took more than 30 s to shut down")
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("mysqltest: removing %s: %w", s.dir, rmErr)
	}
	return err
}

// errMissing marks a start failure caused by missing binaries.
var errMissing = errors.New("MariaDB server binaries not found")

func startServer() (*server, error) {
	installDB, err := findBin("mariadb-install-db")
	if err != nil {
		skipErr = true
		return nil, err
	}
	mariadbd, err := findBin("mariadbd")
	if err != nil {
		skipErr = true
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mysqltest-")
	if err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	srv, err := startIn(dir, installDB, mariadbd, cred)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return srv, nil
}

// findBin looks for name on PATH, then in binDirs.
func findBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range binDirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no %s on PATH or in %s: %s", errMissing, name, strings.Join(binDirs, ", "), installHint)
}

// runAs returns the credentials to run the server with: the mysql user when
// we are root, since mariadbd refuses to run as root; nil otherwise.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("mysqltest: running as root needs a mysql user to run the server as: %v; %s", err, installHint)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("mysqltest: mysql user has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// serverArgs are mariadbd's settings besides the paths and the port, also
// given to mariadb-install-db so that the files it makes fit them.
var serverArgs = []string{
	// Durability as MariaDB ships it, stated rather than assumed.
	"--innodb-flush-log-at-trx-commit=1",
	"--innodb-doublewrite=1",
	"--skip-log-bin",
	// Smaller than the defaults (128 MiB, 96 MiB): a throwaway server.
	"--innodb-buffer-pool-size=64M",
	"--innodb-log-file-size=16M",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_bin",
	"--skip-name-resolve",
	// Room for the benchmarks' clients and parallel test packages.
	"--max-connections=200",
}

func startIn(dir, installDB, mariadbd string, cred *syscall.Credential) (*server, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("mysqltest: giving %s to the mysql user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	// Root on this server authenticates by password, which is empty: it is
	// reachable only through the socket in dir, and only to make the test
	// user and the databases.
	install := exec.Command(installDB, append([]string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, serverArgs...)...)
	install.Dir = dir
	install.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	install.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mysqltest: mariadb-install-db: %v\n%s", err, lastBytes(out))
	}
	// A port that was free a moment ago may be taken by the time the server
	// binds it (other test binaries start servers too): try a few.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		srv, err := launch(dir, mariadbd, data, port, cred)
		if err == nil {
			return srv, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("mysqltest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts mariadbd as our child, waits until it answers and makes
// the test user.
func launch(dir, mariadbd, data string, port int, cred *syscall.Credential) (*server, error) {
	logPath := filepath.Join(dir, "mariadb.log")
	sock := filepath.Join(dir, "mysqld.sock")
	args := append([]string{"--no-defaults", "--datadir=" + data,
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--socket=" + sock,
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"), "--log-error=" + logPath, "--tmpdir=" + dir},
		serverArgs...)
	cmd := exec.Command(mariadbd, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	// SIGKILL if this test binary dies without Stop: the data is throwaway.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}

	admin := mysql.NewConfig()
	admin.User, admin.Net, admin.Addr = "root", "unix", sock
	srv := &server{dir: dir, port: port, exited: make(chan struct{}), admin: admin.FormatDSN()}
	started := make(chan error, 1)
	// The parent-death signal fires when the OS thread that forked the child
	// exits, not the process: fork from a locked thread that lives as long as
	// the server does.
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("mysqltest: starting mariadbd: %w", err)
			runtime.UnlockOSThread()
			return
		}
		srv.proc = cmd.Process
		started <- nil
		srv.err = cmd.Wait()
		close(srv.exited)
		// Returning while locked ends this thread, which is what we want.
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	err := srv.waitReady(60 * time.Second)
	if err == nil {
		err = srv.createUser()
	}
	if err != nil {
		_ = srv.proc.Kill()
		<-srv.exited
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w\n%s", err, lastBytes(log))
	}
	return srv, nil
}

// waitReady polls until the server answers a ping, or it exits.
func (s *server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	db, err := sql.Open("mysql", s.admin)
	if err != nil {
		return fmt.Errorf("mysqltest: %w", err)
	}
	defer db.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("mysqltest: mariadbd exited during startup: %v", s.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mysqltest: mariadbd not ready after %v: %w", limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// createUser makes the account tests connect as, over TCP from loopback,
// with a random password and PROCESS (which SHOW ENGINE INNODB STATUS
// needs); Start grants it each database.
func (s *server) createUser() error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	s.password = hex.EncodeToString(b[:])
	db, err := sql.Open("mysql", s.admin)
	if err != nil {
		return fmt.Errorf("mysqltest: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, stmt := range []string{
		"CREATE USER '" + testUser + "'@'127.0.0.1' IDENTIFIED BY '" + s.password + "'",
		"GRANT PROCESS ON *.* TO '" + testUser + "'@'127.0.0.1'",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("mysqltest: %s: %w", stmt, err)
		}
	}
	return nil
}

// lastBytes is the end of a log, enough to say why a start failed.
func lastBytes(log []byte) []byte { return log[max(0, len(log)-2000):] }

// createDatabase creates a database with a random name, utf8mb4 with the
// binary collation, through the server cfg names, and returns its name.
// With grantee ('user'@'host'), that account gets all privileges on it.
func createDatabase(t testing.TB, cfg *mysql.Config, grantee string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "mysqltest_" + hex.EncodeToString(b[:])
	admin := cfg.Clone()
	admin.DBName = ""
	db := open(t, admin)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("mysqltest: creating database %s: %v", name, err)
	}
	if grantee != "" {
		account, host, _ := strings.Cut(grantee, "@")
		if _, err := db.ExecContext(ctx, "GRANT ALL PRIVILEGES ON `"+name+"`.* TO '"+account+"'@'"+host+"'"); err != nil {
			t.Fatalf("mysqltest: granting %s to %s: %v", name, grantee, err)
		}
	}
	return name
}

func dropDatabase(t testing.TB, cfg *mysql.Config, name string) {
	admin := cfg.Clone()
	admin.DBName = ""
	db := open(t, admin)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		t.Errorf("mysqltest: dropping database %s: %v", name, err)
	}
}

func open(t testing.TB, cfg *mysql.Config) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	return sql.OpenDB(connector)
}
