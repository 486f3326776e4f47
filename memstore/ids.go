package memstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"

	"github.com/leasehq/lease"
)

// idBatch is how many IDs an idSource makes at a time.
const idBatch = 32

// idSource makes secret lease IDs (I4): the AES-CTR keystream under a key
// and counter from crypto/rand, which is a CSPRNG (NIST's CTR_DRBG is this,
// reseeded), made a batch at a time because one call for 32 IDs costs less
// than a ChaCha8 draw for each. Not safe for concurrent use: the Store keeps
// them in a sync.Pool, which in effect gives each processor its own.
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
