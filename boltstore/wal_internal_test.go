package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// logOf builds, in a fresh log file of epoch, one record per batch of keys
// (each entry a token put), and returns the file's bytes and the offsets at
// which each record ends.
func logOf(t *testing.T, epoch uint64, batches ...[]string) ([]byte, []int64) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "x.db")
	w, data, _, err := openWAL(db, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if len(data) != 0 {
		t.Fatalf("a new log holds %d bytes", len(data))
	}
	if err := w.reserve(); err != nil {
		t.Fatal(err)
	}
	if err := w.prepare(); err != nil {
		t.Fatal(err)
	}
	w.restart(epoch)
	var ends []int64
	for _, keys := range batches {
		for _, k := range keys {
			w.add('t', 'p', []byte(k), []byte("v-"+k))
		}
		if err := w.write(); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, w.off)
	}
	data, err = os.ReadFile(w.path)
	if err != nil {
		t.Fatal(err)
	}
	return data, ends
}

func keysOf(es []walEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, string(e.key))
	}
	return out
}

// long is a key that makes its record span blocks.
var long = strings.Repeat("L", 2*walPayload)

func TestReplay(t *testing.T) {
	data, ends := logOf(t, 7, []string{"a", "b"}, []string{"c"}, []string{"d", long})
	all := fmt.Sprint([]string{"a", "b", "c", "d", long})
	with := func(edit func(d []byte) []byte) func() []byte {
		return func() []byte { return edit(append([]byte(nil), data...)) }
	}
	for _, tc := range []struct {
		name     string
		data     func() []byte
		epoch    uint64
		want     string
		end      int64 // where the replayed records end
		damageAt int64 // -1: none
	}{
		{"whole", with(func(d []byte) []byte { return d }), 7, all, ends[2], -1},
		{"other epoch", with(func(d []byte) []byte { return d }), 8, "[]", 0, -1},
		{"tail lost", with(func(d []byte) []byte { return d[:ends[1]] }), 7, "[a b c]", ends[1], -1},
		{"last record cut short", with(func(d []byte) []byte { return d[:ends[2]-1] }), 7, "[a b c]", ends[1], -1},
		{"last record cut in a header", with(func(d []byte) []byte { return d[:ends[1]+walBlockHeader-1] }), 7, "[a b c]", ends[1], -1},
		{"last record torn: first block not written", with(func(d []byte) []byte {
			clear(d[ends[1] : ends[1]+walBlock])
			return d
		}), 7, "[a b c]", ends[1], -1},
		{"last record torn: middle block not written", with(func(d []byte) []byte {
			clear(d[ends[1]+walBlock : ends[1]+2*walBlock])
			return d
		}), 7, "[a b c]", ends[1], -1},
		{"middle record damaged", with(func(d []byte) []byte {
			d[ends[0]+walBlockHeader+3] ^= 1 // inside record 2's entries
			return d
		}), 7, "[a b]", ends[0], ends[0]},
		{"middle record missing", with(func(d []byte) []byte {
			clear(d[ends[0]:ends[1]])
			return d
		}), 7, "[a b]", ends[0], ends[0]},
		{"last record damaged", with(func(d []byte) []byte {
			d[ends[2]-walBlock+walBlockHeader] ^= 0x80
			return d
		}), 7, "[a b c]", ends[1], ends[2] - walBlock},
		{"first header damaged", with(func(d []byte) []byte {
			copy(d, "\xde\xad\xbe\xef")
			return d
		}), 7, "[]", 0, 0},
		{"zeros past the records damaged", with(func(d []byte) []byte {
			d[ends[2]+1000] = 1
			return d
		}), 7, all, ends[2], ends[2] + 1000/walBlock*walBlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, end, dmg := replay(tc.data(), tc.epoch)
			if got := fmt.Sprint(keysOf(es)); got != tc.want {
				t.Errorf("replayed %.60s, want %.60s", got, tc.want)
			}
			if int64(end) != tc.end {
				t.Errorf("replayed records end at %d, want %d", end, tc.end)
			}
			switch {
			case tc.damageAt < 0 && dmg != nil:
				t.Errorf("damage at %d (%s), want none", dmg.at, dmg.reason)
			case tc.damageAt >= 0 && dmg == nil:
				t.Errorf("no damage found, want damage at %d", tc.damageAt)
			case dmg != nil && (dmg.at != tc.damageAt || dmg.from != tc.end):
				t.Errorf("damage at %d from %d (%s), want at %d from %d", dmg.at, dmg.from, dmg.reason, tc.damageAt, tc.end)
			}
		})
	}
	// A log restarted after a checkpoint: epoch 8's record 1 overwrites
	// epoch 7's record 1, and epoch 7's record 2, intact and numbered 2,
	// follows: it must not be replayed, and is no damage.
	older, oends := logOf(t, 7, []string{"y"}, []string{"c"})
	newer, nends := logOf(t, 8, []string{"x"})
	if nends[0] != oends[0] {
		t.Fatalf("records of %d and %d bytes", nends[0], oends[0])
	}
	mixed := append(append([]byte(nil), newer[:nends[0]]...), older[oends[0]:]...)
	if es, _, dmg := replay(mixed, 8); dmg != nil || fmt.Sprint(keysOf(es)) != "[x]" {
		t.Fatalf("replay after a restart = %v, %v; want [x] alone", keysOf(es), dmg)
	}
	if es, _, dmg := replay(older, 7); dmg != nil || fmt.Sprint(keysOf(es)) != "[y c]" {
		t.Fatalf("replay of the older log = %v, %v; want [y c]", keysOf(es), dmg)
	}
}

