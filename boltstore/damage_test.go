package boltstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/disktest"
)

// Issue 28's table: damage done to the store's files after a kill -9 (or
// a clean shutdown), and what Open must make of it. Each case either must
// be refused, with one line naming the file and --accept-log-loss, and
// with AcceptLogLoss open and issue only tokens above every token issued
// before; or is one no local check can tell from a crash, and must open
// and issue only such tokens (the floor derived from the host clock at
// each open: see floor.go).

// grantsEnv is how many leases the "grant" child takes on damageKey, each
// released but, if holdLastEnv is set, the last, which it leaves held.
const (
	grantsEnv   = "BOLTSTORE_TEST_GRANTS"
	holdLastEnv = "BOLTSTORE_TEST_HOLD_LAST"
)

const damageKey = "damage/flip-me"

// grantChild acquires damageKey grantsEnv times, printing each token, then
// "done", and waits to be killed.
func grantChild(s *boltstore.Store) {
	n, _ := strconv.Atoi(os.Getenv(grantsEnv))
	for i := range n {
		// A lease the child releases gets a short TTL: a release is
		// answered before its record is durable, so one killed right
		// after it may leave the lease held for a later child, which then
		// waits out the TTL rather than fail on it.
		ttl := time.Hour
		if i < n-1 || os.Getenv(holdLastEnv) == "" {
			ttl = 5 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		l, err := s.AcquireWait(ctx, damageKey, "child", ttl)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		fmt.Printf("%d\n", l.Token)
		if i < n-1 || os.Getenv(holdLastEnv) == "" {
			if err := s.Release(context.Background(), l); err != nil {
				fmt.Fprintln(os.Stderr, "child:", err)
				os.Exit(2)
			}
		}
	}
	fmt.Println("done")
	select {}
}

// crashAfterGrants runs the grant child on path for n grants, kills it
// with SIGKILL once it has printed them, and returns the last token.
func crashAfterGrants(t *testing.T, path string, n int, env ...string) lease.Token {
	t.Helper()
	cmd, stdout, stderr := startChild(t, append([]string{childEnv + "=grant:" + path, grantsEnv + "=" + strconv.Itoa(n)}, env...)...)
	var last lease.Token
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "done" {
		v, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("child printed %q", sc.Text())
		}
		last = lease.Token(v)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if last == 0 {
		t.Fatalf("child gave no token; stderr: %s", stderr.String())
	}
	return last
}

// closedAfterGrants makes a store of 30 grants of damageKey, the last
// left held, shut down cleanly (all in lease.db), and returns its path
// and the last token.
func closedAfterGrants(t *testing.T) (string, lease.Token) {
	t.Helper()
	path := t.TempDir() + "/lease.db"
	last := crashAfterGrants(t, path, 30, holdLastEnv+"=1")
	s, err := boltstore.Open(path)
	must(t, err)
	must(t, s.Close())
	return path, last
}

// nextToken opens path (with opts) and returns the next token of
// damageKey, once its lease, if one is left, is out of the way.
func nextToken(t *testing.T, path string, opts ...boltstore.Option) (lease.Token, error) {
	t.Helper()
	s, err := boltstore.Open(path, opts...)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := s.Acquire(ctx, damageKey, "parent", time.Minute)
	var held *lease.HeldError
	if errors.As(err, &held) {
		// The child's last lease, held for an hour: a restart keeps it,
		// so a new owner gets the key only through a new token anyway;
		// take a fresh key's token instead, which I1 bounds the same way
		// through the floor.
		l, err = s.Acquire(ctx, damageKey+"/other", "parent", time.Minute)
	}
	if err != nil {
		t.Fatalf("Acquire after reopen: %v", err)
	}
	return l.Token, nil
}

// wantRefusal checks that err is Open's refusal of damage: a
// *CorruptError on one line that names file and --accept-log-loss.
func wantRefusal(t *testing.T, err error, file string) {
	t.Helper()
	var ce *boltstore.CorruptError
	if err == nil || !errors.As(err, &ce) || !errors.Is(err, boltstore.ErrCorrupt) || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Open = %v; want a refusal (*CorruptError, ErrCorrupt, lease.ErrUnavailable)", err)
	}
	msg := err.Error()
	t.Logf("refused: %s", msg)
	if strings.Contains(msg, "\n") || !strings.Contains(msg, file+" ") || !strings.Contains(msg, "--accept-log-loss") {
		t.Errorf("refusal %q is not one line naming %s and --accept-log-loss", msg, file)
	}
}

