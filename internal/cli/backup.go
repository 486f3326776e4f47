package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehq/lease/boltstore"
)

// BackupSocket is the name of the Unix socket inside --data-dir through
// which `lease backup` asks a running `lease serve` for a copy of its
// store: the bbolt file is locked by the process that serves it, so only
// that process can copy it consistently. The socket is 0600 in a data dir
// that is 0700 and not shared, so reaching it takes what reading the
// store's files takes.
const BackupSocket = "lease.sock"

// maxSocketPath is the longest socket path every Unix takes (sun_path is
// 104 bytes on BSDs and macOS, 108 on Linux, with its terminating NUL).
const maxSocketPath = 103

// errSocketPath is serveBackups' answer for a data dir whose path is too
// long for a socket inside it.
var errSocketPath = errors.New("the data dir's path is too long for a Unix socket in it")

// backupPath is the request path on the backup socket.
const backupPath = "/backup"

// backupSocket serves backups of store on dir's BackupSocket until closed.
type backupSocket struct {
	path string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// serveBackups starts the backup socket of a store that this process has
// opened (and so holds the lock of): any socket file left there is a dead
// server's, and is replaced.
func serveBackups(store *boltstore.Store, dir string, log *slog.Logger) (*backupSocket, error) {
	path := filepath.Join(dir, BackupSocket)
	if len(path) > maxSocketPath {
		return nil, errSocketPath
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("serve: %s is in the way of the backup socket and is not a socket; remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("serve: removing a dead server's backup socket: %w", err)
		}
	}
	ln, err := listenPrivate(dir, path)
	if err != nil {
		return nil, fmt.Errorf("serve: backup socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+backupPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		start := time.Now()
		n, err := store.Backup(r.Context(), w)
		if err != nil {
			log.Error("backup failed", "err", err, "bytes", n)
			if n == 0 {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			// Part of the copy is out: cut the stream short, so the
			// client sees a broken transfer rather than a short file.
			panic(http.ErrAbortHandler)
		}
		log.Info("backup taken", "bytes", n, "duration", time.Since(start).Round(time.Millisecond))
	})
	b := &backupSocket{path: path, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(ln)
	}()
	return b, nil
}

// listenPrivate listens on a Unix socket at path that only this user can
// reach from the moment it exists: it is made, and set to 0600, in a new
// 0700 directory inside dir, then renamed into place, so that nobody who
// may write to dir (a shared data dir) can connect in between or swap it
// for theirs unnoticed. Where it is made, dir/.sXXXXXX/s, is as long as
// dir/lease.sock, so that the socket can be made wherever its path is short
// enough (a longer name there, such as os.MkdirTemp's, kept a server on a
// data dir of 89 to 92 bytes from starting at all).
func listenPrivate(dir, path string) (net.Listener, error) {
	tmp, err := mkdirPrivate(dir)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	made := filepath.Join(tmp, "s")
	ln, err := net.Listen("unix", made)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // its file is renamed away
	err = os.Chmod(made, 0o600)
	if err == nil {
		err = os.Rename(made, path)
	}
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

// mkdirPrivate makes a new 0700 directory in dir named ".s" and 6 random
// hex digits: as long as BackupSocket, less the "s" of the socket made in it
// and its separator.
func mkdirPrivate(dir string) (string, error) {
	for try := 0; ; try++ {
		var b [3]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		name := filepath.Join(dir, ".s"+hex.EncodeToString(b[:]))
		err := os.Mkdir(name, 0o700)
		switch {
		case err == nil:
			return name, nil
		case !errors.Is(err, os.ErrExist) || try == 100:
			return "", err
		}
	}
}

// Close stops serving backups (a copy in progress is cut off) and removes
// the socket.
func (b *backupSocket) Close() error {
	err := b.srv.Close()
	<-b.done
	if rerr := os.Remove(b.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

func newBackupCommand(a *app) *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "backup [--data-dir DIR] FILE",
		Short: "Copy the embedded store to FILE, while it is served or not",
		Long: `backup writes a consistent copy of the embedded store in --data-dir to FILE.
If a lease serve is running on that data dir, the copy comes from it through
the Unix socket ` + BackupSocket + ` in the data dir and it goes on serving;
otherwise backup opens the store itself. The copy holds every write answered
before it began. FILE is written beside itself and renamed into place once it
is complete, synced and checked page by page. FILE may not be in the data dir:
its rename could replace the store's own files.

A backup is not a store: lease serve refuses it. lease restore makes one from
it whose tokens all stay above any the old store could have issued after the
backup.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, via, err := backup(cmd.Context(), dataDir, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "backed up %s to %s (%d bytes, %s)\n", filepath.Join(dataDir, BoltFile), args[0], n, via)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", DefaultDataDir, "the embedded store's `DIR`, as given to lease serve")
	return cmd
}

// backup copies the store in dataDir to file, through the backup socket of
// the server running on it, or by opening the store when none is.
func backup(ctx context.Context, dataDir, file string) (n int64, via string, err error) {
	if err := checkBackupFile(file, dataDir); err != nil {
		return 0, "", err
	}
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, filepath.Base(file)+".part-*")
	if err != nil {
		return 0, "", fmt.Errorf("backup: %w", err)
	}
	defer func() {
		_ = tmp.Close()
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	n, via, err = copyStore(ctx, dataDir, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = boltstore.CheckBackup(tmp.Name())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return 0, "", fmt.Errorf("backup: %w", err)
	}
	return n, via, nil
}

// checkBackupFile refuses a backup written into the data dir itself: the
// copy is renamed into place, and named lease.db, lease.db-wal or
// lease.db-lead it would replace the store's own file (under a running
// server too, whose next start would then find its store gone); the names
// there are the store's. A directory that cannot be looked at is left to
// the writes that follow, which say why.
func checkBackupFile(file, dataDir string) error {
	fi, err := os.Stat(filepath.Dir(file))
	if err != nil {
		return nil
	}
	if di, err := os.Stat(dataDir); err == nil && os.SameFile(fi, di) {
		return usageError(fmt.Errorf("backup: %s is in the data dir %s, where it could replace the store's own files; write the backup outside it", file, dataDir))
	}
	return nil
}

// copyStore writes the store in dataDir to w and says how it got it.
func copyStore(ctx context.Context, dataDir string, w io.Writer) (int64, string, error) {
	sock := filepath.Join(dataDir, BackupSocket)
	if err := checkSocket(sock); err != nil {
		return 0, "", err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lease"+backupPath, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	switch {
	case err == nil:
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return 0, "", fmt.Errorf("the server on %s: %s: %s", dataDir, resp.Status, msg)
		}
		n, err := io.Copy(w, resp.Body)
		return n, "from the running server", err
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		// No server on this data dir (or a dead one's socket): the store
		// is ours to open, or Open says who holds it.
		path := filepath.Join(dataDir, BoltFile)
		if _, err := os.Stat(path); err != nil {
			return 0, "", err
		}
		s, err := boltstore.Open(path)
		if err != nil {
			return 0, "", err
		}
		n, err := s.Backup(ctx, w)
		if cerr := s.Close(); err == nil {
			err = cerr
		}
		return n, "from the store, not served", err
	default:
		return 0, "", fmt.Errorf("asking the server on %s: %w", dataDir, err)
	}
}

// checkSocket refuses a backup socket that is not this user's own and
// private: another user's listener could hand out a forged copy. A missing
// socket is fine (no server runs).
func checkSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	uid, known := fileOwner(fi)
	switch {
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("%s is not a socket; remove it", path)
	case known && uid != os.Getuid():
		return fmt.Errorf("%s belongs to user %d, not to you: it is not your server's", path, uid)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to other users (mode %v): it is not your server's", path, fi.Mode().Perm())
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func newRestoreCommand(a *app) *cobra.Command {
	var (
		dataDir string
		bump    uint64
	)
	cmd := &cobra.Command{
		Use:   "restore FILE [--data-dir DIR] [--bump N]",
		Short: "Make a new data dir for lease serve from a backup, with every token above the old store's",
		Long: `restore makes the embedded store in --data-dir (created 0700 if missing; it
must not hold a store already) from FILE, a copy lease backup wrote. The restored
store keeps every key's highest token, releases every lease the backup held
(their holders learn at their next renewal), and issues every key, known or
not, tokens above the backup's highest plus --bump: above any token the old
store could have issued after the backup, unless one key was granted more than
--bump times since. Tokens stay at or below 2^53; restore refuses a bump that
would pass it.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bump == 0 {
				return usageError(errors.New("--bump must be at least 1"))
			}
			if _, err := os.Stat(args[0]); err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return fmt.Errorf("restore: --data-dir: %w", err)
			}
			rep, err := boltstore.Restore(args[0], filepath.Join(dataDir, BoltFile), boltstore.Bump(bump))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "restored %s into %s: %d keys, highest token %d; every token from now on is above %d; %d live leases released\n",
				args[0], dataDir, rep.Keys, rep.Top, rep.Floor, rep.Leases)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", DefaultDataDir, "make the store in `DIR`, which lease serve --data-dir then serves")
	cmd.Flags().Uint64Var(&bump, "bump", boltstore.DefaultBump, "raise every key's tokens `N` above the backup's highest: the grants of one key after the backup that the restore stays above")
	return cmd
}