// TestReplayDamageAnywhere: four bytes overwritten anywhere in a log's
// records, or in the zeros after them, are found, never taken for the
// end of the log.
func TestReplayDamageAnywhere(t *testing.T) {
	data, ends := logOf(t, 3, []string{"a", "b"}, []string{"c"}, []string{long}, []string{"e"})
	last := ends[len(ends)-1]
	data = data[:last+4*walBlock] // the log's first chunk is mostly zeros
	for off := int64(0); off < last+2*walBlock; off++ {
		d := append([]byte(nil), data...)
		for i := range int64(4) {
			d[off+i] ^= 0xa5
		}
		es, end, dmg := replay(d, 3)
		if dmg == nil {
			t.Fatalf("4 bytes damaged at %d: replayed %d entries to %d and found no damage", off, len(es), end)
		}
		if dmg.from != int64(end) || dmg.at > off || dmg.at < int64(end) {
			t.Fatalf("4 bytes damaged at %d: damage reported at %d from %d, replayed to %d", off, dmg.at, dmg.from, end)
		}
	}
}

// TestReplayTornWrite: a write of the last record that did not finish
// leaves each of its blocks new or as it was (zeros, or blocks of an
// earlier epoch's records); every such mix but the whole record replays
// the records before it, and is no damage.
func TestReplayTornWrite(t *testing.T) {
	batches := [][]string{{"a"}, {"b"}, {"c", long, long}}
	data, ends := logOf(t, 9, batches...)
	stale, _ := logOf(t, 8, []string{long, long, long}, []string{long, long})
	from, to := ends[1], ends[2]
	data = data[:to+2*walBlock] // the log's first chunk is mostly zeros
	blocks := int((to - from) / walBlock)
	if blocks < 3 {
		t.Fatalf("the last record has %d blocks; the test needs at least 3", blocks)
	}
	for _, under := range []struct {
		name string
		data []byte
	}{{"zeros", make([]byte, len(data))}, {"older records", stale}} {
		for mask := range 1<<blocks - 1 { // the last mask, every block new, is the whole record
			d := append([]byte(nil), data...)
			for i := range blocks {
				if mask&(1<<i) == 0 {
					b := from + int64(i)*walBlock
					copy(d[b:b+walBlock], under.data[b:b+walBlock])
				}
			}
			es, end, dmg := replay(d, 9)
			if dmg != nil || int64(end) != from || fmt.Sprint(keysOf(es)) != "[a b]" {
				t.Fatalf("under %s, blocks %b of the last record written: replayed %v to %d, damage %+v; want [a b] to %d, no damage",
					under.name, mask, keysOf(es), end, dmg, from)
			}
		}
	}
}

