package boltstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// backupTo writes a backup of s to a new file and returns its path.
func backupTo(t *testing.T, s *boltstore.Store) string {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.Backup(context.Background(), &buf)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Backup reported %d bytes, wrote %d", n, buf.Len())
	}
	path := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func acquireRelease(t *testing.T, s lease.Backend, key string) lease.Token {
	t.Helper()
	ctx := context.Background()
	l, err := s.Acquire(ctx, key, "w", time.Minute)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatalf("Release(%q): %v", key, err)
	}
	return l.Token
}

// The case: acquire, back up, acquire and release several more
// times, restore, serve: the next token is above all of them, for the key
// the backup knew and for one it never saw.
func TestRestoreNeverTurnsTokensBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []boltstore.RestoreOption
		bump uint64
	}{
		{"default bump", nil, boltstore.DefaultBump},
		{"bump 10", []boltstore.RestoreOption{boltstore.Bump(10)}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := open(t)
			ctx := context.Background()
			acquireRelease(t, s, "jobs/a")
			held, err := s.Acquire(ctx, "jobs/held", "w", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			backup := backupTo(t, s)
			var highest lease.Token
			for range 9 { // fewer grants than the smallest bump
				highest = max(highest, acquireRelease(t, s, "jobs/a"), acquireRelease(t, s, "jobs/new"))
			}
			if highest < 10 {
				t.Fatalf("setup: highest token %d after the backup, want at least 10", highest)
			}

			restored := filepath.Join(t.TempDir(), "lease.db")
			rep, err := boltstore.Restore(backup, restored, tc.opts...)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			// jobs/a, released, is in the floor; jobs/held has its record.
			if rep.Keys != 1 || rep.Leases != 1 || rep.Top != held.Token || uint64(rep.Floor) != uint64(rep.Top)+tc.bump {
				t.Fatalf("Restore reported %+v; want 1 key, 1 lease, top %d, floor top+%d", rep, held.Token, tc.bump)
			}
			r := openAt(t, restored)
			for _, key := range []string{"jobs/a", "jobs/new", "jobs/never"} {
				if tok := acquireRelease(t, r, key); tok <= highest || tok <= rep.Floor {
					t.Errorf("restored store issued %s token %d; the original issued up to %d after the backup (floor %d)", key, tok, highest, rep.Floor)
				}
			}
			// The backup's lease is released: its holder learns on renewal,
			// and the key is free at once, with a token above the floor.
			if _, err := r.Renew(ctx, held, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
				t.Errorf("Renew of the backup's lease on the restored store: %v, want ErrNotHeld", err)
			}
			if tok := acquireRelease(t, r, "jobs/held"); tok <= rep.Floor {
				t.Errorf("jobs/held token %d, want above the floor %d", tok, rep.Floor)
			}
		})
	}
}

// Every write answered before Backup is called is in the backup, while
// writers keep going during it.
func TestBackupIsConsistentUnderLoad(t *testing.T) {
	s, _ := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		answered = map[string]lease.Token{}
		wg       sync.WaitGroup
		started  sync.WaitGroup // each writer has had a token answered
	)
	started.Add(4)
	for w := range 4 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", w)
			first := true
			defer func() {
				if first {
					started.Done()
				}
			}()
			for ctx.Err() == nil {
				l, err := s.Acquire(ctx, key, "w", time.Minute)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("Acquire: %v", err)
					}
					return
				}
				mu.Lock()
				answered[key] = l.Token
				mu.Unlock()
				if first {
					first = false
					started.Done()
				}
				if err := s.Release(context.Background(), l); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	started.Wait()
	for round := range 5 {
		mu.Lock()
		before := make(map[string]lease.Token, len(answered))
		for k, v := range answered {
			before[k] = v
		}
		mu.Unlock()
		backup := backupTo(t, s)
		// Bump(1): the floor is the backup's highest token plus one, so
		// the tokens it holds show through the restored store's grants.
		restored := filepath.Join(t.TempDir(), "lease.db")
		rep, err := boltstore.Restore(backup, restored, boltstore.Bump(1))
		if err != nil {
			t.Fatalf("round %d: Restore: %v", round, err)
		}
		var top lease.Token
		for _, v := range before {
			top = max(top, v)
		}
		if rep.Top < top {
			t.Fatalf("round %d: backup knows %d keys up to token %d; %d was answered before Backup was called (%v)", round, rep.Keys, rep.Top, top, before)
		}
	}
	cancel()
	wg.Wait()
}

