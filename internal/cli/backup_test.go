package cli

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehq/lease"
)

// TestBackupRestore is the case through lease serve and the lease
// binary: acquire, back up the running server, acquire and release several
// more times, restore into a new data dir, serve it: the next token is above
// all of them, for the keys the backup knew and for new ones.
func TestBackupRestore(t *testing.T) {
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	srv := startServe(t, cfg)
	base := "http://" + srv.Addr()
	takeTokens(t, base, "jobs/a", 3)
	backup := filepath.Join(t.TempDir(), "lease.backup")

	r := runBinary(t, nil, "backup", "--data-dir", cfg.DataDir, backup)
	if r.code != 0 || !strings.Contains(r.stdout, "from the running server") {
		t.Fatalf("lease backup of a running server: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	var highest lease.Token
	for _, key := range []string{"jobs/a", "jobs/b"} {
		highest = max(highest, takeTokens(t, base, key, 5))
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(cfg.DataDir, BackupSocket)); !os.IsNotExist(err) {
		t.Errorf("the backup socket is still there after the server closed: %v", err)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	r = runBinary(t, nil, "restore", backup, "--data-dir", restored, "--bump", "100")
	if r.code != 0 || !strings.Contains(r.stdout, "highest token 3; every token from now on is above 103") {
		t.Fatalf("lease restore: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	cfg2 := serveConfig(t, &logs)
	cfg2.DataDir = restored
	srv2 := startServe(t, cfg2)
	for _, key := range []string{"jobs/a", "jobs/b", "jobs/new"} {
		if tok := takeTokens(t, "http://"+srv2.Addr(), key, 1); tok <= highest {
			t.Errorf("restored server issued %s token %d; the old one issued up to %d after the backup", key, tok, highest)
		}
	}

	// A second restore into a data dir that holds a store is refused, and
	// leaves the store as it was.
	before, _ := os.ReadFile(filepath.Join(restored, BoltFile))
	r = runBinary(t, nil, "restore", backup, "--data-dir", restored)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "exists") {
		t.Errorf("restore over a store: exit %d, stderr %q; want %d and a word that it exists", r.code, r.stderr, ExitUsage)
	}
	if after, _ := os.ReadFile(filepath.Join(restored, BoltFile)); string(before) != string(after) {
		t.Error("a refused restore changed the store")
	}
}

// TestBackupNotServed: with no server on the data dir, lease backup opens
// the store itself, past a dead server's socket; and lease serve replaces
// that socket when it starts.
func TestBackupNotServed(t *testing.T) {
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	srv := startServe(t, cfg)
	want := takeTokens(t, "http://"+srv.Addr(), "k", 2)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	// What a server killed with SIGKILL leaves: a socket file no one
	// listens on.
	sock := filepath.Join(cfg.DataDir, BackupSocket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	_ = ln.Close()
	// A socket others may use is not trusted: it may be theirs.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, nil, "backup", "--data-dir", cfg.DataDir, filepath.Join(t.TempDir(), "b"))
	if r.code != ExitFailure || !strings.Contains(r.stderr, "open to other users") {
		t.Fatalf("lease backup through a socket open to others: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := os.Chmod(sock, 0o600); err != nil { // as lease serve leaves it
		t.Fatal(err)
	}

	backup := filepath.Join(t.TempDir(), "b")
	r = runBinary(t, nil, "backup", "--data-dir", cfg.DataDir, backup)
	if r.code != 0 || !strings.Contains(r.stdout, "not served") {
		t.Fatalf("lease backup of a store not served: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	startServe(t, cfg) // replaces the dead socket
	r = runBinary(t, nil, "backup", "--data-dir", cfg.DataDir, backup)
	if r.code != 0 || !strings.Contains(r.stdout, "from the running server") {
		t.Fatalf("lease backup after a restart: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	restored := filepath.Join(t.TempDir(), "d")
	r = runBinary(t, nil, "restore", backup, "--data-dir", restored, "--bump", "1")
	// The restarts raised the floor to the host clock (boltstore's floor.go).
	m := regexp.MustCompile(`highest token (\d+);`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("lease restore: exit %d, stdout %q, stderr %q; want its highest token", r.code, r.stdout, r.stderr)
	}
	if got, _ := strconv.ParseUint(m[1], 10, 64); got < uint64(want) {
		t.Fatalf("lease restore: highest token %d; %d was issued", got, want)
	}
}

func TestBackupRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"backup", "--data-dir", filepath.Join(dir, "none"), filepath.Join(dir, "b")}, ExitFailure, "no such file"},
		{[]string{"restore", filepath.Join(dir, "none"), "--data-dir", filepath.Join(dir, "d")}, ExitFailure, "no such file"},
		{[]string{"restore", filepath.Join(dir, "none"), "--data-dir", filepath.Join(dir, "d"), "--bump", "0"}, ExitUsage, "--bump must be at least 1"},
		{[]string{"backup"}, ExitUsage, "accepts 1 arg"},
	} {
		r := cliHTTP(t, nil, nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("lease %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands left %d files behind", len(entries))
	}
}

// TestBackupRefusesFileInTheDataDir: a backup named into the data dir
// itself is refused, however the path is spelled, served or not: renamed
// into place as lease.db, lease.db-wal or lease.db-lead it replaced the
// store's own file, under a running server too, whose next start then
// found a backup where its store was.
func TestBackupRefusesFileInTheDataDir(t *testing.T) {
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	srv := startServe(t, cfg)
	issued := takeTokens(t, "http://"+srv.Addr(), "k", 2)
	files := []string{BoltFile, BoltFile + "-wal", BoltFile + "-lead"}
	refused := func(state string) {
		t.Helper()
		for _, name := range files {
			before, err := os.Stat(filepath.Join(cfg.DataDir, name))
			if err != nil {
				t.Fatal(err)
			}
			for _, file := range []string{
				filepath.Join(cfg.DataDir, name),
				filepath.Join(cfg.DataDir, "..", filepath.Base(cfg.DataDir), ".", name),
			} {
				r := cliHTTP(t, nil, nil, "backup", "--data-dir", cfg.DataDir, file)
				if r.code != ExitUsage {
					t.Errorf("%s: lease backup --data-dir %s %s: exit %d, stdout %q, stderr %q; want %d", state, cfg.DataDir, file, r.code, r.stdout, r.stderr, ExitUsage)
					continue
				}
				oneErrorLine(t, r, "in the data dir")
			}
			if fi, err := os.Stat(filepath.Join(cfg.DataDir, name)); err != nil || !os.SameFile(fi, before) {
				t.Fatalf("%s: after the refused backups, %s is not the store's own file (%v)", state, name, err)
			}
		}
	}
	refused("served")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	refused("not served")

	// The store is whole: it serves again, above every token it issued.
	srv = startServe(t, cfg)
	if tok := takeTokens(t, "http://"+srv.Addr(), "k", 1); tok <= issued {
		t.Errorf("after the refused backups the store issued token %d; it had issued %d", tok, issued)
	}
}

// TestServeBackupSocketAtTheLongestPath: a data dir whose lease.sock is
// maxSocketPath bytes long gets its socket, and lease backup copies the
// running server through it; one byte longer, the server says it has none
// and serves. The socket used to be made first under a name up to 8 bytes
// longer than lease.sock, past what bind takes, so a data dir of 89 to 92
// bytes kept lease serve from starting at all.
func TestServeBackupSocketAtTheLongestPath(t *testing.T) {
	// Under /tmp, not t.TempDir(), whose long name (the test's) can leave no
	// room below maxSocketPath.
	base, err := os.MkdirTemp("/tmp", "lb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	room := maxSocketPath - len(string(filepath.Separator)+BackupSocket) - len(base) - 1
	if room < 1 {
		t.Fatalf("the directory %s leaves no room for a data dir of %d bytes", base, maxSocketPath-len("/"+BackupSocket))
	}
	for _, extra := range []int{0, 1} {
		dataDir := filepath.Join(base, strings.Repeat("d", room+extra))
		sock := filepath.Join(dataDir, BackupSocket)
		if len(sock) != maxSocketPath+extra {
			t.Fatalf("socket path %q is %d bytes, want %d", sock, len(sock), maxSocketPath+extra)
		}
		var logs syncBuffer
		cfg := serveConfig(t, &logs)
		cfg.DataDir = dataDir
		srv, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Run(t.Context()); err != nil {
			t.Fatalf("lease serve on a data dir of %d bytes: %v", len(dataDir), err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		takeTokens(t, "http://"+srv.Addr(), "k", 1)
		_, statErr := os.Lstat(sock)
		if extra == 0 {
			if statErr != nil {
				t.Errorf("no backup socket at %d bytes: %v", len(sock), statErr)
			}
			r := cliHTTP(t, nil, nil, "backup", "--data-dir", dataDir, filepath.Join(base, "b"))
			if r.code != ExitOK || !strings.Contains(r.stdout, "from the running server") {
				t.Errorf("lease backup through a socket of %d bytes: exit %d, stdout %q, stderr %q", len(sock), r.code, r.stdout, r.stderr)
			}
		} else {
			if statErr == nil {
				t.Errorf("a backup socket of %d bytes was made", len(sock))
			}
			if !strings.Contains(logs.String(), "lease backup can copy this store only while it is not served") {
				t.Errorf("the server does not say it has no backup socket:\n%s", logs.String())
			}
		}
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