var errCrash = errors.New("test crash")

// crash stops s as a killed process would: no checkpoint, nothing closed
// in order; the file locks go with the handles.
// logAlone keeps the store's records in its log: no timed checkpoint
// within the hour a test could take on a busy machine, so a test that needs
// the log alone (and crashes before Close's checkpoint) does not depend on
// running within DefaultCheckpointEvery.
func logAlone(c *config) error {
	c.checkpointEvery = time.Hour
	return nil
}

func crash(t *testing.T, s *Store) {
	t.Helper()
	s.fail(errCrash)
	if err := s.Close(); !errors.Is(err, errCrash) {
		t.Fatalf("Close after a crash: %v, want the crash", err)
	}
}

// TestLogCarriesBatches: acknowledged batches not yet checkpointed survive
// a crash through the log alone, and a log that lost its tail (an fdatasync
// that a power cut undid would leave that) gives the state of the batches
// before the cut, whole: never part of a batch, never a lower token than
// one the kept batches issued.
func TestLogCarriesBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path, logAlone)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got []lease.Lease
	var ends []int64
	for i := range 4 {
		l, err := s.Acquire(ctx, fmt.Sprintf("k%d", i%2), "o", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l)
		if i < 2 {
			if err := s.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			flush(t, s)
		}
		ends = append(ends, s.wal.off)
	}
	if n := s.checkpoints.Load(); n != 0 {
		t.Fatalf("%d checkpoints: this test needs the log alone", n)
	}
	crash(t, s)
	logData, err := os.ReadFile(walPath(path))
	if err != nil {
		t.Fatal(err)
	}
	dbData, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for keep := len(ends); keep >= 0; keep-- {
		t.Run(fmt.Sprintf("keep %d", keep), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "lease.db")
			var cut int64
			if keep > 0 {
				cut = ends[keep-1]
			}
			if err := os.WriteFile(p, dbData, 0o600); err != nil {
				t.Fatal(err)
			}
			// The log keeps its size: the records past the cut never came.
			kept := append([]byte(nil), logData...)
			clear(kept[cut:])
			if err := os.WriteFile(walPath(p), kept, 0o600); err != nil {
				t.Fatal(err)
			}
			// The log alone must keep tokens rising: no floor from the clock.
			s, err := Open(p, WithHostClock(func() time.Time { return time.Unix(0, 0) }))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Step i acquired got[i] on k(i%2) and, for i < 2, released it.
			for key := range 2 {
				k := fmt.Sprintf("k%d", key)
				var want *lease.Lease
				var top lease.Token
				for i := 0; i < keep; i++ {
					if i%2 == key {
						top = got[i].Token
						want = &got[i]
						if i < 2 {
							want = nil
						}
					}
				}
				l, err := s.Get(ctx, k)
				switch {
				case want == nil && err == nil:
					t.Errorf("%s: Get = token %d, want no lease", k, l.Token)
				case want != nil && (err != nil || l.Token != want.Token):
					t.Errorf("%s: Get = %+v, %v; want token %d", k, l, err, want.Token)
				}
				if want != nil {
					continue
				}
				next, err := s.Acquire(ctx, k, "o", time.Hour)
				if err != nil || next.Token <= top {
					t.Errorf("%s: next token %d (%v), want above %d", k, next.Token, err, top)
				}
			}
		})
	}
}

