package boltstore_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
)

// flipEnv makes the test binary a child that judges damaged copies of a
// store: "SRC:DIR:LAST:LIST" copies the store at SRC (lease.db and its
// log) into DIR once per BIT of the file LIST ("BIT,BIT,…"), with that bit of lease.db flipped, opens
// it and prints "BIT OUTCOME [DETAIL]" (flipOutcome). A flip that kills
// the process (a fault) prints nothing: the parent names it.
const flipEnv = "BOLTSTORE_TEST_FLIP"

// The outcomes of a flipped bit that keep I1 and say what happened: the
// store opens and serves with tokens above every token issued before
// (clean), or Open refuses on one line naming the file and the way out,
// and the way out opens it so (refused).
const (
	flipClean   = "clean"
	flipRefused = "refused"
)

// flipChild runs the child side of TestEveryBitFlipped when flipEnv asks
// for it, and reports whether it did.
func flipChild() bool {
	v := os.Getenv(flipEnv)
	if v == "" {
		return false
	}
	parts := strings.SplitN(v, ":", 4)
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "child: bad", flipEnv, v)
		os.Exit(2)
	}
	src, dir := parts[0], parts[1]
	last, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	db, err := os.ReadFile(src)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	log, err := os.ReadFile(src + "-wal")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	// A flip that makes Open spin or grow without bound (one did: 15 GB
	// in seven minutes) is ended here, its bit named, rather than taking
	// the machine down.
	var current atomic.Int64
	go flipWatchdog(&current)
	list, err := os.ReadFile(parts[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	for _, f := range strings.Split(string(list), ",") {
		bit, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		current.Store(int64(bit))
		outcome := flipOutcome(dir, db, log, bit, lease.Token(last))
		current.Store(-1)
		fmt.Println(bit, outcome)
	}
	return true
}

// The bounds of one trial in the child: a real-time limit and a heap.
const (
	flipTrialLimit = 30 * time.Second
	flipHeapLimit  = 1 << 30
)

// flipWatchdog ends the child, printing "BIT broken …" for the bit being
// judged, when a trial outlasts flipTrialLimit or the heap passes
// flipHeapLimit.
func flipWatchdog(current *atomic.Int64) {
	var (
		bit   = int64(-1)
		since time.Time
		ms    runtime.MemStats
	)
	for {
		time.Sleep(100 * time.Millisecond) // real time: a watchdog of a real process
		b := current.Load()
		if b != bit {
			bit, since = b, time.Now()
		}
		if bit < 0 {
			continue
		}
		runtime.ReadMemStats(&ms)
		switch {
		case ms.HeapAlloc > flipHeapLimit:
			fmt.Printf("%d broken Open's heap grew past %d MiB\n", bit, flipHeapLimit>>20)
		case time.Since(since) > flipTrialLimit:
			fmt.Printf("%d broken Open took more than %v\n", bit, flipTrialLimit)
		default:
			continue
		}
		os.Exit(3)
	}
}

// flipOutcome judges one flipped bit: a fresh copy of the store in dir
// with bit of db flipped.
func flipOutcome(dir string, db, log []byte, bit int, last lease.Token) string {
	if err := os.RemoveAll(dir); err != nil {
		return "setup " + err.Error()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "setup " + err.Error()
	}
	path := filepath.Join(dir, "lease.db")
	damaged := slices.Clone(db)
	if bit >= 0 { // -1: none, for the negative control
		damaged[bit/8] ^= 1 << (bit % 8)
	}
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		return "setup " + err.Error()
	}
	if err := os.WriteFile(path+"-wal", log, 0o600); err != nil {
		return "setup " + err.Error()
	}
	s, err := boltstore.Open(path)
	if err == nil {
		if why := flipServes(s, last); why != "" {
			return "broken " + why
		}
		return flipClean
	}
	var ce *boltstore.CorruptError
	msg := err.Error()
	switch {
	case !errors.As(err, &ce) || !errors.Is(err, lease.ErrUnavailable):
		return "unclear not a *CorruptError: " + msg
	case strings.Contains(msg, "\n") || !strings.Contains(msg, path+" ") || !strings.Contains(msg, "--accept-log-loss"):
		return "unclear " + msg
	}
	s, err = boltstore.Open(path, boltstore.AcceptLogLoss(func(*boltstore.CorruptError) {}))
	if err != nil {
		return "broken AcceptLogLoss: " + err.Error()
	}
	if why := flipServes(s, last); why != "" {
		return "broken after AcceptLogLoss: " + why
	}
	// And the next start needs no flag.
	if s, err = boltstore.Open(path); err != nil {
		return "broken the start after AcceptLogLoss: " + err.Error()
	}
	if why := flipServes(s, last); why != "" {
		return "broken the start after AcceptLogLoss: " + why
	}
	return flipRefused
}

