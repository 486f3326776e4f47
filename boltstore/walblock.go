package boltstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// The log's blocks (schema version 3). The log is a sequence of 512-byte
// blocks, and a record fills one or more whole blocks from a block
// boundary on. Each block says what it is, integers big-endian:
//
//	crc     u32  CRC-32C of the rest of the block
//	epoch   u64  the checkpoint the record follows (see wal.go)
//	seq     u64  the record's number in its epoch, from 1
//	index   u32  the block's place in its record, from 0
//	count   u32  the record's blocks
//	used    u16  payload bytes in the block: all 480 but in the last block
//	zero    u16
//	payload 480 bytes, zeros after used
//
// A record's entries are its blocks' payloads, in order.
//
// Blocks let Open tell what a crash leaves from damage. A write that the
// process or the machine did not finish leaves each of its blocks whole,
// new or as it was: a disk writes a 512-byte sector entire or not at all,
// and a killed process's write stops at a page boundary. What was there
// before is zeros (space the log allocated and never used) or intact blocks
// of records of earlier epochs. And as the log is written one record, and
// one fdatasync, at a time, only the record after the last whole one can
// have been cut short. So past the records replayed, a block that is
// neither zeros nor intact is damage, wherever it is, as is an intact
// block of a later record of the same epoch: that record was written after
// the one missing, which was therefore written whole, and acknowledged.
// Either way Open refuses the store (ErrCorrupt) rather than issue again
// the tokens the unreadable records may hold. A torn write of the record
// after the last whole one, even with its first block missing, is what a
// crash leaves: that record was never acknowledged, and is dropped. (A
// disk that tears a sector when the power fails makes a crash look like
// damage: refused, the safe side.) The price is padding: a lone
// operation's record, some 150 bytes, takes a block, within the page its
// fdatasync writes anyway.

const (
	walBlock       = 512
	walBlockHeader = 4 + 8 + 8 + 4 + 4 + 2 + 2
	walPayload     = walBlock - walBlockHeader
)

// blockHeader is a block's header, minus its checksum.
type blockHeader struct {
	epoch, seq   uint64
	index, count uint32
	used         int
}

// appendRecord appends to dst the blocks of record seq of epoch, whose
// entries are body (not empty).
func appendRecord(dst []byte, epoch, seq uint64, body []byte) []byte {
	count := (len(body) + walPayload - 1) / walPayload
	dst = slices.Grow(dst, count*walBlock)
	for i := range count {
		chunk := body[i*walPayload : min((i+1)*walPayload, len(body))]
		start := len(dst)
		dst = dst[:start+walBlock]
		b := dst[start:]
		binary.BigEndian.PutUint64(b[4:], epoch)
		binary.BigEndian.PutUint64(b[12:], seq)
		binary.BigEndian.PutUint32(b[20:], uint32(i))
		binary.BigEndian.PutUint32(b[24:], uint32(count))
		binary.BigEndian.PutUint16(b[28:], uint16(len(chunk)))
		binary.BigEndian.PutUint16(b[30:], 0)
		n := copy(b[walBlockHeader:], chunk)
		clear(b[walBlockHeader+n:])
		binary.BigEndian.PutUint32(b, crc32.Checksum(b[4:], walCRC))
	}
	return dst
}

// parseBlock returns the header of b, one block, and whether b is intact:
// its checksum matches and its header is one appendRecord writes.
func parseBlock(b []byte) (blockHeader, bool) {
	if crc32.Checksum(b[4:walBlock], walCRC) != binary.BigEndian.Uint32(b) {
		return blockHeader{}, false
	}
	h := blockHeader{
		epoch: binary.BigEndian.Uint64(b[4:]),
		seq:   binary.BigEndian.Uint64(b[12:]),
		index: binary.BigEndian.Uint32(b[20:]),
		count: binary.BigEndian.Uint32(b[24:]),
		used:  int(binary.BigEndian.Uint16(b[28:])),
	}
	ok := binary.BigEndian.Uint16(b[30:]) == 0 && h.seq > 0 && h.index < h.count &&
		h.used > 0 && h.used <= walPayload && (h.used == walPayload || h.index == h.count-1)
	return h, ok
}

// logDamage is what stops a log from being replayed whole.
type logDamage struct {
	at     int64 // where: the damaged block, or the missing record
	from   int64 // where the records that may be lost begin: the end of those replayed
	reason string
	newer  bool // a record of a later checkpoint than the bbolt file's: the file is older than its log
}