// wantAbove checks that, with AcceptLogLoss, path opens and its next token
// is above last.
func wantAbove(t *testing.T, path string, last lease.Token) {
	t.Helper()
	var loss *boltstore.CorruptError
	got, err := nextToken(t, path, boltstore.AcceptLogLoss(func(c *boltstore.CorruptError) { loss = c }))
	if err != nil {
		t.Fatalf("Open with AcceptLogLoss: %v", err)
	}
	if loss == nil || loss.Floor == 0 {
		t.Errorf("AcceptLogLoss reported %+v; want the loss with a floor", loss)
	}
	if got <= last {
		t.Fatalf("with AcceptLogLoss the next token is %d; %d was issued before (I1)", got, last)
	}
	// And the next start needs no flag.
	if got2, err := nextToken(t, path); err != nil || got2 <= got {
		t.Fatalf("the start after AcceptLogLoss: token %d, %v; want above %d", got2, err, got)
	}
}

// refusedThenAbove checks that path is refused, naming file, and that with
// AcceptLogLoss it opens and issues tokens above last.
func refusedThenAbove(t *testing.T, path, file string, last lease.Token) {
	t.Helper()
	got, err := nextToken(t, path)
	if err == nil {
		t.Fatalf("Open succeeded and issued token %d (%d was issued before); want a refusal", got, last)
	}
	wantRefusal(t, err, file)
	wantAbove(t, path, last)
}

func TestDamageRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		file   func(path string) string // the file the refusal names
		damage func(t *testing.T, path string)
	}{
		{"lease.db removed", db, func(t *testing.T, path string) { must(t, os.Remove(path)) }},
		{"lease.db emptied", db, func(t *testing.T, path string) { must(t, os.Truncate(path, 0)) }},
		{"lease.db cut to 16384 bytes", db, func(t *testing.T, path string) { must(t, os.Truncate(path, 16384)) }},
		{"log cut to 0", wal, func(t *testing.T, path string) { must(t, os.Truncate(path+"-wal", 0)) }},
		{"log cut inside its records", wal, func(t *testing.T, path string) { must(t, os.Truncate(path+"-wal", 4096)) }},
		{"log removed and made again empty", wal, func(t *testing.T, path string) {
			// The advice a missing log used to get: after a crash, silent loss.
			must(t, os.Remove(path+"-wal"))
			must(t, os.WriteFile(path+"-wal", nil, 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := t.TempDir() + "/lease.db"
			last := crashAfterGrants(t, path, 30)
			tc.damage(t, path)
			refusedThenAbove(t, path, tc.file(path), last)
		})
	}
}

func db(path string) string  { return path }
func wal(path string) string { return path + "-wal" }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOlderDBRefused puts back a copy of lease.db taken at an earlier
// kill -9, beside the current log.
func TestOlderDBRefused(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/lease.db"
	crashAfterGrants(t, path, 10)
	old, err := os.ReadFile(path)
	must(t, err)
	last := crashAfterGrants(t, path, 30)
	must(t, os.WriteFile(path, old, 0o600))
	refusedThenAbove(t, path, path, last)
}

// TestFlippedBitRefused flips one bit, after a clean shutdown, in every
// place lease.db holds the key's token, or its name.
func TestFlippedBitRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		find func(last lease.Token) []byte
		bit  int // of the last byte found
	}{
		{"in the token", func(last lease.Token) []byte { return binary.BigEndian.AppendUint64(nil, uint64(last)) }, 4},
		{"in the key's name", func(lease.Token) []byte { return []byte(damageKey) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := t.TempDir() + "/lease.db"
			last := crashAfterGrants(t, path, 30, holdLastEnv+"=1")
			s, err := boltstore.Open(path) // a clean shutdown: all in lease.db
			must(t, err)
			// The key the flipped name becomes, held too: the file then
			// has two records under one name.
			twin := damageKey[:len(damageKey)-1] + "d"
			_, err = s.Acquire(context.Background(), twin, "o", time.Hour)
			must(t, err)
			must(t, s.Close())
			b, err := os.ReadFile(path)
			must(t, err)
			needle := tc.find(last)
			n := 0
			for i := 0; ; {
				j := bytes.Index(b[i:], needle)
				if j < 0 {
					break
				}
				b[i+j+len(needle)-1] ^= 1 << tc.bit
				i += j + len(needle)
				n++
			}
			if n == 0 {
				t.Fatalf("%x not found in %s", needle, path)
			}
			must(t, os.WriteFile(path, b, 0o600))
			refusedThenAbove(t, path, path, last)
			// And the store serves every key, the twin's included.
			s, err = boltstore.Open(path)
			must(t, err)
			defer s.Close()
			if _, err := s.Get(context.Background(), twin); err != nil && !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("Get(%s) after the accepted loss: %v", twin, err)
			}
			if _, err := s.Acquire(context.Background(), twin, "o2", time.Minute); err != nil && !errors.Is(err, lease.ErrHeld) {
				t.Fatalf("Acquire(%s) after the accepted loss: %v", twin, err)
			}
		})
	}
}

