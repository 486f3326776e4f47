package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease/internal/fsync"
)

// The write-ahead log. bbolt makes a commit durable with two fdatasyncs
// (the data pages, then the meta page) and writes every page the commit
// touched; at 32 clients through lease serve that was most of the time a
// caller waited. So each batch's writes are instead appended to a log file
// beside the bbolt file as one record, made durable by one fdatasync of
// bytes overwriting space already allocated (no file size or extent
// change, so no journal commit), and only then answered. The batch also
// goes into a bbolt write transaction that stays open; a checkpoint commits
// it, fsynced as before, now and then (every checkpointEvery, or when the
// log passes checkpointBytes, and at Close), and starts the log over.
//
// A record is one batch's writes, in whole 512-byte blocks (walblock.go has
// their format). Its entries: bucket u8 ('t' tokens, 'l' leases) | op u8
// ('p' put, 'd' delete) | key length u32 | key | value length u32 | value,
// integers big-endian.
//
// The epoch names the checkpoint the log follows. It is kept in the bbolt
// file (meta "wal-epoch") and raised by each checkpoint's commit, after
// which the log is overwritten from its start: blocks of older epochs left
// further on are never replayed. Open replays, in order, the records of the
// file's epoch numbered 1, 2, 3, …, up to the first that is missing, torn
// (a crash inside its write), or of another epoch, and refuses the store if
// what follows is not what a crash leaves (walblock.go). Each record is one
// batch's writes entire, so a batch is durable whole or not at all. Replay
// puts the recorded values, so it leaves each key as the last batch wrote
// it, whatever of the log's batches the file already had. Open zeroes the
// rest of the log before it raises the epoch, so the log never holds a
// record of a later epoch than the file's: a log left beside a new or
// replaced bbolt file, whose epochs start over, cannot feed it records of
// another life. Once the epoch is raised it zeroes the records it replayed
// too, so each run starts on a log of zeros.

// The log's size. Open allocates the log (zeros, fsynced) to at least
// walReserve and records its size in the bbolt file (meta "wal-size") in
// its recovery commit; from then on the size never changes: a batch whose
// record does not fit in the space left is made durable by a checkpoint
// instead (finish). So a log of any other size than the file recorded has
// been cut short (truncated, copied in part) or replaced, whatever its
// content, and Open refuses it: a truncation cannot erase the record of
// how long the log was.
const (
	walChunk        = 1 << 20                    // what a checkpoint leaves room for past checkpointBytes
	checkpointBytes = 4 << 20                    // a log past this size is checkpointed after the batch
	walReserve      = checkpointBytes + walChunk // the least size Open gives the log
)

var (
	walCRC        = crc32.MakeTable(crc32.Castagnoli)
	keyWALEpoch   = []byte("wal-epoch")
	keyWALSize    = []byte("wal-size")
	keyTokenFloor = []byte("token-floor")
	keyClockLead  = []byte("clock-lead")
)

// errLogFull is write's answer to a record that does not fit in the log:
// nothing was written, and the batch must be made durable another way.
var errLogFull = errors.New("boltstore: the record does not fit in the log")

// wal is the log file. Only the commit loop writes it (Open and Close
// before and after the loop runs).
type wal struct {
	f     *os.File
	path  string
	size  int64  // bytes allocated (written once, zeros or records)
	off   int64  // where the next record goes, at a block boundary
	epoch uint64 // of the records being written
	seq   uint64 // of the last record written
	buf   []byte // the entries of the record being built
	out   []byte // the record's blocks
}

// walEntry is one write of a batch, in a record.
type walEntry struct {
	bucket byte // 't' or 'l'
	op     byte // 'p' or 'd'
	key    []byte
	value  []byte
}

// walPath is the log's file: the bbolt file's name with "-wal" after it.
func walPath(dbPath string) string { return dbPath + "-wal" }

// openWAL opens the log of the store at dbPath, whose bbolt file is at
// epoch, creating it if the store never had one (or, with create, if it
// had), reports whether it did, and returns what the file holds.
func openWAL(dbPath string, epoch uint64, create bool) (w *wal, data []byte, created bool, err error) {
	path := walPath(dbPath)
	if _, err := os.Lstat(path); epoch > 0 && !create && errors.Is(err, os.ErrNotExist) {
		// The file has had a log, which may hold batches acknowledged
		// since its last checkpoint: opening without it could issue their
		// tokens again. (An empty log made in its place is refused too: it
		// is not of the size the file recorded.)
		return nil, nil, false, &CorruptError{File: path, Log: path, Offset: -1, Reason: fmt.Sprintf("is missing, but %s has had a log, which may hold writes made after its last checkpoint (if it was moved, move it back)", dbPath)}
	}
	f, created, err := openOwnFile(path)
	if err != nil {
		return nil, nil, false, err
	}
	w = &wal{f: f, path: path, epoch: epoch}
	if err := makePrivate(f, path); err != nil {
		_ = f.Close()
		return nil, nil, created, err
	}
	data, err = io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, created, unavailablef(err, "boltstore: cannot read the log %s", path)
	}
	w.size = int64(len(data))
	return w, data, created, nil
}

