package memstore

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/leasehq/lease"
)

// index maps keys to entries. Lookups take no lock and write nothing
// shared: goroutines working on different keys touch only their own
// entries' cache lines, so the store scales with cores. Inserts, growth and
// sweeps take mu.
//
// The table is open-addressed with linear probing, and a slot, once
// filled, keeps its entry for the table's life: entries leave only when a
// sweep or growth builds a new table and publishes it. A lookup racing
// with an insert may miss the new entry; it then takes the slow path
// (insert), which looks again under mu.
type index struct {
	tab atomic.Pointer[table]

	mu      sync.Mutex
	n       int         // entries in tab
	sweepAt int         // n at which the next rebuild drops idle entries
	floor   lease.Token // the highest token of any dropped entry
	ord     order       // the entries in key order, for List

	byAddr [addrSlots]atomic.Pointer[entry] // see byKeyAddr
}

// addrSlots is how many entries byKeyAddr remembers (a power of two).
const addrSlots = 4096

// addrSlot is the slot of byAddr for key bytes at p. An entry is 128 bytes
// in a 128-byte size class, so entries allocated together take neighbouring
// slots.
func addrSlot(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) >> 7 & (addrSlots - 1) }

// byKeyAddr returns the entry whose own bytes key's are, if byAddr
// remembers it, or nil. A lease returned by Acquire carries its key as the
// entry holds it (newEntry), so a Release or Renew of that lease finds its
// entry here with no hash and no probe of the table. The entry may have
// been dropped since; callers lock it and check dead, as after lookup.
func (x *index) byKeyAddr(key string) *entry {
	p := unsafe.StringData(key)
	if e := x.byAddr[addrSlot(p)].Load(); e != nil && unsafe.StringData(e.key) == p && len(e.key) == len(key) {
		return e
	}
	return nil
}

type table struct {
	mask  uint64
	slots []slot
}

// slot is one place in a table. It keeps its entry's hash beside the
// pointer, so that a probe passing over other keys' slots reads only the
// table, which nobody writes once it is published, and never those keys'
// entries: the first cache line of an entry holds its lock, which its user
// writes on every call, and reading it from another core would pull the
// line away from that core and back, once per probe (measured with the
// caller's clock: two goroutines on distinct keys went from 1.4 to 1.75
// times the pairs per second of one). h is stored before e, so a lookup
// that sees e sees h.
type slot struct {
	h atomic.Uint64
	e atomic.Pointer[entry]
}

const (
	minSlots = 1024 // a power of two
	// minSweep is the fewest entries at which a rebuild drops idle ones:
	// below it, a key used again soon keeps its entry and allocates nothing.
	minSweep = 1 << 16
)

func newTable(slots int) *table {
	return &table{mask: uint64(slots - 1), slots: make([]slot, slots)}
}

func (x *index) init() {
	x.tab.Store(newTable(minSlots))
	x.sweepAt = minSweep
}

// lookup returns key's entry, whose hash is h, or nil. It may return an
// entry that a sweep has just dropped; callers lock it and check dead.
func (x *index) lookup(h uint64, key string) *entry {
	t := x.tab.Load()
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		e := s.e.Load()
		if e == nil || (s.h.Load() == h && e.key == key) {
			return e
		}
	}
}

// find is lookup in the published table once no sweep is under way.
func (x *index) find(h uint64, key string) *entry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lookup(h, key)
}

// insert returns key's live entry, creating it if there is none. A new
// entry's token counter starts at the highest token of any dropped entry,
// so that a key's tokens rise however often its entry comes and goes (I1).
func (x *index) insert(h uint64, key string, now time.Duration) *entry {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.tab.Load()
	if e := x.lookup(h, key); e != nil {
		return e // entries in the published table are live while mu is held
	}
	if sweep := x.n+1 >= x.sweepAt; sweep || (x.n+1)*2 > len(t.slots) {
		t = x.rebuild(now, sweep)
	}
	e := newEntry(h, key, x.floor)
	put(t, e)
	if p := unsafe.StringData(e.key); p == &e.inline[0] {
		x.byAddr[addrSlot(p)].Store(e)
	}
	x.ord.add(e)
	x.n++
	return e
}

// put adds e to t, which has a free slot; the caller holds mu.
func put(t *table, e *entry) {
	i := e.hash & t.mask
	for t.slots[i].e.Load() != nil {
		i = (i + 1) & t.mask
	}
	t.slots[i].h.Store(e.hash)
	t.slots[i].e.Store(e)
}

// rebuild publishes a new table holding the current one's entries, less
// those that hold nothing and that nobody waits for if sweep is set, sized
// to a third full or less (insert rebuilds it again at half full). Dropped
// entries are marked dead under their locks, so a goroutine that found one
// before the swap sees it is dead and looks again. Sweeping when the entries
// have doubled since the last sweep keeps memory in proportion to the live
// leases at amortised constant cost.
func (x *index) rebuild(now time.Duration, sweep bool) *table {
	old := x.tab.Load()
	keep := make([]*entry, 0, x.n)
	for i := range old.slots {
		e := old.slots[i].e.Load()
		if e == nil {
			continue
		}
		if sweep {
			e.mu.Lock()
			if e.idle(now) {
				e.dead = true
				x.floor = max(x.floor, e.counter)
				x.byAddr[addrSlot(unsafe.StringData(e.key))].CompareAndSwap(e, nil) // let it go
				e.mu.Unlock()
				continue
			}
			e.mu.Unlock()
		}
		keep = append(keep, e)
	}
	if sweep {
		x.sweepAt = max(minSweep, 2*len(keep))
		if len(keep) < x.n {
			x.ord.drop()
		}
	}
	size := minSlots
	for size < 3*(len(keep)+1) {
		size *= 2
	}
	t := newTable(size)
	for _, e := range keep {
		put(t, e)
	}
	x.n = len(keep)
	x.tab.Store(t)
	return t
}

// entries calls f for every entry in the published table.
func (x *index) entries(f func(*entry)) {
	t := x.tab.Load()
	for i := range t.slots {
		if e := t.slots[i].e.Load(); e != nil {
			f(e)
		}
	}
}

// sorted returns every entry in the index in two runs sorted by key, which
// nobody writes: the caller may read them after new inserts and sweeps.
func (x *index) sorted() (big, small []*entry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ord.sorted()
}