// TestUndetectableLossHarmless is damage no local check can tell from a
// crash: the log's last records zeroed, an older copy of the log, both
// files copied back (a VM snapshot). The floor derived from the host clock
// at each open keeps tokens above every token issued.
func TestUndetectableLossHarmless(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, path string) lease.Token
	}{
		{"log's last records zeroed", func(t *testing.T, path string) lease.Token {
			last := crashAfterGrants(t, path, 30)
			b, err := os.ReadFile(path + "-wal")
			must(t, err)
			end := len(b)
			for end > 0 && b[end-1] == 0 {
				end--
			}
			start := max(0, (end-2048)/512*512)
			clear(b[start:end])
			must(t, os.WriteFile(path+"-wal", b, 0o600))
			return last
		}},
		{"older copy of the log", func(t *testing.T, path string) lease.Token {
			crashAfterGrants(t, path, 10)
			old, err := os.ReadFile(path + "-wal")
			must(t, err)
			last := crashAfterGrants(t, path, 30)
			must(t, os.WriteFile(path+"-wal", old, 0o600))
			return last
		}},
		{"both files copied back", func(t *testing.T, path string) lease.Token {
			crashAfterGrants(t, path, 10)
			oldDB, err := os.ReadFile(path)
			must(t, err)
			oldLog, err := os.ReadFile(path + "-wal")
			must(t, err)
			last := crashAfterGrants(t, path, 30)
			must(t, os.WriteFile(path, oldDB, 0o600))
			must(t, os.WriteFile(path+"-wal", oldLog, 0o600))
			return last
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := t.TempDir() + "/lease.db"
			last := tc.run(t, path)
			// The control: with the host clock set back to 1970, the floor
			// from the clock is no floor, and the loss shows.
			back := t.TempDir() + "/lease.db"
			copyFile(t, path, back)
			copyFile(t, path+"-wal", back+"-wal")
			if got, err := nextToken(t, back, boltstore.WithHostClock(func() time.Time { return time.Unix(0, 0) })); err != nil || got > last {
				t.Fatalf("with the host clock set back: token %d, %v; want a token issued before (<= %d): without the clock's floor this damage must show", got, err, last)
			}
			got, err := nextToken(t, path)
			if errors.Is(err, boltstore.ErrCorrupt) {
				t.Logf("refused: %v", err)
				wantAbove(t, path, last)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got <= last {
				t.Fatalf("next token %d; %d was issued before (I1)", got, last)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o600))
}

// TestCutDBRefusedCleanly: a lease.db of many pages cut to 16384 bytes is
// refused with one line; bbolt used to map it and die of SIGBUS with a
// goroutine dump.
func TestCutDBRefusedCleanly(t *testing.T) {
	t.Parallel()
	s, path := open(t)
	ctx := context.Background()
	for i := range 2000 {
		if _, err := s.Acquire(ctx, fmt.Sprintf("key/%06d", i), "o", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	must(t, s.Close())
	fi, err := os.Stat(path)
	must(t, err)
	must(t, os.Truncate(path, 16384))
	_, err = boltstore.Open(path)
	wantRefusal(t, err, path)
	t.Logf("%d bytes cut to 16384", fi.Size())
}

// TestRollbackAfterRestore: a restored store's floor is far above the
// host clock (the bump); a copy of both files taken after that, put back
// once more tokens were issued, must still not issue them again: the floor
// at each open keeps the lead the store has over the clock.
func TestRollbackAfterRestore(t *testing.T) {
	t.Parallel()
	s, _ := open(t)
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	path := t.TempDir() + "/lease.db"
	// A bump that puts the floor past the clock's microseconds.
	if _, err := boltstore.Restore(backup, path, boltstore.Bump(1<<52)); err != nil {
		t.Fatal(err)
	}
	r, err := boltstore.Open(path)
	must(t, err)
	acquireRelease(t, r, "k")
	must(t, r.Close())
	snap := t.TempDir() + "/lease.db"
	copyFile(t, path, snap)
	copyFile(t, path+"-wal", snap+"-wal")
	r, err = boltstore.Open(path)
	must(t, err)
	var last lease.Token
	for range 50 {
		last = max(last, acquireRelease(t, r, "k"))
	}
	must(t, r.Close())
	copyFile(t, snap, path)
	copyFile(t, snap+"-wal", path+"-wal")
	r, err = boltstore.Open(path)
	must(t, err)
	defer r.Close()
	if got := acquireRelease(t, r, "k"); got <= last {
		t.Fatalf("after both files were copied back: token %d; %d was issued before (I1)", got, last)
	}
}

// TestZeroedDBPageRefused: a page of lease.db zeroed, after a clean
// shutdown, is refused on one line with the way out, and the way out
// works (the file is moved aside for a new one above every token).
func TestZeroedDBPageRefused(t *testing.T) {
	t.Parallel()
	for page := int64(2); page < 8; page++ {
		t.Run(fmt.Sprint("page ", page), func(t *testing.T) {
			t.Parallel()
			path, last := closedAfterGrants(t)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(make([]byte, 4096), page*4096)
			must(t, err)
			must(t, f.Close())
			got, err := nextToken(t, path)
			if err == nil {
				// A page the file does not use: harmless, if tokens rise.
				if got <= last {
					t.Fatalf("next token %d; %d was issued before (I1)", got, last)
				}
				return
			}
			wantRefusal(t, err, path)
			wantAbove(t, path, last)
		})
	}
}

// TestDamageWhileServingStopsAndCloses: a lease record damaged in the
// file while the store serves (written over in place, which bbolt's
// mapping shows at once) is found by the checkpoint's sweep, which stops
// the store; Close still returns, with that error, and releases the file,
// whose next Open refuses the damage. The checkpoint used to drop its
// open write transaction without ending it, and Close then waited for
// bbolt's writer lock for ever.
func TestDamageWhileServingStopsAndCloses(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/lease.db"
	s, err := boltstore.Open(path)
	must(t, err)
	owner := "owner-whose-record-is-damaged"
	_, err = s.Acquire(context.Background(), "k", owner, time.Hour)
	must(t, err)
	// Other leases, so that the leases bucket has pages of its own (an
	// inline bucket is copied when the transaction opens it).
	for i := range 20 {
		_, err = s.Acquire(context.Background(), fmt.Sprintf("other/%d", i), strings.Repeat("o", 100), time.Hour)
		must(t, err)
	}
	// A backup checkpoints: the record is in the file, read from there.
	_, err = s.Backup(context.Background(), io.Discard)
	must(t, err)
	b, err := os.ReadFile(path)
	must(t, err)
	n := 0
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(owner))
		if j < 0 {
			break
		}
		disktest.Overwrite(t, path, int64(i+j))
		i += j + len(owner)
		n++
	}
	if n == 0 {
		t.Fatalf("%q not found in %s", owner, path)
	}
	if _, err := s.Backup(context.Background(), io.Discard); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("a checkpoint over the damaged record: %v, want ErrUnavailable", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Close after the failure: %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second): // real time: a hang, on the real store
		t.Fatal("Close did not return within 10 s of the failed checkpoint")
	}
	_, err = boltstore.Open(path)
	wantRefusal(t, err, path)
}

// TestDamagedDBAfterRestore: a store restored from a backup issues tokens
// a bump above the host clock (its lead, floor.go). Once its lease.db is
// damaged so that bbolt cannot serve it, AcceptLogLoss moves it aside for
// a new file, whose floor must be above those tokens too, and the clock
// alone is not: the lead, sealed in the damaged file's bytes, is read out
// of them first (salvage). The new file used to start at the clock, and
// issued again tokens the restored store had issued.
func TestDamagedDBAfterRestore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"meta bucket renamed", func(t *testing.T, path string) { renameBucket(t, path, "meta", "mdta") }},
		{"leases bucket renamed", func(t *testing.T, path string) { renameBucket(t, path, "leases", "leasds") }},
		{"bbolt's meta pages zeroed", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(make([]byte, 2*4096), 0)
			must(t, err)
			must(t, f.Close())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			restored, last := restoredAfterGrant(t)
			tc.damage(t, restored)
			refusedThenAbove(t, restored, restored, last)
		})
	}
}

