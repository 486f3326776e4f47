package damage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// The store's files, as `lease serve --data-dir` names them.
const (
	DBFile  = "lease.db"
	LogFile = "lease.db-wal"
	// LeadFile is the copy of the store's lead beside it (boltstore's lead.go).
	LeadFile = "lease.db-lead"
)

// A Recipe is one damage done to a crash state's files before the restart.
type Recipe struct {
	Class string // which kind of damage (Classes)
	State string // the crash state it is done to
	n     int    // its place in the enumeration
	seed  uint64
}

// Name says what the recipe is, before it is applied (Apply says exactly
// where it struck).
func (r Recipe) Name() string { return fmt.Sprintf("#%d %s on %s", r.n, r.Class, r.State) }

// class is one kind of damage: apply does it to the files in dir, drawing
// what it needs (an offset, a bit) from rng, and says what it did. Where
// it has a few discrete choices (a snapshot, a size) it takes them in turn
// by round, the recipe's count among those of its class, so that a short
// run makes each choice once rather than by chance.
type class struct {
	name  string
	apply func(dir string, src *State, others []*State, rng *rand.Rand, round int) (string, error)
}

// classes are the kinds of damage, every row of issue 28's table and more:
// files removed, emptied, cut, rolled back, swapped, zero-filled, and bits
// flipped where the tokens are.
var classes = []class{
	{"rm-db", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		return "lease.db removed", os.Remove(filepath.Join(dir, DBFile))
	}},
	{"empty-db", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		return "lease.db emptied", os.Truncate(filepath.Join(dir, DBFile), 0)
	}},
	{"rm-both", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		for _, f := range []string{DBFile, LogFile} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				return "", err
			}
		}
		return "lease.db and lease.db-wal removed (lease.db-lead left)", nil
	}},
	{"rm-lead", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		return "lease.db-lead removed", os.Remove(filepath.Join(dir, LeadFile))
	}},
	{"rm-log", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		return "lease.db-wal removed", os.Remove(filepath.Join(dir, LogFile))
	}},
	{"empty-log", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		return "lease.db-wal emptied (install -m 600 /dev/null)", os.Truncate(filepath.Join(dir, LogFile), 0)
	}},
	{"cut-log", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, LogFile)
		end, err := extent(path)
		if err != nil {
			return "", err
		}
		var at int64
		switch {
		case end == 0:
		case rng.IntN(3) == 0:
			at = rng.Int64N((end+511)/512) * 512 // at a block boundary
		default:
			at = rng.Int64N(end) // inside a block
		}
		return fmt.Sprintf("lease.db-wal cut at %d of %d written", at, end), os.Truncate(path, at)
	}},
	{"zero-log-tail", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, LogFile)
		end, err := extent(path)
		if err != nil {
			return "", err
		}
		blocks := 1 + int64((round+round/len(CrashPoints))%4)
		from := max(0, (end+511)/512*512-blocks*512)
		return fmt.Sprintf("lease.db-wal's last %d written blocks zeroed (%d to %d)", blocks, from, end), zero(path, from, end-from)
	}},
	{"zero-log-page", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, LogFile)
		end, err := extent(path)
		if err != nil {
			return "", err
		}
		at := rng.Int64N(max(1, (end+4095)/4096)) * 4096
		return fmt.Sprintf("lease.db-wal's 4 KiB at %d zeroed (%d written)", at, end), zero(path, at, 4096)
	}},
	{"flip-log", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, LogFile)
		end, err := extent(path)
		if err != nil {
			return "", err
		}
		at, bit := rng.Int64N(max(1, end)), rng.IntN(8)
		return fmt.Sprintf("lease.db-wal bit %d of byte %d flipped (%d written)", bit, at, end), flip(path, at, bit)
	}},
	{"old-db", func(dir string, src *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		snap := src.snapshot(round)
		return "lease.db replaced by its " + snap.name + " copy", copyFile(filepath.Join(snap.dir, DBFile), filepath.Join(dir, DBFile))
	}},
	{"old-log", func(dir string, src *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		snap := src.snapshot(round)
		return "lease.db-wal replaced by its " + snap.name + " copy", copyFile(filepath.Join(snap.dir, LogFile), filepath.Join(dir, LogFile))
	}},
	{"old-both", func(dir string, src *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		snap := src.snapshot(round)
		for _, f := range []string{DBFile, LogFile} {
			if err := copyFile(filepath.Join(snap.dir, f), filepath.Join(dir, f)); err != nil {
				return "", err
			}
		}
		return "both files rolled back to their " + snap.name + " copies", nil
	}},
	{"old-all", func(dir string, src *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		snap := src.snapshot(round)
		for _, f := range []string{DBFile, LogFile, LeadFile} {
			if err := copyFile(filepath.Join(snap.dir, f), filepath.Join(dir, f)); err != nil {
				return "", err
			}
		}
		return "lease.db, its log and its lead's copy rolled back to their " + snap.name + " copies", nil
	}},
	{"foreign-db", func(dir string, src *State, others []*State, rng *rand.Rand, round int) (string, error) {
		o := others[rng.IntN(len(others))]
		for o == src && len(others) > 1 {
			o = others[rng.IntN(len(others))]
		}
		return "lease.db replaced by the one of crash state " + o.Name, copyFile(filepath.Join(o.Dir, DBFile), filepath.Join(dir, DBFile))
	}},
	{"swap", func(dir string, _ *State, _ []*State, _ *rand.Rand, _ int) (string, error) {
		db, log, tmp := filepath.Join(dir, DBFile), filepath.Join(dir, LogFile), filepath.Join(dir, "swap")
		for _, mv := range [][2]string{{db, tmp}, {log, db}, {tmp, log}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				return "", err
			}
		}
		return "lease.db and lease.db-wal swapped", nil
	}},
	{"cut-db", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, DBFile)
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		sizes := []int64{16384, 4096, 8192, 12288, fi.Size() - 4096, fi.Size() / 2, 1 + rng.Int64N(max(1, fi.Size()-1))}
		size := max(0, sizes[round%len(sizes)])
		return fmt.Sprintf("lease.db cut to %d of %d bytes", size, fi.Size()), os.Truncate(path, size)
	}},
	{"zero-db-page", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, DBFile)
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		page := rng.Int64N(max(1, fi.Size()/4096))
		if rng.IntN(3) == 0 {
			page = rng.Int64N(2) // a meta page
		}
		return fmt.Sprintf("lease.db page %d of %d zeroed", page, fi.Size()/4096), zero(path, page*4096, 4096)
	}},
	{"flip-db", func(dir string, _ *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, DBFile)
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		at := rng.Int64N(max(1, fi.Size()))
		if rng.IntN(3) == 0 {
			at = rng.Int64N(min(8192, max(1, fi.Size()))) // the meta pages
		}
		bit := rng.IntN(8)
		return fmt.Sprintf("lease.db bit %d of byte %d flipped", bit, at), flip(path, at, bit)
	}},
	{"flip-db-mark", func(dir string, src *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		// bbolt stores a value right after its key: the 8 bytes after a
		// key's name are its high-water mark (tokens bucket) or its
		// lease's token (leases bucket), big-endian. Pages a checkpoint
		// freed keep old copies: half the time every copy is struck.
		path := filepath.Join(dir, DBFile)
		key, at, ok, err := findKey(path, src, rng)
		if err != nil || !ok {
			return "lease.db holds no key name: nothing flipped", err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		mark := at + int64(len(key))
		if mark+8 > int64(len(b)) {
			return "lease.db's last key name has no value after it: nothing flipped", nil
		}
		// Mostly a set bit of those today's tokens use, which lowers the
		// value: the dangerous way; else any bit.
		bit := rng.IntN(64)
		var set []int
		for i := range 16 {
			if b[mark+7-int64(i/8)]&(1<<(i%8)) != 0 {
				set = append(set, i)
			}
		}
		if len(set) > 0 && rng.IntN(4) != 0 {
			bit = set[rng.IntN(len(set))]
		}
		where := []int64{at}
		what := fmt.Sprintf("at %d", at)
		if rng.IntN(2) == 0 {
			where, what = keyPlaces(b, key), "in every copy"
		}
		for _, at := range where {
			if at+int64(len(key))+8 > int64(len(b)) {
				continue
			}
			if err := flip(path, at+int64(len(key))+7-int64(bit/8), bit%8); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("lease.db bit %d of the 8 bytes after %q %s flipped", bit, key, what), nil
	}},
	{"flip-db-name", func(dir string, src *State, _ []*State, rng *rand.Rand, round int) (string, error) {
		path := filepath.Join(dir, DBFile)
		key, at, ok, err := findKey(path, src, rng)
		if err != nil || !ok {
			return "lease.db holds no key name: nothing flipped", err
		}
		i, bit := rng.IntN(len(key)), rng.IntN(8)
		return fmt.Sprintf("lease.db bit %d of byte %d of %q at %d flipped", bit, i, key, at), flip(path, at+int64(i), bit)
	}},
}

// Classes are the names of the kinds of damage, in enumeration order.
func Classes() []string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.name
	}
	return names
}

