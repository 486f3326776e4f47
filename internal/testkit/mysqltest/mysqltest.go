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
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leasehq/lease/internal/testkit/serverproc"
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

// shared is this test binary's throwaway server.
var shared = &serverproc.Shared[*server]{Name: "mysqltest", Start: startServer}

// server is a throwaway MariaDB.
type server struct {
	dir      string // temporary directory, removed by stop
	port     int
	admin    *mysql.Config // root over the unix socket
	password string        // testUser's
	proc     *serverproc.Process
}

func (s *server) Process() *serverproc.Process { return s.proc }
func (s *server) LogPath() string              { return filepath.Join(s.dir, "mariadb.log") }

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
	srv := shared.Get(t)
	// The server goes away as a whole, so its databases need no dropping.
	name := createDatabase(t, srv.admin, testUser+"@127.0.0.1")
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = testUser, srv.password
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.port))
	cfg.DBName = name
	return cfg.FormatDSN()
}

// M wraps m so that Run stops the throwaway server after the tests, for use
// with wrappers such as goleak.VerifyTestMain(mysqltest.M(m)), or around
// another harness's: mysqltest.M(pgtest.M(m)).
func M(m interface{ Run() int }) interface{ Run() int } { return serverproc.M(m, Stop) }

// Main runs the tests, stops the throwaway server and exits.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// Stop shuts the throwaway server down and removes its directory. Main
// calls it; calling it again, or without a server, does nothing. A later
// Start starts a new server.
func Stop() error { return shared.Stop() }

// Stop shuts the server down and removes its directory.
func (s *server) Stop() error {
	err := s.proc.Stop(syscall.SIGTERM, 30*time.Second, syscall.SIGKILL) // normal shutdown, else kill
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("mysqltest: removing %s: %w", s.dir, rmErr)
	}
	return err
}

// errMissing marks a start failure caused by missing binaries.
var errMissing = fmt.Errorf("MariaDB %w", serverproc.ErrMissing)

func startServer() (*server, error) {
	installDB, err := findBin("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	mariadbd, err := findBin("mariadbd")
	if err != nil {
		return nil, err
	}
	cred, err := serverproc.RunAs("mysql", installHint)
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
		return nil, fmt.Errorf("mysqltest: mariadb-install-db: %v\n%s", err, serverproc.Tail(out))
	}
	// A port that was free a moment ago may be taken by the time the server
	// binds it (other test binaries start servers too): try a few.
	var lastErr error
	for range 5 {
		port, err := serverproc.FreePort()
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
	proc, err := serverproc.Start(cmd, cred, syscall.SIGKILL)
	if err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	admin := mysql.NewConfig()
	admin.User, admin.Net, admin.Addr = "root", "unix", sock
	srv := &server{dir: dir, port: port, proc: proc, admin: admin}
	err = proc.WaitReady(60*time.Second, srv.ping)
	if err == nil {
		err = srv.createUser()
	}
	if err != nil {
		_ = proc.Signal(syscall.SIGKILL)
		<-proc.Exited()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("mysqltest: %w\n%s", err, serverproc.Tail(log))
	}
	return srv, nil
}

// ping connects as root through the socket and pings.
func (s *server) ping() error {
	connector, err := mysql.NewConnector(s.admin)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// createUser makes the account tests connect as, over TCP from loopback,
// with a random password and PROCESS (which SHOW ENGINE INNODB STATUS
// needs); Start grants it each database.
func (s *server) createUser() error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	s.password = hex.EncodeToString(b[:])
	if err := asAdmin(s.admin,
		"CREATE USER '"+testUser+"'@'127.0.0.1' IDENTIFIED BY '"+s.password+"'",
		"GRANT PROCESS ON *.* TO '"+testUser+"'@'127.0.0.1'"); err != nil {
		return fmt.Errorf("mysqltest: creating the test user: %w", err)
	}
	return nil
}

// createDatabase creates a database with a random name, utf8mb4 with the
// binary collation, through the server cfg names, and returns its name.
// With grantee ('user'@'host'), that account gets all privileges on it.
func createDatabase(t testing.TB, cfg *mysql.Config, grantee string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "mysqltest_" + hex.EncodeToString(b[:])
	stmts := []string{"CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"}
	if grantee != "" {
		account, host, _ := strings.Cut(grantee, "@")
		stmts = append(stmts, "GRANT ALL PRIVILEGES ON `"+name+"`.* TO '"+account+"'@'"+host+"'")
	}
	if err := asAdmin(cfg, stmts...); err != nil {
		t.Fatalf("mysqltest: creating database %s: %v", name, err)
	}
	return name
}

func dropDatabase(t testing.TB, cfg *mysql.Config, name string) {
	if err := asAdmin(cfg, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
		t.Errorf("mysqltest: dropping database %s: %v", name, err)
	}
}

// asAdmin runs stmts, in order, on the server cfg names, in no database.
func asAdmin(cfg *mysql.Config, stmts ...string) error {
	admin := cfg.Clone()
	admin.DBName = ""
	connector, err := mysql.NewConnector(admin)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}
