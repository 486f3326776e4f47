package memstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	_ "unsafe" // go:linkname

	"github.com/leasehq/lease"
)

// idBatch is how many IDs an idSource makes at a time.
const idBatch = 32

// idSource makes secret lease IDs (I4): the AES-CTR keystream under a key
// and counter from crypto/rand, which is a CSPRNG (NIST's CTR_DRBG is this,
// reseeded), made a batch at a time because one call for 32 IDs costs less
// than a ChaCha8 draw for each. Not safe for concurrent use: the Store keeps
// one per processor (idSources).
type idSource struct {
	ctr  cipher.Stream
	buf  [idBatch * len(lease.ID{})]byte
	used int // bytes of buf handed out
}

func (g *idSource) init() {
	var seed [32 + aes.BlockSize]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails on supported platforms
	block, err := aes.NewCipher(seed[:32])
	if err != nil {
		panic("memstore: aes.NewCipher with a 32-byte key: " + err.Error()) // cannot happen
	}
	g.ctr = cipher.NewCTR(block, seed[32:])
	g.used = len(g.buf)
}

// next returns a fresh random ID, never the zero ID.
func (g *idSource) next() lease.ID {
	var id lease.ID
	g.fill(&id)
	return id
}

// fill sets *id to a fresh random ID, never the zero ID. It writes the ID
// in place: returning one by value costs copies through the stack, which
// the acquire path feels. The zero test reads the batch as two words, where
// id.IsZero would compare a copy on the stack with a zero ID in memory.
func (g *idSource) fill(id *lease.ID) {
	for {
		if g.used == len(g.buf) {
			clear(g.buf[:]) // keystream XOR zero is the keystream
			g.ctr.XORKeyStream(g.buf[:], g.buf[:])
			g.used = 0
		}
		b := g.buf[g.used : g.used+len(id)]
		g.used += len(id)
		if binary.LittleEndian.Uint64(b)|binary.LittleEndian.Uint64(b[8:]) != 0 {
			*id = lease.ID(b)
			return
		}
	}
}

// idSources gives each processor an idSource of its own: the calling
// goroutine is pinned to its processor (runtime.procPin, which the Go
// runtime keeps for linkname callers: go.dev/issue/67401) and uses that
// processor's source, with no lock and no atomic write. A sync.Pool does
// the same through a Get and a Put, which cost more than the ID itself.
// The zero value is ready; sources are made on first use.
type idSources struct {
	mu   sync.Mutex                      // guards growing srcs
	srcs atomic.Pointer[[]*paddedSource] // indexed by processor id
}

// paddedSource is an idSource alone on its cache lines.
type paddedSource struct {
	idSource
	raceMu sync.Mutex // taken only under the race detector (race.go)
	_      [64]byte
}

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// fill sets *id to a fresh secret ID from the calling processor's source.
func (x *idSources) fill(id *lease.ID) {
	p := procPin()
	var srcs []*paddedSource
	if sp := x.srcs.Load(); sp != nil {
		srcs = *sp
	}
	if uint(p) < uint(len(srcs)) { // uint: no bounds check below
		if g := srcs[p]; g != nil {
			if raceEnabled { // unpinned: the lock may wait
				procUnpin()
				g.raceMu.Lock()
				g.fill(id)
				g.raceMu.Unlock()
				return
			}
			g.fill(id)
			procUnpin()
			return
		}
	}
	procUnpin()
	x.fillSlow(id)
}

// fillSlow is fill where the caller's processor has no source yet: it makes
// sources up to GOMAXPROCS (which may have grown), then fills as fill does.
// Sources are never replaced, only added, so a pinned reader of an older
// slice still holds the only source of its processor.
func (x *idSources) fillSlow(id *lease.ID) {
	x.mu.Lock()
	n := runtime.GOMAXPROCS(0)
	var srcs []*paddedSource
	if old := x.srcs.Load(); old != nil {
		srcs = *old
	}
	if len(srcs) < n || slices.Contains(srcs, nil) {
		grown := make([]*paddedSource, max(n, len(srcs)))
		copy(grown, srcs)
		for i, g := range grown {
			if g == nil {
				g = new(paddedSource)
				g.init()
				grown[i] = g
			}
		}
		x.srcs.Store(&grown)
	}
	x.mu.Unlock()
	x.fill(id)
}