// Recipes enumerates n recipes from seed: class i mod len(Classes()), on
// crash state (i / len(Classes())) mod len(states), so that n ≥
// len(Classes())·len(states) does every kind of damage to every state. The
// same seed gives the same recipes; where each strikes depends on the
// state's files too.
func Recipes(seed uint64, n int, states []string) []Recipe {
	rs := make([]Recipe, n)
	for i := range rs {
		rs[i] = Recipe{Class: classes[i%len(classes)].name, State: states[(i/len(classes))%len(states)], n: i, seed: seed}
	}
	return rs
}

// Apply does r to the files in dir, a copy of src's; others are every
// crash state of the campaign. It says where the damage struck.
func (r Recipe) Apply(dir string, src *State, others []*State) (string, error) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(r.n)))
	for _, c := range classes {
		if c.name == r.Class {
			return c.apply(dir, src, others, rng, r.n/len(classes))
		}
	}
	return "", fmt.Errorf("damage: no class %q", r.Class)
}

// extent is how far the file at path has been written: the end of its
// last non-zero byte (the log is allocated ahead, in zeroes).
func extent(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return int64(end), nil
}

// findKey picks, with rng, one place where one of src's keys is written
// in the file at path: half the time one followed by the key's highest
// token issued, its live high-water mark most likely (if there is one),
// else any.
func findKey(path string, src *State, rng *rand.Rand) (key string, at int64, ok bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, false, err
	}
	type hit struct {
		key string
		at  int64
	}
	var hits, marks []hit
	for _, k := range src.Keys {
		for _, at := range keyPlaces(b, k) {
			hits = append(hits, hit{k, at})
			if v := at + int64(len(k)); v+8 <= int64(len(b)) && binary.BigEndian.Uint64(b[v:]) == uint64(src.Issued[k]) {
				marks = append(marks, hit{k, at})
			}
		}
	}
	if len(marks) > 0 && rng.IntN(2) == 0 {
		hits = marks
	}
	if len(hits) == 0 {
		return "", 0, false, nil
	}
	h := hits[rng.IntN(len(hits))]
	return h.key, h.at, true, nil
}

// keyPlaces are the offsets where key is written in b.
func keyPlaces(b []byte, key string) []int64 {
	var at []int64
	for from := 0; ; {
		i := bytes.Index(b[from:], []byte(key))
		if i < 0 {
			return at
		}
		at = append(at, int64(from+i))
		from += i + 1
	}
}

// flip inverts bit (0 is the lowest) of the byte at off.
func flip(path string, off int64, bit int) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return fmt.Errorf("damage: reading byte %d of %s: %w", off, path, err)
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Close()
}

// zero writes n zero bytes at off, within the file's current size.
func zero(path string, off, n int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	n = max(0, min(n, fi.Size()-off))
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		return err
	}
	return f.Close()
}

// copyFile copies src over dst (mode 0600, as the store keeps its files);
// a missing src removes dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if os.IsNotExist(err) {
		if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}
