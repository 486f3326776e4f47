package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// damagedRun is the log a crash left after 31 tokens on "k" and then 3
// on "late", every lease released, nothing checkpointed: before is the log
// before the last record was written, after the log once it was, and end
// where the records end.
type damagedRun struct {
	db, before, after []byte
	last              int64 // where the last record begins
	end               int64
	tokens            map[string]lease.Token // the highest issued per key
}

func crashedRun(t *testing.T) damagedRun {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.db")
	// The run's clock stands still, so that each lease, of lease.MinTTL,
	// is still held when it is released however busy the machine is; the
	// stores that recover the log judge expiry on the real clock, on which
	// the leases expire 10 ms after the run began. The records stay in the
	// log: no timed checkpoint comes during the run.
	clock := fakeclock.New(time.Now())
	s, err := Open(path, WithClock(clock), logAlone)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := damagedRun{tokens: map[string]lease.Token{}}
	// Leases of lease.MinTTL: a damaged log may lose a release, and leave
	// a lease held until it expires.
	take := func(key, owner string) {
		l, err := s.Acquire(ctx, key, owner, lease.MinTTL)
		if err != nil {
			t.Fatal(err)
		}
		run.tokens[key] = l.Token
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		flush(t, s)
	}
	for range 31 {
		take("k", "o")
	}
	for range 2 {
		take("late", "o")
	}
	if run.before, err = os.ReadFile(walPath(path)); err != nil {
		t.Fatal(err)
	}
	run.last = s.wal.off
	// The last grant's record spans blocks: its owner is long.
	l, err := s.Acquire(ctx, "late", strings.Repeat("o", lease.MaxKeyLen), lease.MinTTL)
	if err != nil {
		t.Fatal(err)
	}
	run.tokens["late"] = l.Token
	run.end = s.wal.off
	if n := s.checkpoints.Load(); n != 0 {
		t.Fatalf("%d checkpoints: the test needs the log alone", n)
	}
	if blocks := (run.end - run.last) / walBlock; blocks < 2 {
		t.Fatalf("the last record has %d blocks, want at least 2", blocks)
	}
	crash(t, s)
	if run.after, err = os.ReadFile(walPath(path)); err != nil {
		t.Fatal(err)
	}
	if run.db, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	return run
}

// place writes the run's bbolt file and log to a new directory.
func (r damagedRun) place(t *testing.T, log []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lease.db")
	if err := os.WriteFile(p, r.db, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(walPath(p), log, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// above acquires every key of the run, and one it never used, and checks
// that no token is one issued before: each is above the run's highest for
// its key, and above floor.
func (r damagedRun) above(t *testing.T, s *Store, floor lease.Token) {
	t.Helper()
	for _, key := range []string{"k", "late", "never-used"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := s.AcquireWait(ctx, key, "o", time.Hour) // a lease the log kept may be live still
		cancel()
		if err != nil {
			t.Fatalf("Acquire(%s): %v", key, err)
		}
		if l.Token <= r.tokens[key] || l.Token <= floor {
			t.Fatalf("Acquire(%s) = token %d; %d was issued before, floor %d (I1)", key, l.Token, r.tokens[key], floor)
		}
		if err := s.Release(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDamagedLog is issue 22's case: tokens taken on a key, the server
// killed, 4 bytes of the log overwritten. Wherever the bytes are (a
// record's header, a middle record, the last record, the zeros past the
// records), Open either refuses the store with an error that names the
// log, the offset and the way to accept the loss, or opens it without
// issuing any token again; and once the loss is accepted, every key's next
// token is above every token issued, and stays so across a reopen.
func TestDamagedLog(t *testing.T) {
	t.Parallel()
	run := crashedRun(t)
	offsets := []int64{0, 4, 12, 20, 24, 28, 32, 200, 511, 512, 1000,
		run.last - walBlock, run.last, run.last + 8, run.last + walBlock, run.end - 4, run.end, run.end + 600}
	for o := int64(0); o < run.end; o += 1024 + 52 {
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)
	refused := 0
	for _, off := range slices.Compact(offsets) {
		t.Run(fmt.Sprint("at ", off), func(t *testing.T) {
			log := slices.Clone(run.after)
			copy(log[off:], "\xde\xad\xbe\xef")
			if string(log[off:off+4]) == string(run.after[off:off+4]) {
				return // the bytes are there already: nothing is damaged
			}
			p := run.place(t, log)
			s, err := Open(p)
			if err == nil {
				defer s.Close()
				run.above(t, s, 0)
				return
			}
			refused++
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("Open: %v; want a *CorruptError matching ErrCorrupt and lease.ErrUnavailable", err)
			}
			msg := err.Error()
			for _, want := range []string{"boltstore: ", walPath(p), fmt.Sprintf("offset %d", ce.Offset), "--accept-log-loss"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not name %q", msg, want)
				}
			}
			if ce.Offset > off || ce.Offset < off-run.end {
				t.Errorf("damage at %d reported at offset %d", off, ce.Offset)
			}
			if got, _ := os.ReadFile(walPath(p)); string(got) != string(log) {
				t.Errorf("a refused Open changed the log")
			}

			var loss *CorruptError
			s, err = Open(p, AcceptLogLoss(func(c *CorruptError) { loss = c }))
			if err != nil {
				t.Fatalf("Open with AcceptLogLoss: %v", err)
			}
			if loss == nil || loss.Floor == 0 || loss.Offset != ce.Offset {
				t.Fatalf("AcceptLogLoss reported %+v; want the loss at %d with a floor", loss, ce.Offset)
			}
			t.Logf("accepted: %v", loss)
			run.above(t, s, loss.Floor)
			crash(t, s)
			s, err = Open(p) // the floor is in the file; the log holds this run's records only
			if err != nil {
				t.Fatalf("reopen after the loss was accepted: %v", err)
			}
			defer s.Close()
			run.above(t, s, loss.Floor)
		})
	}
	t.Logf("%d of %d damaged logs refused", refused, len(offsets))
}

// TestTornLastWrite: a crash inside the write of the last record leaves
// each of its blocks new or as it was; Open recovers every earlier record
// and drops that one (never acknowledged), without a word.
func TestTornLastWrite(t *testing.T) {
	t.Parallel()
	run := crashedRun(t)
	blocks := int((run.end - run.last) / walBlock)
	for mask := range 1<<blocks - 1 {
		t.Run(fmt.Sprintf("blocks %b written", mask), func(t *testing.T) {
			log := slices.Clone(run.after)
			for i := range blocks {
				if mask&(1<<i) == 0 {
					b := run.last + int64(i)*walBlock
					copy(log[b:b+walBlock], run.before[b:b+walBlock])
				}
			}
			// No floor from the clock: the log alone is under test.
			s, err := Open(run.place(t, log), WithHostClock(func() time.Time { return time.Unix(0, 0) }))
			if err != nil {
				t.Fatalf("Open after a torn last write: %v", err)
			}
			defer s.Close()
			// The torn record held the last token of "late"; the one before
			// it is the highest acknowledged if the record was never
			// answered, and Open must have kept it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := s.AcquireWait(ctx, "late", "o", time.Hour)
			if err != nil || l.Token != run.tokens["late"] {
				t.Fatalf("Acquire(late) = %d, %v; want %d, the token of the torn record, issued again as it never was answered", l.Token, err, run.tokens["late"])
			}
			if l, err := s.AcquireWait(ctx, "k", "o", time.Hour); err != nil || l.Token <= run.tokens["k"] {
				t.Fatalf("Acquire(k) = %d, %v; want above %d", l.Token, err, run.tokens["k"])
			}
		})
	}
}