// reserve allocates the log to walReserve if it is smaller: records
// overwrite allocated space from the start, and the log keeps this size.
func (w *wal) reserve() error {
	if w.size >= walReserve {
		return nil
	}
	return w.grow(walReserve - w.size)
}

// prepare makes the log ready for records once the file holds what it
// replayed: its name durable.
func (w *wal) prepare() error {
	// Its name too, on every Open: a log created by hand or moved into
	// place, or one whose creator crashed before this sync, may have a
	// name that a power cut would undo, and with it the records to come.
	if err := syncDir(filepath.Dir(w.path)); err != nil {
		return unavailablef(err, "boltstore: cannot sync the directory of %s", w.path)
	}
	return nil
}

// zero overwrites the log from from to to with zeros, durably.
func (w *wal) zero(from, to int64) error {
	if from >= to {
		return nil
	}
	zeros := make([]byte, min(to-from, walChunk))
	for off := from; off < to; off += int64(len(zeros)) {
		if _, err := w.f.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off); err != nil {
			return unavailablef(err, "boltstore: clearing the log %s", w.path)
		}
	}
	if err := fsync.Data(w.f); err != nil {
		return unavailablef(err, "boltstore: syncing the log %s", w.path)
	}
	return nil
}

// decodeEntries splits a record's entries.
func decodeEntries(b []byte) ([]walEntry, error) {
	var out []walEntry
	for len(b) > 0 {
		if len(b) < 2+4 {
			return nil, errors.New("short entry")
		}
		e := walEntry{bucket: b[0], op: b[1]}
		if (e.bucket != 't' && e.bucket != 'l' && e.bucket != 'm') || (e.op != 'p' && e.op != 'd') {
			return nil, fmt.Errorf("unknown entry %q %q", e.bucket, e.op)
		}
		var ok bool
		if e.key, b, ok = cutField(b[2:]); !ok {
			return nil, errors.New("short key")
		}
		if e.value, b, ok = cutField(b); !ok {
			return nil, errors.New("short value")
		}
		out = append(out, e)
	}
	return out, nil
}

// cutField splits a u32 length and that many bytes off b.
func cutField(b []byte) (field, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(len(b)-4) < uint64(n) {
		return nil, nil, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// applyEntries makes the log's writes in tx, a file of schema version.
func applyEntries(tx *bolt.Tx, es []walEntry, version uint64) error {
	for _, e := range es {
		var name []byte
		switch {
		case e.bucket == 'l':
			name = bucketLeases
		case e.bucket == 't' && version < 4:
			name = bucketTokens
		case e.bucket == 'm' && version >= 4:
			name = bucketMeta
		default:
			return fmt.Errorf("an entry of bucket %q in a log of schema version %d", e.bucket, version)
		}
		b := tx.Bucket(name)
		if b == nil {
			return fmt.Errorf("no bucket %q", name)
		}
		var err error
		if e.op == 'p' {
			err = b.Put(e.key, e.value)
		} else {
			err = b.Delete(e.key)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// add appends an entry to the record being built.
func (w *wal) add(bucket, op byte, key, value []byte) {
	w.buf = append(w.buf, bucket, op)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(key)))
	w.buf = append(w.buf, key...)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(value)))
	w.buf = append(w.buf, value...)
}

// pending reports whether entries were added since the last write.
func (w *wal) pending() bool { return len(w.buf) > 0 }

// write makes the record being built durable: one write and one
// fdatasync, plus, when the log needs room, a zeroed chunk first.
func (w *wal) write() error {
	rec := appendRecord(w.out[:0], w.epoch, w.seq+1, w.buf)
	w.out = rec
	w.buf = w.buf[:0]
	if w.off+int64(len(rec)) > w.size {
		return errLogFull
	}
	if _, err := w.f.WriteAt(rec, w.off); err != nil {
		return unavailablef(err, "boltstore: writing the log %s", w.path)
	}
	if err := fsync.Data(w.f); err != nil {
		return unavailablef(err, "boltstore: syncing the log %s", w.path)
	}
	w.off += int64(len(rec))
	w.seq++
	return nil
}

// grow extends the file by n zeroed bytes, durably: records then overwrite
// allocated space, and their fdatasync has no size or extent to record.
// Only Open grows the log (reserve).
func (w *wal) grow(n int64) error {
	if _, err := w.f.WriteAt(make([]byte, n), w.size); err != nil {
		return unavailablef(err, "boltstore: growing the log %s", w.path)
	}
	if err := w.f.Sync(); err != nil {
		return unavailablef(err, "boltstore: syncing the log %s", w.path)
	}
	w.size += n
	return nil
}

// restart makes the log start over after a checkpoint of epoch-1 committed
// epoch: records written from now on are of epoch, from the start.
func (w *wal) restart(epoch uint64) {
	w.epoch, w.seq, w.off = epoch, 0, 0
}

func (w *wal) close() error { return w.f.Close() }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