// flipServes closes s after checking that it serves: damageKey (or, while
// its last lease is held, a key beside it) and a new key are granted tokens
// above last, and renewed and released.
func flipServes(s *boltstore.Store, last lease.Token) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var why string
	for _, key := range []string{damageKey, "flip/new"} {
		l, err := s.Acquire(ctx, key, "judge", time.Minute)
		var held *lease.HeldError
		if errors.As(err, &held) {
			l, err = s.Acquire(ctx, key+"/other", "judge", time.Minute)
		}
		switch {
		case err != nil:
			why = fmt.Sprintf("Acquire(%s): %v", key, err)
		case l.Token <= last:
			why = fmt.Sprintf("REISSUED: %s got token %d, %d was issued before", key, l.Token, last)
		}
		if why != "" {
			break
		}
		if _, err := s.Renew(ctx, l, time.Minute); err != nil {
			why = fmt.Sprintf("Renew(%s): %v", key, err)
			break
		}
		if err := s.Release(ctx, l); err != nil {
			why = fmt.Sprintf("Release(%s): %v", key, err)
			break
		}
	}
	if err := s.Close(); err != nil && why == "" {
		why = "Close: " + err.Error()
	}
	return why
}

// TestEveryBitFlipped flips one bit of a store's lease.db at a time and
// opens the copy, in a child process so that a fault is seen rather than
// fatal: every flip must leave a store that serves with tokens above all
// issued, or be refused on one line with the way out, which works. The
// bits are those of the file's pages in use (page headers, element
// headers, keys and values; not the unused tail of a page, which nothing
// reads): with LEASE_CHAOS_LONG set (make chaos), every one of a small
// store's and a sample of a larger one's, else a sample of flipSample of
// each, seeded (LEASE_CRASH_SEED replays it).
func TestEveryBitFlipped(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a damaged store thousands of times in child processes; skipped in -short")
	}
	t.Parallel()
	// A small store, its buckets inline in the root page, and one whose
	// leases take leaf pages under a branch page of their own.
	// The long form flips every bit of the small one and a sample of
	// 20,000 of the larger one's 255,000 (every one would take hours).
	for _, tc := range []struct {
		name   string
		others int // leases held besides damageKey's
		long   int // bits flipped in the long form; 0: all
	}{{"inline", 1, 0}, {"paged", 400, 20000}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flipEveryBit(t, tc.others, tc.long)
		})
	}
}