// A backup used as a store without Restore would issue again every token
// issued after it: Open refuses it, as a file whose log is missing.
func TestOpenRefusesABackup(t *testing.T) {
	s, _ := open(t)
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	dir := t.TempDir()
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "lease.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := boltstore.Open(path); err == nil {
		_ = r.Close()
		t.Fatal("Open served a backup without Restore")
	}
}

func TestRestoreRefuses(t *testing.T) {
	s, _ := open(t)
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("lease"), 2000), 0o600); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(t.TempDir(), "lease.db")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	existingLog := filepath.Join(t.TempDir(), "lease.db")
	if err := os.WriteFile(existingLog+"-wal", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		backup, path string
		opts         []boltstore.RestoreOption
	}{
		{"over a store", backup, existing, nil},
		{"over a log", backup, existingLog, nil},
		{"not a backup", garbage, filepath.Join(t.TempDir(), "lease.db"), nil},
		{"zero bump", backup, filepath.Join(t.TempDir(), "lease.db"), []boltstore.RestoreOption{boltstore.Bump(0)}},
		{"bump past MaxToken", backup, filepath.Join(t.TempDir(), "lease.db"), []boltstore.RestoreOption{boltstore.Bump(uint64(lease.MaxToken))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(tc.path)
			if _, err := boltstore.Restore(tc.backup, tc.path, tc.opts...); !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("Restore: %v, want ErrInvalid", err)
			}
			after, _ := os.ReadFile(tc.path)
			if !bytes.Equal(before, after) {
				t.Fatalf("a refused restore changed %s", tc.path)
			}
			entries, _ := os.ReadDir(filepath.Dir(tc.path))
			for _, e := range entries {
				if e.Name() != "lease.db" && e.Name() != "lease.db-wal" {
					t.Errorf("a refused restore left %s behind", e.Name())
				}
			}
		})
	}
}

func TestBackupOfClosedStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(context.Background(), &bytes.Buffer{}); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Backup of a closed store: %v, want ErrUnavailable", err)
	}
}

// A backup copied over a stopped store's lease.db, its log left beside it,
// must not be served: it would issue again the tokens issued after it.
func TestBackupOverAStoreRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	for range 5 {
		acquireRelease(t, s, "k")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := boltstore.Open(path); err == nil {
		tok := acquireRelease(t, r, "k")
		_ = r.Close()
		t.Fatalf("Open served a backup copied over the store; it issued token %d after 6", tok)
	}
}

// CheckBackup tells a whole backup from one cut short, altered or grown.
func TestCheckBackup(t *testing.T) {
	s, _ := open(t)
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	if err := boltstore.CheckBackup(backup); err != nil {
		t.Fatalf("CheckBackup of a whole backup: %v", err)
	}
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(raw)
	flipped[len(flipped)/2] ^= 1
	for name, b := range map[string][]byte{
		"cut short":      raw[:len(raw)-100],
		"checksum cut":   raw[:len(raw)-1],
		"a byte flipped": flipped,
		"data after":     append(bytes.Clone(raw), 0),
		"not a backup":   raw[40:],
		"empty":          nil,
	} {
		p := filepath.Join(t.TempDir(), "b")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := boltstore.CheckBackup(p); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("CheckBackup of a backup %s: %v, want ErrInvalid", name, err)
		}
		if _, err := boltstore.Restore(p, filepath.Join(t.TempDir(), "lease.db")); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Restore of a backup %s: %v, want ErrInvalid", name, err)
		}
	}
}

// stalledWriter blocks every Write until released.
type stalledWriter struct {
	release chan struct{}
	buf     bytes.Buffer
}

func (w *stalledWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.buf.Write(p)
}

