package memstore

import (
	"slices"
	"strings"
)

// order keeps the index's entries in key order for List, guarded by
// index.mu. An insert only appends to fresh; the next List sorts fresh
// and merges it into small, and small into big once small has grown to an
// eighth of big. So inserts stay cheap however many keys there are, a page
// costs a merge of what was inserted since the last one, and each entry is
// copied O(log n) times over its life. big and small are never written once
// built: a List goes on reading the pair it took after releasing mu.
type order struct {
	big, small []*entry // sorted by key
	fresh      []*entry // inserted since the last List, unsorted
}

// minSmall is the size small may reach, whatever big's, before it is merged
// into big.
const minSmall = 1024

func byKey(a, b *entry) int { return strings.Compare(a.key, b.key) }

// add records a new entry; the caller holds mu.
func (o *order) add(e *entry) { o.fresh = append(o.fresh, e) }

// sorted folds fresh in and returns the two sorted runs, which between them
// hold every entry in the index once; the caller holds mu.
func (o *order) sorted() (big, small []*entry) {
	if len(o.fresh) > 0 {
		slices.SortFunc(o.fresh, byKey)
		o.small = merge(o.small, o.fresh)
		clear(o.fresh) // let dropped entries go
		o.fresh = o.fresh[:0]
	}
	if len(o.small) > max(minSmall, len(o.big)/8) {
		o.big, o.small = merge(o.big, o.small), nil
	}
	return o.big, o.small
}

// drop removes the entries marked dead from every run; the caller holds mu
// and has marked them while sweeping, which costs as much.
func (o *order) drop() {
	live := func(e *entry) bool { return !e.dead }
	o.big = filter(o.big, live)
	o.small = filter(o.small, live)
	o.fresh = slices.DeleteFunc(o.fresh, func(e *entry) bool { return e.dead }) // never published
}

// filter returns a new slice of the entries of s that keep accepts, or s
// itself if it accepts them all.
func filter(s []*entry, keep func(*entry) bool) []*entry {
	i := slices.IndexFunc(s, func(e *entry) bool { return !keep(e) })
	if i < 0 {
		return s
	}
	out := make([]*entry, i, len(s))
	copy(out, s[:i])
	for _, e := range s[i+1:] {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// merge returns a new sorted slice of a's and b's entries. For each entry
// of b, which is meant to be the shorter run, it finds its place in a by binary search and copies
// the run of a before it whole.
func merge(a, b []*entry) []*entry {
	out := make([]*entry, 0, len(a)+len(b))
	for _, e := range b {
		i, _ := slices.BinarySearchFunc(a, e, byKey)
		out = append(out, a[:i]...)
		out = append(out, e)
		a = a[i:]
	}
	return append(out, a...)
}

// from returns the entries of run whose keys come after after and are at
// least prefix, in order.
func from(run []*entry, prefix, after string) []*entry {
	i, _ := slices.BinarySearchFunc(run, prefix, func(e *entry, k string) int { return strings.Compare(e.key, k) })
	if after >= prefix {
		i, _ = slices.BinarySearchFunc(run, after, func(e *entry, k string) int {
			if e.key <= k {
				return -1
			}
			return 1
		})
	}
	return run[i:]
}