// replay returns the entries of the records of epoch in data, numbered from
// 1 on, up to the first that is missing or not whole, and the offset where
// that one begins. Past it, data must hold only what a crash leaves (see
// above); if it does not, replay also returns where and why.
func replay(data []byte, epoch uint64) (entries []walEntry, end int, dmg *logDamage) {
	seq := uint64(1)
	for {
		body, n, ok := readRecord(data, end, epoch, seq)
		if !ok {
			break
		}
		es, err := decodeEntries(body)
		if err != nil {
			// Every block is intact: this is what was written, so a bug or
			// a foreign file, not a crash.
			return entries, end, &logDamage{at: int64(end), from: int64(end),
				reason: fmt.Sprintf("record %d is intact but unreadable: %v", seq, err)}
		}
		entries = append(entries, es...)
		end += n
		seq++
	}
	return entries, end, classify(data, end, epoch, seq)
}

// readRecord returns the entries of record seq of epoch if it begins at
// off in data and all its blocks are there and intact, and its size.
func readRecord(data []byte, off int, epoch, seq uint64) (body []byte, size int, ok bool) {
	var count uint32
	for i := 0; ; i++ {
		b := off + i*walBlock
		if b+walBlock > len(data) {
			return nil, 0, false
		}
		h, ok := parseBlock(data[b : b+walBlock])
		if !ok || h.epoch != epoch || h.seq != seq || h.index != uint32(i) || (i > 0 && h.count != count) {
			return nil, 0, false
		}
		count = h.count
		body = append(body, data[b+walBlockHeader:b+walBlockHeader+h.used]...)
		if h.index == count-1 {
			return body, (i + 1) * walBlock, true
		}
	}
}

// classify checks that data from end on holds only what a crash leaves
// after the records of epoch replayed: zeros, intact blocks of other
// epochs, and blocks of record next (the one being written) in their
// places. Anything else is damage.
func classify(data []byte, end int, epoch, next uint64) *logDamage {
	var count uint32 // of record next, once one of its blocks is seen
	for b := end; b < len(data); b += walBlock {
		blk := data[b:min(b+walBlock, len(data))]
		if allZero(blk) {
			continue
		}
		damage := func(at int, format string, args ...any) *logDamage {
			return &logDamage{at: int64(at), from: int64(end), reason: fmt.Sprintf(format, args...)}
		}
		if len(blk) < walBlock {
			// The file was cut inside a block (copied while the store ran,
			// say): a cut through the record being written is what a crash
			// inside it looks like, if what is left of the block's header
			// says it is of that record, in its place.
			var want [walBlockHeader]byte
			binary.BigEndian.PutUint64(want[4:], epoch)
			binary.BigEndian.PutUint64(want[12:], next)
			binary.BigEndian.PutUint32(want[20:], uint32((b-end)/walBlock))
			if n := min(len(blk), 24); n <= 4 || string(blk[4:n]) == string(want[4:n]) {
				continue
			}
			return damage(b, "the log ends inside a block of another record")
		}
		h, ok := parseBlock(blk)
		switch {
		case !ok:
			return damage(b, "the 512-byte block there fails its checksum")
		case h.epoch > epoch:
			// A checkpoint commits the file's epoch before any record of
			// it is written, and Open zeroes the log before it raises the
			// epoch: a record of a later epoch means the file is older
			// than its log (a copy put back), and lacks what its later
			// checkpoints committed.
			d := damage(b, "is older than its log: the log holds records of epoch %d, the file is at epoch %d (was an older copy of it put back?)", h.epoch, epoch)
			d.newer = true
			return d
		case h.epoch != epoch:
			// Of an earlier checkpoint's records.
			continue
		case h.seq == next && h.index == uint32((b-end)/walBlock) && (count == 0 || h.count == count):
			count = h.count
			continue
		case h.seq > next:
			return damage(end, "record %d of the same epoch follows at offset %d, so record %d, written and acknowledged before it, is missing or damaged", h.seq, b, next)
		default:
			return damage(b, "block %d of record %d is out of place", h.index, h.seq)
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// minGrantBytes is the fewest bytes of entries a grant writes: a lease
// put (bucket, op, key length, a key of at least one byte, value length,
// a record of at least recordHeader bytes with a one-byte owner, sealed).
// Every token issued is in one.
const minGrantBytes = 2 + 4 + 1 + 4 + recordHeader + 1 + sealSize

// lostTokens bounds how far above the highest token the store still knows
// records in n bytes of the log can have issued: each grant issues one
// token above what the store knew before it (a key's last token, or the
// floor), and takes at least minGrantBytes of the blocks' payloads.
func lostTokens(n int64) uint64 {
	blocks := (uint64(max(n, 0)) + walBlock - 1) / walBlock
	return blocks * walPayload / uint64(minGrantBytes)
}

// maxEpoch returns the highest epoch of any intact block in data.
func maxEpoch(data []byte) uint64 {
	var top uint64
	for b := 0; b+walBlock <= len(data); b += walBlock {
		if h, ok := parseBlock(data[b : b+walBlock]); ok {
			top = max(top, h.epoch)
		}
	}
	return top
}