// TestCheckpoint: a checkpoint commits the open transaction to the bbolt
// file and starts the log over; a crash after it loses nothing either.
func TestCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path, func(c *config) error { c.checkpointAlways = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := s.Acquire(ctx, "k", "o", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	if s.checkpoints.Load() == 0 || s.wal.off != 0 {
		t.Fatalf("after a batch: %d checkpoints, log at %d; want a checkpoint and an empty log", s.checkpoints.Load(), s.wal.off)
	}
	crash(t, s)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		rec, ok, err := getLease(tx.Bucket(bucketLeases), "k")
		if err != nil || !ok || rec.token != l.Token {
			t.Errorf("bbolt file after the checkpoint: %+v, %v, %v; want token %d", rec, ok, err, l.Token)
		}
		return nil
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Get(ctx, "k"); err != nil || got.Token != l.Token {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

// TestStaleLogIgnored: a log left beside a new bbolt file (the old one
// deleted or replaced) is refused; accepted (AcceptLogLoss), it holds
// records of epochs that the new file's own epochs reach again, and none
// of them may be replayed into it. Here the
// old log's records 7 and 8, of epoch 1 like the new store's first run,
// follow records 1 to 6 that the new store overwrote with ones of the same
// lengths, and give "a" a lower token than the new store issued.
func TestStaleLogIgnored(t *testing.T) {
	ctx := context.Background()
	cycles := func(s *Store, key string, n int) (last lease.Token) {
		t.Helper()
		for range n {
			l, err := s.Acquire(ctx, key, "o", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
			last = l.Token
		}
		flush(t, s) // the last release's record
		if n := s.checkpoints.Load(); n != 0 {
			t.Fatalf("%d checkpoints: this test needs the log alone", n)
		}
		return last
	}
	old := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(old, logAlone)
	if err != nil {
		t.Fatal(err)
	}
	cycles(s, "x", 2) // records 1 to 4
	cycles(s, "a", 2) // records 5 to 8: tokens 1 and 2 of "a"
	crash(t, s)
	oldLog, err := os.ReadFile(walPath(old))
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "lease.db")
	if err := os.WriteFile(walPath(path), oldLog, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = Open(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a log without its bbolt file = %v; want ErrCorrupt", err)
	}
	if s, err = Open(path, AcceptLogLoss(func(*CorruptError) {})); err != nil {
		t.Fatal(err)
	}
	issued := cycles(s, "a", 3) // records 1 to 6: tokens 1 to 3 of "a"
	crash(t, s)
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l, err := s.Acquire(ctx, "a", "o", time.Hour); err != nil || l.Token <= issued {
		t.Fatalf("Acquire after a crash = %+v, %v; want a token above %d (I1)", l, err, issued)
	}
}

// TestUpgradeSchema1: a file of schema version 1, which had no log, opens
// and is marked version 2, so that older builds refuse it.
func TestUpgradeSchema1(t *testing.T) {
	path := closedStore(t)
	setVersion := func(v uint64) {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keyVersion, encodeUint64(v))
		}); err != nil {
			t.Fatal(err)
		}
	}
	setVersion(1)
	asOldSchema(t, path, 1)
	s, err := Open(path)
	if err != nil {
		t.Fatalf("open schema 1: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if v, _ := decodeUint64("version", tx.Bucket(bucketMeta).Get(keyVersion)); v != schemaVersion {
			t.Errorf("version after open = %d, want %d", v, schemaVersion)
		}
		return nil
	})
}

