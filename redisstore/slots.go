package redisstore

import (
	"strconv"
	"strings"
	"sync"
)

// numSlots is the number of Redis Cluster's hash slots.
const numSlots = 16384

// crcTable is CRC-16/XMODEM's (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes key names with, a byte at a time.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}

// keySlot is the hash slot Redis Cluster puts a key name in: that of the
// text between the first '{' and the first '}' after it, if that is not
// empty, else that of the whole name (cluster.c, keyHashSlot).
func keySlot(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	return int(crc16(name) & (numSlots - 1))
}

// slotTags holds, for each hash slot, a hash tag of that slot: the first of
// the numbers 0, 1, 2, … written in base 36 ("0" … "z", "10", …) whose
// CRC16 lands there, at most 4 characters. Built on first use, by Cluster
// stores only.
var slotTags = sync.OnceValue(func() *[numSlots]string {
	var tags [numSlots]string
	for n, left := uint64(0), numSlots; left > 0; n++ {
		t := strconv.FormatUint(n, 36)
		if s := crc16(t) & (numSlots - 1); tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return &tags
})
