package boltstore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// Backups.
//
// A backup is a copy of the bbolt file as of one instant between two
// batches of the commit loop, taken right after a checkpoint, so it holds
// every write answered before it and needs no log. It is not a store
// yet: it names a log epoch, so Open refuses it as a file whose log is
// missing, and a store served from it as it is would issue again every
// token issued after the backup. Restore makes one: it raises the file's
// token floor by a bump above the highest token the backup knows, so that
// every key, known or not, issues above any token it could have been given
// after the backup (unless some key was granted more than the bump times
// since), and releases every lease the backup holds.

// DefaultBump is how far above the highest token in a backup Restore
// raises the floor unless told otherwise: 2^40, about 1.1 × 10^12 grants
// of one key after the backup was taken (127 days of one key granted
// 100,000 times a second, far more than one fsync per grant allows),
// while 8,192 restores still fit under lease.MaxToken.
const DefaultBump uint64 = 1 << 40

// A backup file is framed so that it cannot be taken for a store:
//
//	"lease-boltstore-backup v1\n" | size uint64 big-endian | the bbolt file (size bytes) | SHA-256 of it
//
// bbolt refuses it (no meta page where one should be), so neither Open nor
// a copy over a store's lease.db can serve it as it is, and Restore and
// CheckBackup tell a backup cut short or altered from a whole one.
const backupMagic = "lease-boltstore-backup v1\n"

// Backup writes a consistent copy of the store to w and returns the bytes
// written. It checkpoints, so the bbolt file holds every answered write,
// and copies that state in a read transaction into a file beside the
// store, which it then sends to w: the store goes on serving meanwhile,
// and a w that is slow or stalls holds up nothing but this call (the read
// transaction ends with the local copy). The copy can become a store only
// through Restore (see DefaultBump).
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.failure(); err != nil {
		return 0, err
	}
	spool, err := os.CreateTemp(filepath.Dir(s.path), filepath.Base(s.path)+".backup-*")
	if err != nil {
		return 0, fmt.Errorf("boltstore: backup of %s: %w", s.path, err)
	}
	defer func() {
		_ = spool.Close()
		_ = os.Remove(spool.Name())
	}()
	if err := s.backupTo(ctx, spool); err != nil {
		return 0, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("boltstore: backup of %s: %w", s.path, err)
	}
	n, err := io.Copy(w, spool)
	if err != nil {
		return n, fmt.Errorf("boltstore: backup of %s: %w", s.path, err)
	}
	return n, nil
}

// backupTo writes the framed backup to f from a snapshot the commit loop
// takes.
func (s *Store) backupTo(ctx context.Context, f *os.File) error {
	req := make(chan snapshot, 1)
	select {
	case s.snapshots <- req:
	case <-s.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	snap := <-req
	if snap.err != nil {
		return snap.err
	}
	defer func() { _ = snap.tx.Rollback() }()
	head := make([]byte, len(backupMagic)+8)
	copy(head, backupMagic)
	binary.BigEndian.PutUint64(head[len(backupMagic):], uint64(snap.tx.Size()))
	sum := sha256.New()
	_, err := f.Write(head)
	if err == nil {
		_, err = snap.tx.WriteTo(io.MultiWriter(f, sum))
	}
	if err == nil {
		_, err = f.Write(sum.Sum(nil))
	}
	if err != nil {
		return fmt.Errorf("boltstore: backup of %s: %w", s.path, err)
	}
	return nil
}

// CheckBackup reads the backup at path and reports whether it is one
// whole, as Backup wrote it: the frame, its size and its checksum. The
// error matches lease.ErrInvalid for a file that is not.
func CheckBackup(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("boltstore: %w", err)
	}
	defer f.Close()
	return unframe(f, io.Discard, path)
}

