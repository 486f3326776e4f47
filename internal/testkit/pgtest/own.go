package pgtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/leasehq/lease/internal/testkit/serverproc"
)

// Own is a throwaway PostgreSQL cluster of one test's own, for tests that
// crash and restart the server, which the shared cluster and a server named
// by LEASE_TEST_POSTGRES_URL must not suffer. It keeps its data directory
// and port across restarts, so connection strings stay valid.
type Own struct {
	// URL is the connection string of a database on the cluster.
	URL string

	bin      string
	cred     *syscall.Credential
	dir      string
	port     int // kept across restarts: clients keep their connection strings
	settings []string
	srv      *server // nil while crashed
}

// StartOwn starts a cluster for t alone, with extra server settings
// ("name=value", e.g. "synchronous_commit=off") over the defaults, and
// creates one database on it. It is stopped and removed in cleanup. Missing
// server binaries fail the test with an install hint, or skip it under
// -short.
func StartOwn(t testing.TB, settings ...string) *Own {
	t.Helper()
	bin, err := findBin()
	if err != nil {
		if testing.Short() {
			t.Skipf("pgtest: %v", err)
		}
		t.Fatalf("pgtest: %v", err)
	}
	cred, err := serverproc.RunAs("postgres", installHint)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "pgtest-own-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	o := &Own{bin: bin, cred: cred, dir: dir, settings: settings}
	t.Cleanup(func() {
		if o.srv != nil {
			if err := o.srv.Stop(); err != nil { // removes dir
				t.Error(err)
			}
			return
		}
		_ = os.RemoveAll(dir)
	})
	if o.srv, err = startIn(dir, bin, cred, settings...); err != nil {
		t.Fatal(err)
	}
	o.port = o.srv.port
	o.URL = createDatabase(t, o.srv.admin, false)
	return o
}

// Crash ends the server as a crash would: an immediate shutdown (SIGQUIT to
// the postmaster), in which every server process exits at once, WAL still in
// shared memory is lost, no checkpoint is written, and the next start runs
// crash recovery. It waits until the postmaster has exited.
func (o *Own) Crash(t testing.TB) {
	t.Helper()
	if o.srv == nil {
		t.Fatal("pgtest: Crash of a server that is not running")
	}
	_ = o.srv.proc.Signal(syscall.SIGQUIT)
	<-o.srv.proc.Exited()
	o.srv = nil
}

// Restart starts the crashed server again on the same data directory and
// port, and waits until it accepts connections (crash recovery done).
func (o *Own) Restart(t testing.TB) {
	t.Helper()
	if o.srv != nil {
		t.Fatal("pgtest: Restart of a server that is running")
	}
	srv, err := launch(o.dir, o.bin, filepath.Join(o.dir, "data"), o.port, o.cred, o.settings...)
	if err != nil {
		t.Fatalf("pgtest: restarting PostgreSQL in %s: %v", o.dir, err)
	}
	o.srv = srv
}
