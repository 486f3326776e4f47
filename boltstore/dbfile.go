package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
)

// bbolt maps the file and reads its pages in place: a file cut short
// (truncate -s 16384 lease.db, a copy that stopped) faults with SIGBUS
// on the first page past its end, and the process dies with a goroutine
// dump instead of an error. So Open reads the file's two meta pages first,
// as bbolt will, and refuses a file shorter than the pages they name.
//
// A meta page is a page header (id u64, flags u16, count u16, overflow
// u32) and then, in the machine's byte order: magic u32, version u32,
// page size u32, flags u32, root bucket (pgid u64, sequence u64),
// freelist pgid u64, pgid u64 (the pages in use), txid u64, and the
// FNV-1a 64 of all that.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltPageHeader = 16
	boltMetaSize   = 4*4 + 16 + 8 + 8 + 8 + 8
)

// boltMeta is what Open needs of a meta page.
type boltMeta struct {
	pageSize uint32
	freelist uint64
	pgid     uint64
	txid     uint64
}

// parseBoltMeta reads the meta page at the start of b, and reports
// whether it is one bbolt would use.
func parseBoltMeta(b []byte) (boltMeta, bool) {
	if len(b) < boltPageHeader+boltMetaSize {
		return boltMeta{}, false
	}
	m := b[boltPageHeader : boltPageHeader+boltMetaSize]
	h := fnv.New64a()
	_, _ = h.Write(m[:boltMetaSize-8])
	ne := binary.NativeEndian
	if ne.Uint32(m[0:]) != boltMagic || ne.Uint32(m[4:]) != boltVersion || ne.Uint64(m[boltMetaSize-8:]) != h.Sum64() {
		return boltMeta{}, false
	}
	meta := boltMeta{pageSize: ne.Uint32(m[8:]), freelist: ne.Uint64(m[32:]), pgid: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:])}
	if meta.pageSize < 512 || meta.pageSize&(meta.pageSize-1) != 0 {
		return boltMeta{}, false
	}
	return meta, true
}

// checkDBFile looks at the bbolt file at path before bbolt maps it. It
// returns the file's size (0 for a missing file), and refuses a file
// whose meta pages are both damaged or that is shorter than the pages
// its meta pages name.
func checkDBFile(path string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, unavailablef(err, "boltstore: cannot open %s", path)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, unavailablef(err, "boltstore: cannot open %s", path)
	}
	size := fi.Size()
	if size == 0 {
		return 0, nil
	}
	head := make([]byte, 4096)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return size, unavailablef(err, "boltstore: cannot read %s", path)
	}
	head = head[:n]
	var metas []boltMeta
	m0, ok0 := parseBoltMeta(head)
	if ok0 {
		metas = append(metas, m0)
	}
	// The second meta page is one page in: of the first's size, or, if the
	// first is damaged, of any size bbolt could have used.
	sizes := []uint32{m0.pageSize}
	if !ok0 {
		sizes = []uint32{4096, 8192, 16384, 32768, 65536, 1024, 2048, 512}
	}
	for _, ps := range sizes {
		b := make([]byte, boltPageHeader+boltMetaSize)
		if _, err := f.ReadAt(b, int64(ps)); err != nil {
			continue
		}
		if m1, ok := parseBoltMeta(b); ok && m1.pageSize == ps {
			metas = append(metas, m1)
			break
		}
	}
	damaged := func(format string, args ...any) error {
		return &CorruptError{File: path, Log: walPath(path), Offset: -1, Reason: fmt.Sprintf(format, args...), aside: true}
	}
	if len(metas) == 0 {
		return size, damaged("is corrupt or not a bbolt database: neither of its meta pages is intact (%d bytes)", size)
	}
	for _, m := range metas {
		if need := m.pgid * uint64(m.pageSize); need > uint64(size) {
			return size, damaged("is corrupt: cut short to %d bytes, but its pages reach %d", size, need)
		}
	}
	// The freelist bbolt loads at open, of the meta it will use: one it
	// cannot read makes it panic with the file mapped, and the mapping
	// keeps the file's lock until the process ends.
	use := metas[0]
	for _, m := range metas[1:] {
		if m.txid > use.txid {
			use = m
		}
	}
	if use.freelist != boltNoFreelist {
		h := make([]byte, boltPageHeader)
		_, err := f.ReadAt(h, int64(use.freelist)*int64(use.pageSize))
		ne := binary.NativeEndian
		if err != nil || use.freelist >= use.pgid || ne.Uint64(h) != use.freelist || ne.Uint16(h[8:])&boltFreelistPage == 0 {
			return size, damaged("is corrupt: its freelist, page %d, is not one", use.freelist)
		}
	}
	return size, nil
}

const (
	boltNoFreelist   = ^uint64(0)
	boltFreelistPage = 0x10
)