// restoredAfterGrant makes a store as a restore leaves it, its tokens the
// bump ahead of the host clock (the store it was backed up from restarted
// first, so that its own tokens are the clock's), and closes it after one
// grant of damageKey, whose token it returns with the store's path.
func restoredAfterGrant(t *testing.T) (string, lease.Token) {
	t.Helper()
	s, path := open(t)
	must(t, s.Close())
	s = openAt(t, path)
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	restored := t.TempDir() + "/lease.db"
	_, err := boltstore.Restore(backup, restored)
	must(t, err)
	r, err := boltstore.Open(restored)
	must(t, err)
	l, err := r.Acquire(context.Background(), damageKey, "o", time.Hour)
	must(t, err)
	must(t, r.Close())
	return restored, l.Token
}

// TestLostDBAfterRestoreKeepsTheLead: a restored store's tokens are the
// bump (2^40 microseconds, some twelve days) ahead of the host clock, a
// lead that lease.db holds. lease.db missing, emptied or cut short before
// the page that holds it, or both files gone, used to take the lead along:
// the way out floored the new file at the clock alone (or, both files
// gone, started a new store at token 1), below the tokens just issued.
// The lead's copy beside the file (lead.go) keeps it.
func TestLostDBAfterRestoreKeepsTheLead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"lease.db missing", func(t *testing.T, path string) { must(t, os.Remove(path)) }},
		{"lease.db emptied", func(t *testing.T, path string) { must(t, os.Truncate(path, 0)) }},
		{"lease.db cut to its meta pages", func(t *testing.T, path string) { must(t, os.Truncate(path, 2*4096)) }},
		{"lease.db and its log missing", func(t *testing.T, path string) {
			must(t, os.Remove(path))
			must(t, os.Remove(path+"-wal"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			restored, last := restoredAfterGrant(t)
			if clock := lease.Token(time.Now().UnixMicro()); last < clock+1<<39 {
				t.Fatalf("the restored store issued token %d, not the bump ahead of the clock (%d)", last, clock)
			}
			tc.damage(t, restored)
			refusedThenAbove(t, restored, restored, last)
		})
	}
}

