package memstore

import (
	"fmt"
	"strings"
	"testing"
)

// TestHashEveryByteCounts: for keys of every length the short path takes
// and a few beyond, changing any bit of any byte changes the hash, so the
// short path reads all of a key and not only its ends.
func TestHashEveryByteCounts(t *testing.T) {
	var h hasher
	h.init()
	for n := 1; n <= 24; n++ {
		key := []byte(strings.Repeat("k", n))
		base := h.hash(string(key))
		for i := range n {
			for bit := range 8 {
				key[i] ^= 1 << bit
				if h.hash(string(key)) == base {
					t.Errorf("len %d: flipping bit %d of byte %d leaves the hash unchanged", n, bit, i)
				}
				key[i] ^= 1 << bit
			}
		}
	}
}

// TestHashSpreads: the index takes a hash's low bits, so keys that differ
// in a digit or two must spread over them about as random ones would, and
// two stores must hash apart (each has its own secrets).
func TestHashSpreads(t *testing.T) {
	var h, other hasher
	h.init()
	other.init()
	for _, format := range []string{"%d", "job/%d", "bench/0/%d", "a-longer-key-%08d"} {
		used := make(map[uint64]bool)
		same := 0
		for i := range 1024 {
			k := fmt.Sprintf(format, i)
			used[h.hash(k)&1023] = true
			if h.hash(k) == other.hash(k) {
				same++
			}
		}
		// 1024 random hashes fill about 1024(1-1/e) = 647 of 1024 slots.
		if len(used) < 600 {
			t.Errorf("keys %q: 1024 keys fill %d of 1024 slots, want about 647", format, len(used))
		}
		if same > 0 {
			t.Errorf("keys %q: %d keys hash the same in two stores", format, same)
		}
	}
}