// unframe copies the bbolt file inside the backup r (named name) to w,
// checking the frame and the checksum.
func unframe(r io.Reader, w io.Writer, name string) error {
	br := bufio.NewReader(r)
	head := make([]byte, len(backupMagic)+8)
	if _, err := io.ReadFull(br, head); err != nil || string(head[:len(backupMagic)]) != backupMagic {
		return fmt.Errorf("%w: boltstore: %s is not a backup of a lease store (written by lease backup or Store.Backup)", lease.ErrInvalid, name)
	}
	size := binary.BigEndian.Uint64(head[len(backupMagic):])
	sum := sha256.New()
	if n, err := io.CopyN(io.MultiWriter(w, sum), br, int64(size)); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: boltstore: the backup %s is cut short: %d of its %d bytes", lease.ErrInvalid, name, n, size)
		}
		return fmt.Errorf("boltstore: reading the backup %s: %w", name, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, want); err != nil {
		return fmt.Errorf("%w: boltstore: the backup %s is cut short: its checksum is missing", lease.ErrInvalid, name)
	}
	if !bytes.Equal(want, sum.Sum(nil)) {
		return fmt.Errorf("%w: boltstore: the backup %s is damaged: its checksum does not match", lease.ErrInvalid, name)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: boltstore: the backup %s has data after its end", lease.ErrInvalid, name)
	}
	return nil
}

// snapshot is the commit loop's answer to a backup: a read transaction
// begun right after a checkpoint, or why there is none.
type snapshot struct {
	tx  *bolt.Tx
	err error
}

// takeSnapshot runs in the commit loop, between batches: it checkpoints
// and begins a read transaction on what the checkpoint committed. The
// write transaction the checkpoint opened has written nothing yet, and
// cannot before the loop goes on, so the reader sees exactly the state of
// every batch answered so far.
func (s *Store) takeSnapshot(req chan<- snapshot) {
	s.checkpoint()
	if err := s.failure(); err != nil {
		req <- snapshot{err: err}
		return
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		req <- snapshot{err: unavailablef(err, "boltstore: backup of %s: read transaction", s.path)}
		return
	}
	req <- snapshot{tx: tx}
}

// RestoreReport says what Restore made of a backup.
type RestoreReport struct {
	Keys   int         // keys the backup held a lease record for (a key without one is in the floor)
	Top    lease.Token // the highest token the backup knows (its floor included)
	Floor  lease.Token // every token the restored store issues is above it
	Leases int         // leases the backup held that had not expired by the restore, all released by it
}

// RestoreOption configures Restore.
type RestoreOption func(*restoreConfig) error

type restoreConfig struct {
	bump uint64
}

// Bump sets how far above the highest token in the backup the restored
// store's floor goes (DefaultBump unless set): the number of grants of any
// one key after the backup that the restore still stays above. It must be
// at least 1.
func Bump(n uint64) RestoreOption {
	return func(c *restoreConfig) error {
		if n == 0 {
			return fmt.Errorf("%w: boltstore: Bump needs at least 1", lease.ErrInvalid)
		}
		c.bump = n
		return nil
	}
}