// flipEveryBit is TestEveryBitFlipped on a store of damageKey's grants and
// others leases held besides, flipping long bits in the long form (0:
// every one).
func flipEveryBit(t *testing.T, others, long int) {
	src := filepath.Join(t.TempDir(), "lease.db")
	last := crashAfterGrants(t, src, 30, holdLastEnv+"=1")
	s, err := boltstore.Open(src) // a clean shutdown: all in lease.db
	must(t, err)
	for i := range others {
		_, err = s.Acquire(context.Background(), fmt.Sprintf("flip/other/%03d", i), "o", time.Hour)
		must(t, err)
	}
	must(t, s.Close())
	db, err := os.ReadFile(src)
	must(t, err)
	log, err := os.ReadFile(src + "-wal")
	must(t, err)
	// The negative control: the judge finds a token issued again in an
	// undamaged copy judged as if the highest token had been issued.
	if got := flipOutcome(filepath.Join(t.TempDir(), "control"), db, log, -1, lease.MaxToken); !strings.HasPrefix(got, "broken REISSUED") {
		t.Fatalf("an undamaged copy judged against MaxToken: %q; want REISSUED", got)
	}
	bits := bitsInUse(t, db)
	all := len(bits)
	sample := flipSample
	if os.Getenv("LEASE_CHAOS_LONG") != "" {
		sample = long
	}
	if sample > 0 {
		seed := flipSeed(t)
		r := rand.New(rand.NewPCG(seed, seed))
		r.Shuffle(len(bits), func(i, j int) { bits[i], bits[j] = bits[j], bits[i] })
		bits = bits[:min(sample, len(bits))]
		slices.Sort(bits)
	}
	outcomes := map[string]int{}
	var failed []string
	dir := filepath.Join(t.TempDir(), "trial")
	for len(bits) > 0 {
		args := make([]string, len(bits))
		for i, b := range bits {
			args[i] = strconv.Itoa(b)
		}
		list := filepath.Join(t.TempDir(), "bits")
		must(t, os.WriteFile(list, []byte(strings.Join(args, ",")), 0o600))
		cmd, stdout, stderr := startChild(t, fmt.Sprintf("%s=%s:%s:%d:%s", flipEnv, src, dir, last, list))
		done := 0
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			f, outcome, _ := strings.Cut(sc.Text(), " ")
			if f != args[done] {
				t.Fatalf("child judged bit %s, want %s", f, args[done])
			}
			done++
			kind, _, _ := strings.Cut(outcome, " ")
			outcomes[kind]++
			if kind != flipClean && kind != flipRefused {
				failed = append(failed, fmt.Sprintf("bit %s (byte %d): %s", f, bits[done-1]/8, outcome))
			}
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case done == len(bits) && err == nil:
		case errors.As(err, &exit) && exit.ExitCode() == 3 && done > 0:
			// The watchdog ended the child after naming bits[done-1].
			bits = bits[done:]
			continue
		case done == len(bits):
			t.Fatalf("child: %v; stderr: %s", err, stderr.String())
		default:
			// The child died judging bits[done].
			first, _, _ := strings.Cut(stderr.String(), "\n")
			outcomes["died"]++
			failed = append(failed, fmt.Sprintf("bit %d (byte %d): the process died (%v): %s", bits[done], bits[done]/8, err, first))
			bits = bits[done+1:]
			continue
		}
		break
	}
	t.Logf("%d of the %d bits in use of a %d-byte lease.db flipped, one at a time: %v", sumCounts(outcomes), all, len(db), outcomes)
	for _, f := range failed[:min(len(failed), 20)] {
		t.Error(f)
	}
	if len(failed) > 20 {
		t.Errorf("and %d more", len(failed)-20)
	}
}

func sumCounts(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// flipSeed is LEASE_CRASH_SEED, or a fresh seed, logged.
func flipSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if v := os.Getenv("LEASE_CRASH_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("LEASE_CRASH_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (LEASE_CRASH_SEED=%d replays it)", seed, seed)
	return seed
}

// bitsInUse lists the bits of db, a bbolt file of 4 KiB pages, that a
// reader may read: each page's header and, on the meta pages, the meta;
// on a freelist page its ids; on a branch or leaf page its element headers
// and the keys and values after them, up to the end of the last.
func bitsInUse(t *testing.T, db []byte) []int {
	const pageSize = 4096
	ne := binary.NativeEndian
	var bits []int
	for p := 0; p+pageSize <= len(db); p += pageSize {
		flags, count := ne.Uint16(db[p+8:]), int(ne.Uint16(db[p+10:]))
		used := 16
		switch {
		case p < 2*pageSize:
			used = 16 + 64 // the meta
		case flags == 0x10:
			used = 16 + 8*count
		case flags == 0x01, flags == 0x02:
			used = 16 + 16*count
			for i := range count {
				e := p + 16 + 16*i
				if flags == 0x01 {
					used = max(used, e-p+int(ne.Uint32(db[e:]))+int(ne.Uint32(db[e+4:])))
				} else {
					used = max(used, e-p+int(ne.Uint32(db[e+4:]))+int(ne.Uint32(db[e+8:]))+int(ne.Uint32(db[e+12:])))
				}
			}
		}
		if used > pageSize {
			t.Fatalf("page at %d uses %d bytes: an overflow page, which this test does not lay out", p, used)
		}
		for b := p * 8; b < (p+used)*8; b++ {
			bits = append(bits, b)
		}
	}
	return bits
}