// TestLeadCopyDamagedOrMissing: lease.db's lead is the one that counts
// when the file is whole; a lead copy that is damaged, cut short or
// missing is written again from it, and one that is not the store's own
// regular file is refused before anything is opened.
func TestLeadCopyDamagedOrMissing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, copyPath string)
	}{
		{"missing", func(t *testing.T, p string) { must(t, os.Remove(p)) }},
		{"emptied", func(t *testing.T, p string) { must(t, os.Truncate(p, 0)) }},
		{"cut short", func(t *testing.T, p string) { must(t, os.Truncate(p, 20)) }},
		{"a bit flipped", func(t *testing.T, p string) {
			b := mustRead(t, p)
			b[len(b)-6] ^= 0x10
			must(t, os.WriteFile(p, b, 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			restored, last := restoredAfterGrant(t)
			good := mustRead(t, restored+"-lead")
			tc.damage(t, restored+"-lead")
			r, err := boltstore.Open(restored)
			must(t, err)
			got := acquireRelease(t, r, "k")
			if got <= last {
				t.Fatalf("token %d after %d (I1)", got, last)
			}
			must(t, r.Close())
			if b := mustRead(t, restored+"-lead"); !bytes.Equal(b, good) {
				t.Errorf("the lead copy was not written again from lease.db's lead: %q, want %q", b, good)
			}
			// With it written again, losing lease.db still keeps the lead.
			must(t, os.Remove(restored))
			refusedThenAbove(t, restored, restored, got)
		})
	}
	t.Run("a symbolic link", func(t *testing.T) {
		t.Parallel()
		s, path := open(t)
		must(t, s.Close())
		other := t.TempDir() + "/elsewhere"
		must(t, os.Rename(path+"-lead", other))
		must(t, os.Symlink(other, path+"-lead"))
		_, err := boltstore.Open(path)
		if err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("Open with the lead copy a symbolic link: %v, want a refusal naming it", err)
		}
	})
}

