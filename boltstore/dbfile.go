package boltstore

import (
	"bytes"
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
//
// bbolt also takes every page's element headers as written: a bit flipped
// in where a key or value starts, or in its size, points the read of it
// outside the mapped file (it faulted, the damage campaign found), and a
// flipped page id anywhere. So Open walks the tree bbolt will read first
// (checkTree), from the meta page's root bucket.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltPageHeader = 16
	boltMetaSize   = 4*4 + 16 + 8 + 8 + 8 + 8
)

// boltMeta is what Open needs of a meta page.
type boltMeta struct {
	pageSize uint32
	root     uint64 // the root bucket's page
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
	meta := boltMeta{pageSize: ne.Uint32(m[8:]), root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]), pgid: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:])}
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
	damaged := func(format string, args ...any) error { return dbDamaged(path, format, args...) }
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
	tree, why := checkTree(f, use)
	if why != "" {
		return size, damaged("is corrupt: %s", why)
	}
	if use.freelist != boltNoFreelist {
		if why := checkFreelist(f, use, tree); why != "" {
			return size, damaged("is corrupt: its freelist, page %d, %s", use.freelist, why)
		}
	}
	return size, nil
}

// checkFreelist reads the freelist of m in f, as bbolt will at open, and
// says what is wrong with it, or "" if nothing is: a page that is not a
// freelist, more page ids than its pages hold (bbolt would read past
// them), or a page id outside the file, named twice or in use by the tree
// (bbolt panics when it frees or allocates it).
func checkFreelist(f io.ReaderAt, m boltMeta, tree map[uint64]bool) string {
	ne := binary.NativeEndian
	ps := uint64(m.pageSize)
	h := make([]byte, boltPageHeader+8)
	if _, err := f.ReadAt(h, int64(m.freelist*ps)); err != nil || m.freelist >= m.pgid || ne.Uint64(h) != m.freelist || ne.Uint16(h[8:]) != boltFreelistPage {
		return "is not one"
	}
	// Its page ids, 8 bytes each, after a count (u16, or, at 0xFFFF, a
	// u64 before the ids), within its pages.
	over, count, at := uint64(ne.Uint32(h[12:])), uint64(ne.Uint16(h[10:])), uint64(boltPageHeader)
	if count == 0xFFFF {
		count, at = ne.Uint64(h[boltPageHeader:]), at+8
	}
	room := (over + 1) * ps
	if m.freelist+over >= m.pgid || count > (room-at)/8 {
		return fmt.Sprintf("counts %d page ids, more than its %d bytes hold", count, room-at)
	}
	b := make([]byte, room)
	if _, err := f.ReadAt(b, int64(m.freelist*ps)); err != nil {
		return fmt.Sprintf("cannot be read (%v)", err)
	}
	free := map[uint64]bool{}
	for i := range count {
		id := ne.Uint64(b[at+8*i:])
		switch {
		case id < boltFirstTreePage || id >= m.pgid:
			return fmt.Sprintf("names page %d, outside the file's pages 2 to %d", id, m.pgid-1)
		case free[id]:
			return fmt.Sprintf("names page %d twice", id)
		case tree[id]:
			return fmt.Sprintf("names page %d, which the tree uses", id)
		case id >= m.freelist && id <= m.freelist+over:
			return fmt.Sprintf("names page %d, its own", id)
		}
		free[id] = true
	}
	return ""
}

// The pages of the tree and their elements, as bbolt lays them out: after
// the page header, count elements of 16 bytes; a branch element is pos u32,
// ksize u32, pgid u64 (the child), a leaf element flags u32, pos u32,
// ksize u32, vsize u32; pos counts from the element's own start, and a
// leaf's value follows its key. A leaf element flagged as a bucket holds
// the bucket's root page u64 and sequence u64, and, for a root of 0, the
// bucket's one leaf page inline after them.
const (
	boltBranchPage    = 0x01
	boltLeafPage      = 0x02
	boltElementSize   = 16
	boltBucketLeaf    = 0x01
	boltBucketHeader  = 16
	boltFirstTreePage = 2 // pages 0 and 1 are the meta pages
)

