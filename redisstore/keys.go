package redisstore

import (
	"fmt"
	"strings"
)

// Key layout. For a user key K in namespace NS (default "lease"):
//
//	NS:{E}:l   the lease: a string (see value.go) expiring by PX
//	NS:{E}:t   the token counter: a string INCRed per grant, never deleted,
//	           never given an expiry
//	NS:store-id the store's random id (StoreID), set once by SET NX;
//	           every grant checks it is still the one the Store read
//	           (wiped.go); on Cluster, where a grant's script cannot reach
//	           it, each hash slot has a copy, NS:{T}:store-id, written by
//	           the slot's first grant and checked instead
//	NS:floor   the token floor (Bump): every grant's token is above it; on
//	           Cluster one per hash slot instead, NS:{T}:floor with T the
//	           slot's tag (slotTags), read by the grants of the keys in
//	           that slot
//
// where E is K with '%' written as "%25" and '}' as "%7D". Redis Cluster
// hashes only what lies between the first '{' and the first '}' after it;
// the namespace holds neither brace and E holds no '}', so the tag is exactly
// E, the two keys of one lease always share a hash slot (the scripts touch
// both in one call), and different user keys spread over the slots. Any
// other byte of K, '{' included, is kept as it is, so the names stay
// readable in redis-cli and List can SCAN for a key prefix.

const (
	leaseSuffix   = "}:l"
	counterSuffix = "}:t"
	floorSuffix   = ":floor" // after the namespace, or a slot's tag and '}'
	storeIDSuffix = ":store-id"
	channelSuffix = ":released"
	changesSuffix = ":changes" // every change, for Watch
)

var tagEscaper = strings.NewReplacer("%", "%25", "}", "%7D")
var tagUnescaper = strings.NewReplacer("%25", "%", "%7D", "}")

// globEscaper quotes the characters SCAN MATCH gives a meaning.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

func (s *Store) leaseKey(key string) string {
	return s.ns + ":{" + tagEscaper.Replace(key) + leaseSuffix
}

func (s *Store) counterKey(key string) string {
	return s.ns + ":{" + tagEscaper.Replace(key) + counterSuffix
}

// keyPair returns the lease and counter key names, escaping key once.
func (s *Store) keyPair(key string) []string {
	head := s.ns + ":{" + tagEscaper.Replace(key)
	return []string{head + leaseSuffix, head + counterSuffix}
}

// acquireKeys returns the lease, counter, floor and store id key names of
// key, for acquire.lua.
func (s *Store) acquireKeys(key string) []string {
	tag := tagEscaper.Replace(key)
	head := s.ns + ":{" + tag
	if !s.cluster {
		return []string{head + leaseSuffix, head + counterSuffix, s.ns + floorSuffix, s.ns + storeIDSuffix}
	}
	slot := int(crc16(tag) & (numSlots - 1))
	return []string{head + leaseSuffix, head + counterSuffix, s.slotFloorKey(slot), s.slotIDKey(slot)}
}

// slotFloorKey is the name of the token floor of a hash slot on Cluster.
func (s *Store) slotFloorKey(slot int) string {
	return s.ns + ":{" + slotTags()[slot] + "}" + floorSuffix
}

// slotIDKey is the name of a hash slot's copy of the store id on Cluster.
func (s *Store) slotIDKey(slot int) string {
	return s.ns + ":{" + slotTags()[slot] + "}" + storeIDSuffix
}

// slotIDKeys are the names of every hash slot's copy of the store id on
// Cluster.
func (s *Store) slotIDKeys() []string {
	keys := make([]string, numSlots)
	for i := range keys {
		keys[i] = s.slotIDKey(i)
	}
	return keys
}

// floorKeys are the names of every token floor of the store: one, or on
// Cluster one per hash slot.
func (s *Store) floorKeys() []string {
	if !s.cluster {
		return []string{s.ns + floorSuffix}
	}
	keys := make([]string, numSlots)
	for i := range keys {
		keys[i] = s.slotFloorKey(i)
	}
	return keys
}

// listPattern is the SCAN MATCH pattern of the lease keys whose user key
// starts with prefix.
func (s *Store) listPattern(prefix string) string {
	return globEscaper.Replace(s.ns+":{"+tagEscaper.Replace(prefix)) + "*" + leaseSuffix
}

// counterPattern is the SCAN MATCH pattern of the token counters of the
// user keys that start with prefix: one for every key ever leased.
func (s *Store) counterPattern(prefix string) string {
	return globEscaper.Replace(s.ns+":{"+tagEscaper.Replace(prefix)) + "*" + counterSuffix
}

// userKey recovers the user key from a lease key name.
func (s *Store) userKey(name string) (string, bool) { return s.userKeyOf(name, leaseSuffix) }

// userKeyOf recovers the user key from a key name ending in suffix
// (leaseSuffix or counterSuffix).
func (s *Store) userKeyOf(name, suffix string) (string, bool) {
	head := s.ns + ":{"
	if !strings.HasPrefix(name, head) || !strings.HasSuffix(name, suffix) || len(name) < len(head)+len(suffix) {
		return "", false
	}
	tag := name[len(head) : len(name)-len(suffix)]
	if strings.Contains(tag, "}") {
		return "", false
	}
	return tagUnescaper.Replace(tag), true
}

// validateNamespace keeps the hash tag the one the store puts in: no braces,
// and no control characters that would make key names unreadable.
func validateNamespace(ns string) error {
	if ns == "" {
		return fmt.Errorf("namespace is empty")
	}
	if len(ns) > 64 {
		return fmt.Errorf("namespace is %d bytes, more than 64", len(ns))
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if c == '{' || c == '}' || c < 0x20 || c == 0x7f {
			return fmt.Errorf("namespace %q has %q at byte %d: braces and control characters are not allowed", ns, c, i)
		}
	}
	return nil
}