// TestDamagedDBSalvageIgnoresOwners: what AcceptLogLoss reads out of a
// damaged lease.db's bytes (salvage) cannot be planted by a client. An
// owner holds "clock-lead" and then 8 printable bytes sealed as the store
// seals a value; the lead it would stand for is above lease.MaxToken, as
// any made of a key's or owner's bytes is (no control characters, so no
// zero byte), and is ignored: taken, it made the loss unacceptable, the
// floor past the largest token.
func TestDamagedDBSalvageIgnoresOwners(t *testing.T) {
	t.Parallel()
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	printable := func(b []byte) bool {
		for _, c := range b {
			if c < 0x20 || c > 0x7e {
				return false
			}
		}
		return true
	}
	key := []byte("clock-lead")
	var planted []byte
	for i := uint64(0); planted == nil; i++ {
		v := []byte(fmt.Sprintf("%08d", i))
		sealed := binary.BigEndian.AppendUint32(v, crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, v))
		if printable(sealed) {
			planted = sealed
		}
	}
	path := t.TempDir() + "/lease.db"
	s, err := boltstore.Open(path)
	must(t, err)
	l, err := s.Acquire(context.Background(), damageKey, "o "+string(key)+string(planted), time.Hour)
	must(t, err)
	must(t, s.Close())
	renameBucket(t, path, "leases", "leasds")
	refusedThenAbove(t, path, path, l.Token)
}

// TestLeafElementOutsideFileRefused: one bit flipped in a leaf page's
// element header (where a value or key starts, or its size) points bbolt
// outside the mapped file, where reading the record faulted and killed the
// process (the damage campaign's seed 1796581776992762830: lease.db's bit 5
// of byte 16517, the second byte of an element's offset). Open refuses it
// on one line with the way out, and the way out works.
func TestLeafElementOutsideFileRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		field int    // byte offset of the uint32 in the element header: 4 pos, 8 ksize, 12 vsize
		flip  uint32 // bits flipped in it
	}{
		{"offset 8 KiB further", 4, 1 << 13},
		{"offset 1 GiB further", 4, 1 << 30},
		{"value 512 MiB longer", 12, 1 << 29},
		{"key 512 MiB longer", 8, 1 << 29},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, last := closedAfterGrants(t)
			b, err := os.ReadFile(path)
			must(t, err)
			if n := flipLeafElement(b, []byte(damageKey), tc.field, tc.flip); n == 0 {
				t.Fatalf("no leaf element of %q in %s", damageKey, path)
			}
			must(t, os.WriteFile(path, b, 0o600))
			refusedThenAbove(t, path, path, last)
		})
	}
}