// checkTree walks every page of the tree m roots, in f, and returns them,
// or says what would make bbolt read outside its pages or panic: a page id
// out of the file's pages, the freelist's or reached twice, a page that is
// not what its parent makes it, an element that reaches past its page's
// end or has an empty key.
func checkTree(f io.ReaderAt, m boltMeta) (pages map[uint64]bool, why string) {
	ne := binary.NativeEndian
	ps := uint64(m.pageSize)
	seen := map[uint64]bool{}
	var page func(id uint64) string
	var elements func(b []byte, what string, inline bool) string
	page = func(id uint64) string {
		if id < boltFirstTreePage || id >= m.pgid || seen[id] {
			return fmt.Sprintf("page %d is named as a page of the tree, but the tree's pages are 2 to %d, each named once", id, m.pgid-1)
		}
		if id == m.freelist {
			return fmt.Sprintf("page %d, the freelist, is named as a page of the tree", id)
		}
		h := make([]byte, boltPageHeader)
		if _, err := f.ReadAt(h, int64(id*ps)); err != nil {
			return fmt.Sprintf("page %d cannot be read (%v)", id, err)
		}
		over := uint64(ne.Uint32(h[12:]))
		if ne.Uint64(h) != id || id+over >= m.pgid {
			return fmt.Sprintf("page %d is not what the tree names (id %d, %d overflow pages)", id, ne.Uint64(h), over)
		}
		for p := id; p <= id+over; p++ {
			if seen[p] {
				return fmt.Sprintf("page %d is named as a page of the tree, but it is one already", p)
			}
			seen[p] = true
		}
		b := make([]byte, (over+1)*ps)
		if _, err := f.ReadAt(b, int64(id*ps)); err != nil {
			return fmt.Sprintf("page %d cannot be read (%v)", id, err)
		}
		return elements(b, fmt.Sprintf("page %d", id), false)
	}
	elements = func(b []byte, what string, inline bool) string {
		if len(b) < boltPageHeader {
			return what + " is shorter than a page header"
		}
		flags, count := ne.Uint16(b[8:]), uint64(ne.Uint16(b[10:]))
		if boltPageHeader+count*boltElementSize > uint64(len(b)) {
			return fmt.Sprintf("the %d elements of %s reach past its end", count, what)
		}
		var prev []byte // the keys of a page rise: bbolt searches them
		for i := range count {
			e := boltPageHeader + i*boltElementSize
			el := b[e : e+boltElementSize]
			if flags == boltBranchPage || flags == boltLeafPage {
				// Where the key is; its bounds are checked below, first.
				pos, ksize := uint64(ne.Uint32(el[4:])), uint64(ne.Uint32(el[8:]))
				if flags == boltBranchPage {
					pos, ksize = uint64(ne.Uint32(el)), uint64(ne.Uint32(el[4:]))
				}
				if e+pos+ksize <= uint64(len(b)) {
					key := b[e+pos : e+pos+ksize]
					if i > 0 && bytes.Compare(prev, key) >= 0 {
						return fmt.Sprintf("the keys of %s are out of order at element %d", what, i)
					}
					prev = key
				}
			}
			switch {
			case flags == boltBranchPage && !inline:
				if e+uint64(ne.Uint32(el))+uint64(ne.Uint32(el[4:])) > uint64(len(b)) {
					return fmt.Sprintf("element %d of %s reaches past its end", i, what)
				}
				if ne.Uint32(el[4:]) == 0 {
					return fmt.Sprintf("element %d of %s has an empty key", i, what) // bbolt asserts none is
				}
				if why := page(ne.Uint64(el[8:])); why != "" {
					return why
				}
			case flags == boltLeafPage:
				start := e + uint64(ne.Uint32(el[4:])) + uint64(ne.Uint32(el[8:]))
				end := start + uint64(ne.Uint32(el[12:]))
				if end > uint64(len(b)) {
					return fmt.Sprintf("element %d of %s reaches past its end", i, what)
				}
				if ne.Uint32(el[8:]) == 0 {
					return fmt.Sprintf("element %d of %s has an empty key", i, what)
				}
				if ne.Uint32(el)&boltBucketLeaf == 0 {
					continue
				}
				v := b[start:end]
				if len(v) < boltBucketHeader {
					return fmt.Sprintf("element %d of %s is a bucket too short for one", i, what)
				}
				var why string
				if root := ne.Uint64(v); root == 0 {
					why = elements(v[boltBucketHeader:], fmt.Sprintf("the bucket inline in element %d of %s", i, what), true)
				} else {
					why = page(root)
				}
				if why != "" {
					return why
				}
			default:
				return fmt.Sprintf("%s is a page of type %#x where the tree has a branch or a leaf", what, flags)
			}
		}
		return ""
	}
	if why := page(m.root); why != "" {
		return nil, why
	}
	return seen, ""
}

const (
	boltNoFreelist   = ^uint64(0)
	boltFreelistPage = 0x10
)