// A backup whose reader stalls holds up nothing but itself: the store goes
// on answering, through checkpoints that must grow its file.
func TestBackupStalledReaderHoldsNothingUp(t *testing.T) {
	s, _ := open(t)
	w := &stalledWriter{release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := s.Backup(context.Background(), w)
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			// 9,600 leases: the next checkpoint grows the file several
			// times. A read transaction left open by the backup would
			// make it wait to grow the file, holding the store's lock,
			// and every call after it.
			for i := range 300 {
				if _, err := s.Acquire(ctx, fmt.Sprintf("grow/%02d/%04d", g, i), "w", time.Hour); err != nil {
					t.Errorf("Acquire while a backup's reader stalls: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	// A checkpoint now must grow the file (another backup forces one).
	second := make(chan error, 1)
	go func() {
		_, err := s.Backup(ctx, io.Discard)
		second <- err
	}()
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("a second backup: %v", err)
		}
	case <-time.After(time.Minute):
		close(w.release)
		t.Fatal("a checkpoint that grows the file waited for a backup's stalled reader, and the store with it")
	}
	if _, err := s.Acquire(ctx, "after", "w", time.Hour); err != nil {
		t.Fatal(err)
	}
	close(w.release)
	if err := <-done; err != nil {
		t.Fatalf("Backup: %v", err)
	}
	p := filepath.Join(t.TempDir(), "b")
	if err := os.WriteFile(p, w.buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := boltstore.CheckBackup(p); err != nil {
		t.Fatalf("the stalled backup, once read: %v", err)
	}
}

// TestRestoreCountsLiveLeases: the report's released leases are those that
// had not expired; an expired record, kept until its key is acquired again,
// had no holder to tell.
func TestRestoreCountsLiveLeases(t *testing.T) {
	clk := fakeclock.New(time.Now().Add(-time.Hour))
	s, _ := open(t, boltstore.WithClock(clk))
	ctx := context.Background()
	for _, l := range []struct {
		key string
		ttl time.Duration
	}{{"expired/1", time.Minute}, {"expired/2", time.Minute}, {"expired/3", time.Minute}, {"live", 2 * time.Hour}} {
		if _, err := s.Acquire(ctx, l.key, "w", l.ttl); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := boltstore.Restore(backupTo(t, s), filepath.Join(t.TempDir(), "lease.db"))
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if rep.Leases != 1 {
		t.Errorf("Restore reported %d leases released, want 1: three of the four records had expired an hour ago", rep.Leases)
	}
}

// setBackupVersion rewrites the schema version of the backup at path, as
// a build of that schema would have written it, frame and checksum
// included.
func setBackupVersion(t *testing.T, path string, version uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head := len("lease-boltstore-backup v1\n") + 8
	file := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(file, b[head:len(b)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	writeBolt(t, file, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("version"), binary.BigEndian.AppendUint64(nil, version))
	})
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	out := binary.BigEndian.AppendUint64(append([]byte(nil), b[:head-8]...), uint64(len(body)))
	out = append(append(out, body...), sum[:]...)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreSchema4Backup: a backup written by a build of schema 4 (the
// layout of 5 without the quiet renewals' mark, which a backup never
// holds) restores, above every token it knows. Once schema 5 came in, Restore
// refused every such backup.
func TestRestoreSchema4Backup(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	released := acquireRelease(t, s, "jobs/a")
	held, err := s.Acquire(ctx, "jobs/held", "w", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	backup := backupTo(t, s)
	setBackupVersion(t, backup, 4)
	if err := boltstore.CheckBackup(backup); err != nil {
		t.Fatalf("setup: the rewritten backup: %v", err)
	}
	restored := filepath.Join(t.TempDir(), "lease.db")
	rep, err := boltstore.Restore(backup, restored, boltstore.Bump(10))
	if err != nil {
		t.Fatalf("Restore of a schema 4 backup: %v", err)
	}
	if rep.Keys != 1 || rep.Leases != 1 || rep.Top != max(held.Token, released) || rep.Floor != rep.Top+10 {
		t.Fatalf("Restore reported %+v; want 1 key, 1 lease, top %d, floor top+10", rep, max(held.Token, released))
	}
	r := openAt(t, restored)
	for _, key := range []string{"jobs/a", "jobs/held", "jobs/never"} {
		if tok := acquireRelease(t, r, key); tok <= rep.Floor {
			t.Errorf("restored store issued %s token %d, want above the floor %d", key, tok, rep.Floor)
		}
	}
}
