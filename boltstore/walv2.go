package boltstore

import (
	"encoding/binary"
	"hash/crc32"
)

// The log of schema version 2, read once to upgrade a file: records of
// len u32 | crc u32 | epoch u64 | seq u64 | entries, crc the CRC-32C of
// epoch, seq and entries, len counting the entries, one after the other
// from offset 0. Nothing in it tells a torn write from damage, so it is
// replayed as that version did: up to the first record that is missing,
// torn, damaged or of another epoch.

const walV2Header = 4 + 4 + 8 + 8

// replayV2 returns the entries of the records of epoch in data, a log of
// schema version 2, and the offset where they end.
func replayV2(data []byte, epoch uint64) ([]walEntry, int, error) {
	var out []walEntry
	off := 0
	for seq := uint64(1); off+walV2Header <= len(data); seq++ {
		n := int(binary.BigEndian.Uint32(data[off:]))
		end := off + walV2Header + n
		if end > len(data) || end < off {
			break
		}
		body := data[off+8 : end]
		if crc32.Checksum(body, walCRC) != binary.BigEndian.Uint32(data[off+4:]) {
			break
		}
		if binary.BigEndian.Uint64(body) != epoch || binary.BigEndian.Uint64(body[8:]) != seq {
			break
		}
		es, err := decodeEntries(body[16:])
		if err != nil {
			return nil, 0, err
		}
		out = append(out, es...)
		off = end
	}
	return out, off, nil
}
