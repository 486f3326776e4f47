package memstore

import (
	"crypto/rand"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
)

// hasher hashes keys for the index, with secrets of its store's own, so
// that nobody outside can choose keys that collide in it. A key of 1 to 16
// bytes, as most are, is hashed by wyhash's step for short inputs (the mix
// Go's own map hash uses where the processor has no AES instructions): a
// multiply or two in this call, where hash/maphash goes three calls deep,
// twice per acquire+release pair. A longer key is hashed by maphash.
type hasher struct {
	seed   maphash.Seed
	k0, k1 uint64
}

func (h *hasher) init() {
	h.seed = maphash.MakeSeed()
	var k [16]byte
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails on supported platforms
	h.k0, h.k1 = binary.LittleEndian.Uint64(k[:8]), binary.LittleEndian.Uint64(k[8:])
}

// Constants of wyhash (github.com/wangyi-fudan/wyhash, public domain).
const (
	wyp0 = 0xa0761d6478bd642f
	wyp1 = 0xe7037ed1a0b428db
)

func (h *hasher) hash(key string) uint64 {
	n := len(key)
	if n == 0 || n > 16 {
		return maphash.String(h.seed, key)
	}
	var a, b uint64
	switch {
	case n >= 8: // the first and last 8 bytes, which overlap below 16
		a, b = load64(key), load64(key[n-8:])
	case n >= 4:
		a, b = load32(key), load32(key[n-4:])
	default:
		a = uint64(key[0])<<16 | uint64(key[n>>1])<<8 | uint64(key[n-1])
	}
	hi, lo := bits.Mul64(a^wyp1^h.k1, b^h.k0)
	hi, lo = bits.Mul64(lo^wyp0^uint64(n), hi^wyp1)
	return hi ^ lo
}

// load64 reads s's first 8 bytes, little-endian, which the compiler makes
// one load.
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// load32 is load64 for 4 bytes.
func load32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}