// flipLeafElement flips bits in the uint32 at field of every leaf element
// header of key in b, a bbolt file of 4 KiB pages (freed pages' older
// copies too), and returns how many it changed. bbolt's layout: a page
// header of 16 bytes (id, flags, count, overflow) and, on a leaf page
// (flags 0x02), count element headers of 16 bytes (flags, pos, ksize,
// vsize, native byte order), each key at its header's offset plus pos and
// its value after it; a bucket's element (flags 0x01) whose value's first
// 8 bytes (its root page) are 0 holds the bucket's leaf page after 16.
func flipLeafElement(b, key []byte, field int, flip uint32) int {
	const pageSize, leaf = 4096, 0x02
	ne := binary.NativeEndian
	n := 0
	var walk func(p, end int) // the leaf page at b[p:end]
	walk = func(p, end int) {
		count := int(ne.Uint16(b[p+10:]))
		for i := range count {
			e := p + 16 + 16*i
			if e+16 > end {
				return
			}
			pos, ksize, vsize := int(ne.Uint32(b[e+4:])), int(ne.Uint32(b[e+8:])), int(ne.Uint32(b[e+12:]))
			k := e + pos
			if k+ksize+vsize > end {
				continue
			}
			if ksize == len(key) && bytes.Equal(b[k:k+ksize], key) {
				ne.PutUint32(b[e+field:], ne.Uint32(b[e+field:])^flip)
				n++
			}
			if v := k + ksize; ne.Uint32(b[e:])&1 != 0 && vsize >= 32 && ne.Uint64(b[v:]) == 0 && ne.Uint16(b[v+16+8:]) == leaf {
				walk(v+16, v+vsize)
			}
		}
	}
	for p := 0; p+pageSize <= len(b); p += pageSize {
		if ne.Uint16(b[p+8:]) == leaf {
			walk(p, p+pageSize)
		}
	}
	return n
}

// TestFreelistCountRefused: the count of the freelist's page ids, damaged
// to more than its page holds, points bbolt's read of the ids outside the
// file when it opens it.
func TestFreelistCountRefused(t *testing.T) {
	t.Parallel()
	for _, count := range []uint16{0x7fff, 0xfffe} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			t.Parallel()
			path, last := closedAfterGrants(t)
			b, err := os.ReadFile(path)
			must(t, err)
			ne := binary.NativeEndian
			// The meta page of the higher txid names the freelist bbolt reads.
			m := 0
			if ne.Uint64(b[4096+16+48:]) > ne.Uint64(b[16+48:]) {
				m = 4096
			}
			fl := int(ne.Uint64(b[m+16+32:])) * 4096
			if ne.Uint16(b[fl+8:]) != 0x10 {
				t.Fatalf("page at %d is not the freelist", fl)
			}
			ne.PutUint16(b[fl+10:], count)
			must(t, os.WriteFile(path, b, 0o600))
			refusedThenAbove(t, path, path, last)
		})
	}
}

// TestMovedAsideNeverOverwrites: a damaged lease.db that AcceptLogLoss
// moves aside in the same second as an earlier one (lease.db.damaged-UNIX,
// made here for the next few seconds) takes a name of its own: the
// earlier copy is what the operator keeps to look into the damage.
func TestMovedAsideNeverOverwrites(t *testing.T) {
	t.Parallel()
	path, _ := closedAfterGrants(t)
	now := time.Now().Unix()
	for s := now; s < now+10; s++ {
		must(t, os.WriteFile(fmt.Sprintf("%s.damaged-%d", path, s), []byte("earlier"), 0o600))
	}
	b := mustRead(t, path)
	if n := flipLeafElement(b, []byte(damageKey), 4, 1<<30); n == 0 {
		t.Fatal("no leaf element to damage")
	}
	must(t, os.WriteFile(path, b, 0o600))
	s, err := boltstore.Open(path, boltstore.AcceptLogLoss(func(*boltstore.CorruptError) {}))
	must(t, err)
	must(t, s.Close())
	copies, err := filepath.Glob(path + ".damaged-*")
	must(t, err)
	moved := 0
	for _, c := range copies {
		if string(mustRead(t, c)) != "earlier" {
			moved++
		}
	}
	if len(copies) != 11 || moved != 1 {
		t.Fatalf("after the move aside: %d copies, %d of them not an earlier one (%v); want the 10 earlier ones kept and one more", len(copies), moved, copies)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}