// Restore makes the store file path (which must not exist, nor its log)
// from the backup file at backup, written by Backup: the same high-water
// marks, no leases, and a floor Bump above the highest token the backup
// knows, so every key issues tokens above that floor from then on. The
// file is written beside path and renamed into place once complete and
// synced: a restore that fails leaves nothing at path. The backup is
// checked page by page first, and one of a newer schema is refused.
func Restore(backup, path string, opts ...RestoreOption) (RestoreReport, error) {
	cfg := restoreConfig{bump: DefaultBump}
	for _, o := range opts {
		if o == nil {
			return RestoreReport{}, fmt.Errorf("%w: boltstore: restore: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return RestoreReport{}, err
		}
	}
	for _, p := range []string{path, walPath(path)} {
		if _, err := os.Lstat(p); err == nil {
			return RestoreReport{}, fmt.Errorf("%w: boltstore: restore: %s exists; restore into a new data dir, never over a store", lease.ErrInvalid, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return RestoreReport{}, fmt.Errorf("boltstore: restore: %w", err)
		}
	}
	src, err := os.Open(backup)
	if err != nil {
		return RestoreReport{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".restore-*")
	if err != nil {
		return RestoreReport{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	tmpPath := tmp.Name()
	done := false
	defer func() {
		if !done {
			_ = os.Remove(tmpPath)
		}
	}()
	err = unframe(src, tmp, backup)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return RestoreReport{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	rep, err := rewriteBackup(tmpPath, backup, cfg.bump)
	if err != nil {
		return RestoreReport{}, err
	}
	if err := os.Rename(tmpPath, path); err != nil {
		return RestoreReport{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	done = true
	if err := syncDir(filepath.Dir(path)); err != nil {
		return RestoreReport{}, fmt.Errorf("boltstore: restore: %w", err)
	}
	return rep, nil
}

// rewriteBackup turns the copy at tmp of the backup named name into a
// store of this build's schema: leases dropped, no log epoch (the store
// starts a new log), and the floor raised by bump above every token.
func rewriteBackup(tmp, name string, bump uint64) (rep RestoreReport, err error) {
	defer func() {
		// bbolt panics on some damage its checks do not catch first; a
		// backup's checksum rules out a damaged copy, not a file made to
		// look like one.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: boltstore: restore: %s is damaged: %v", lease.ErrInvalid, name, r)
		}
	}()
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: DefaultLockTimeout})
	if err != nil {
		return rep, fmt.Errorf("%w: boltstore: restore: %s is not a backup: %v", lease.ErrInvalid, name, err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("boltstore: restore: %w", cerr)
		}
	}()
	err = db.Update(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return fmt.Errorf("%w: boltstore: restore: %s is damaged: %v", lease.ErrInvalid, name, cerr)
		}
		meta, leases := tx.Bucket(bucketMeta), tx.Bucket(bucketLeases)
		if meta == nil || leases == nil {
			return fmt.Errorf("%w: boltstore: restore: %s is not a backup of a lease store", lease.ErrInvalid, name)
		}
		version, err := decodeUint64("version in "+name, meta.Get(keyVersion))
		if err != nil {
			return err
		}
		if version < 3 || version > schemaVersion {
			// Backup writes files of the writing build's schema after a
			// checkpoint, which upgrades older ones on Open: 3 and later.
			return fmt.Errorf("%w: boltstore: restore: %s has schema version %d; this build restores versions 3 to %d", lease.ErrInvalid, name, version, schemaVersion)
		}
		st, bad, err := readMeta(tx, name, version)
		if err != nil {
			return err
		}
		if bad != nil {
			return fmt.Errorf("%w: boltstore: restore: the backup %s", lease.ErrInvalid, bad.what())
		}
		top := st.top
		if version < 4 { // schema 5 only added the quiet renewals' mark, which a backup never holds
			t, err := upgrade(tx, name)
			if err != nil {
				return err
			}
			top = max(top, t)
		}
		rep.Keys = leases.Stats().KeyN
		// Only live leases have holders to tell: an expired record stays
		// until its key is acquired again or swept, and releasing it takes
		// nothing from anyone.
		now := time.Now()
		if err := leases.ForEach(func(k, v []byte) error {
			r, err := decodeRecord(string(k), v)
			if err == nil && r.live(now) {
				rep.Leases++
			}
			return err
		}); err != nil {
			return err
		}
		floor := top + bump
		if floor < top || floor >= uint64(lease.MaxToken) {
			return fmt.Errorf("%w: boltstore: restore: the floor %d + bump %d reaches past the largest token, %d: use a smaller bump", lease.ErrInvalid, top, bump, lease.MaxToken)
		}
		rep.Top, rep.Floor = lease.Token(top), lease.Token(floor)
		if err := tx.DeleteBucket(bucketLeases); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketLeases); err != nil {
			return err
		}
		for _, k := range [][]byte{keyWALEpoch, keyWALSize} {
			if err := meta.Delete(k); err != nil {
				return err
			}
		}
		if err := putVersion(meta, schemaVersion); err != nil {
			return err
		}
		return putMeta(meta, keyTokenFloor, floor)
	})
	return rep, err
}