// TestMissingLogRefused: a file that has had a log does not open without
// it, as the log may hold acknowledged batches; an empty log, created by
// someone who knows the store was closed cleanly, is accepted.
func TestMissingLogRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(context.Background(), "k", "o", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(walPath(path)); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path); err == nil {
		_ = s.Close()
		t.Fatal("opened without its log")
	} else if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Open without the log: %v, want ErrUnavailable", err)
	} else {
		t.Logf("Open error: %v", err)
		if want := "--accept-log-loss"; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "install") {
			t.Errorf("Open error does not suggest %q alone", want)
		}
	}
	// The advice this refusal used to give, an empty log: after a crash
	// it lost the log's records silently. Refused too.
	if err := os.WriteFile(walPath(path), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with an empty log = %v; want ErrCorrupt", err)
	}
	var loss *CorruptError
	s, err = Open(path, AcceptLogLoss(func(c *CorruptError) { loss = c }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Get(context.Background(), "k"); err != nil || got.Token != l.Token {
		t.Fatalf("after a clean close and an accepted loss of the log: %+v, %v; want token %d", got, err, l.Token)
	}
	if n, err := s.Acquire(context.Background(), "new", "o", time.Hour); err != nil || loss == nil || n.Token <= loss.Floor {
		t.Fatalf("Acquire(new) = %v, %v; want a token above the floor of %+v", n, err, loss)
	}
}

// asOldSchema rewrites the closed store at path as a file of schema
// version v (1 to 3) would hold it: plain values, the lease records'
// tokens as high-water marks, and no values it did not have.
func asOldSchema(t *testing.T, path string, v uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		for _, k := range [][]byte{keyWALEpoch, keyTokenFloor, keyWALSize, keyClockLead} {
			sealed := meta.Get(k)
			if sealed == nil {
				continue
			}
			plain, ok := unseal(k, sealed)
			if !ok {
				t.Fatalf("%s does not unseal", k)
			}
			var err error
			switch {
			case bytes.Equal(k, keyWALSize), bytes.Equal(k, keyClockLead), v == 1 && bytes.Equal(k, keyWALEpoch):
				err = meta.Delete(k)
			default:
				err = meta.Put(k, append([]byte(nil), plain...))
			}
			if err != nil {
				return err
			}
		}
		if err := meta.Put(keyVersion, encodeUint64(v)); err != nil {
			return err
		}
		if err := meta.Delete(keySchema); err != nil { // sealed since schema 5
			return err
		}
		tokens, err := tx.CreateBucketIfNotExists(bucketTokens)
		if err != nil {
			return err
		}
		leases := tx.Bucket(bucketLeases)
		type kv struct{ k, v []byte }
		var plain []kv
		_ = leases.ForEach(func(k, v []byte) error {
			p, _ := unseal(k, v)
			plain = append(plain, kv{append([]byte(nil), k...), append([]byte(nil), p...)})
			return nil
		})
		for _, r := range plain {
			if err := leases.Put(r.k, r.v); err != nil {
				return err
			}
			if err := tokens.Put(r.k, r.v[:8]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFilesMadePrivate: the bbolt file and its log hold every lease's
// secret ID, so Open makes them readable by their owner alone, whoever
// created them and how.
func TestFilesMadePrivate(t *testing.T) {
	path := closedStore(t)
	files := []string{path, walPath(path)}
	for _, f := range files {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("mode of %s after Open = %v, want -rw-------", f, got)
		}
	}
}

// closedStore creates a store, closes it cleanly, and returns its path.
func closedStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// schema2Store makes a store of schema version 2 beside a log of that
// version's format, as a crash leaves them: two records of the file's
// epoch, token 7 of "k", then token 8 of "k" and token 3 of "j"; then a
// record of another epoch, which is not replayed.
func schema2Store(t *testing.T) string {
	t.Helper()
	path := closedStore(t)
	var epoch uint64
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		plain, _ := unseal(keyWALEpoch, meta.Get(keyWALEpoch))
		epoch, _ = decodeUint64("epoch", plain)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	asOldSchema(t, path, 2)
	v2 := func(epoch, seq uint64, tokens ...any) []byte {
		var w wal
		for i := 0; i < len(tokens); i += 2 {
			w.add('t', 'p', []byte(tokens[i].(string)), encodeUint64(uint64(tokens[i+1].(int))))
		}
		body := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, epoch), seq)
		body = append(body, w.buf...)
		rec := binary.BigEndian.AppendUint32(nil, uint32(len(w.buf)))
		rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum(body, walCRC))
		return append(rec, body...)
	}
	log := slices.Concat(v2(epoch, 1, "k", 7), v2(epoch, 2, "k", 8, "j", 3), v2(epoch+5, 3, "k", 1), make([]byte, 1000))
	if err := os.WriteFile(walPath(path), log, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// acquireAbove checks that s grants schema2Store's keys above the tokens
// its log holds.
func acquireAbove(t *testing.T, s *Store) {
	t.Helper()
	for key, above := range map[string]lease.Token{"k": 8, "j": 3} {
		if l, err := s.Acquire(context.Background(), key, "o", time.Hour); err != nil || l.Token <= above {
			t.Errorf("Acquire(%s) after the upgrade = %d, %v; want above %d", key, l.Token, err, above)
		}
	}
}

// TestUpgradeSchema2: a file of schema version 2 beside a log of that
// version's format, left by a crash, opens with the log's records
// replayed, and is then of version 3 with a log of zeros, which an older
// build would refuse rather than misread.
func TestUpgradeSchema2(t *testing.T) {
	path := schema2Store(t)
	// The log alone must keep tokens rising: no floor from the clock.
	s, err := Open(path, WithHostClock(func() time.Time { return time.Unix(0, 0) }))
	if err != nil {
		t.Fatalf("open schema 2 with its log: %v", err)
	}
	acquireAbove(t, s)
	crash(t, s)
	if s, err = Open(path); err != nil {
		t.Fatalf("reopen after the upgrade and a crash: %v", err)
	}
	defer s.Close()
	if l, err := s.Acquire(context.Background(), "k", "o", time.Hour); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("Acquire(k) after a crash = %v, %v; want it held", l, err)
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v, _ := decodeUint64("version", tx.Bucket(bucketMeta).Get(keyVersion)); v != schemaVersion {
			t.Errorf("version after the upgrade = %d, want %d", v, schemaVersion)
		}
		return nil
	})
}

// TestUpgradeSchema2Killed: an upgrade of schema version 2 killed right
// after either of its commits, before the log of version 2's format is
// zeroed, opens on the next start with the log's records kept. Its one
// commit used to leave a file of the new schema beside those records,
// which the next Open refused as a damaged log.
func TestUpgradeSchema2Killed(t *testing.T) {
	for n := 1; n <= 2; n++ {
		t.Run(fmt.Sprintf("after commit %d", n), func(t *testing.T) {
			path := schema2Store(t)
			commits := 0
			kill := func(c *config) error {
				c.afterCommit = func() error {
					if commits++; commits == n {
						return errCrash
					}
					return nil
				}
				return nil
			}
			if s, err := Open(path, kill); !errors.Is(err, errCrash) {
				if err == nil {
					_ = s.Close()
				}
				t.Fatalf("Open killed after commit %d: %v, after %d commits", n, err, commits)
			}
			s, err := Open(path, WithHostClock(func() time.Time { return time.Unix(0, 0) }))
			if err != nil {
				t.Fatalf("open after the upgrade was killed: %v", err)
			}
			defer s.Close()
			acquireAbove(t, s)
		})
	}
}

// TestLogKeepsItsSize: a batch whose record does not fit in the space
// left in the log is made durable by a checkpoint, and the log keeps the
// size the file recorded, which a reopen after a crash finds.
func TestLogKeepsItsSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := Open(path, logAlone)
	if err != nil {
		t.Fatal(err)
	}
	size := s.wal.size
	first := true
	s.syncHook = func() { // in the commit loop, before the batch's log write
		if first {
			first = false
			s.wal.off = s.wal.size - walBlock // room for one block: the record needs two
		}
	}
	owner := strings.Repeat("o", 500)
	l, err := s.Acquire(context.Background(), "k", owner, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.checkpoints.Load(); n != 1 {
		t.Fatalf("%d checkpoints; want the batch made durable by one", n)
	}
	crash(t, s)
	if fi, err := os.Stat(walPath(path)); err != nil || fi.Size() != size {
		t.Fatalf("log after the batch: %v, %v; want %d bytes, as before", fi, err, size)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Get(context.Background(), "k"); err != nil || got.Token != l.Token {
		t.Fatalf("after a crash Get = %+v, %v; want token %d", got, err, l.Token)
	}
}
