// Package dueheap is a min-heap of entries by due time from which an entry
// can be moved or taken out without a search: the timer queues of
// lease.Client's renewal scheduler and of the HTTP server's expiry tracker.
//
// Both hold up to hundreds of thousands of entries, each a separate object,
// and move one on every renewal. The heap is laid out for that: each slot
// holds its entry's due time beside the element, so that ordering the heap
// reads only its own array and never follows a pointer into an element;
// it has four children per node, so a path from the root is half as long
// as a binary heap's and a node's children share two cache lines; and an
// entry taken out or moved leaves its old slot behind, marked stale by a
// sequence number, instead of being dug out (which would write the new
// place of every element it passes). Stale slots are dropped when they
// reach the top, and all at once when they outnumber the live ones, so the
// heap's array stays under about twice the live entries.
package dueheap

import "time"

// Entry is the part of an element the heap uses: embed it (or keep it as a
// field) and give New a function that finds it. An element belongs to one
// heap for its life (its sequence numbers are that heap's).
type Entry struct {
	// Due orders the heap. Change it only through Heap.Fix while the
	// element is in the heap.
	Due time.Time
	seq uint64 // the live slot's sequence number; 0 when not in a heap
}

// Queued reports whether the element is in a heap.
func (e *Entry) Queued() bool { return e.seq != 0 }

// slot is one place of the heap: a copy of an entry's due time and
// sequence number, and the element. It is stale when the element's entry
// no longer has its sequence number.
type slot[T any] struct {
	due  time.Time
	seq  uint64
	item T
}

// Heap is a min-heap of T by Entry.Due. It is not safe for concurrent use.
// The zero Heap is not usable: make one with New.
type Heap[T any] struct {
	slots []slot[T] // a 4-ary min-heap by due
	entry func(T) *Entry
	live  int    // slots that are not stale
	seq   uint64 // the last sequence number given out
}

// New returns an empty heap of elements whose Entry entry finds.
func New[T any](entry func(T) *Entry) Heap[T] { return Heap[T]{entry: entry} }

// Len returns the number of elements in the heap.
func (q *Heap[T]) Len() int { return q.live }

// Peek returns the element due first; the heap must not be empty.
func (q *Heap[T]) Peek() T {
	q.dropStaleTop()
	return q.slots[0].item
}

// Push adds x, which must not be in the heap.
func (q *Heap[T]) Push(x T) {
	e := q.entry(x)
	q.seq++
	e.seq = q.seq
	q.live++
	q.slots = append(q.slots, slot[T]{due: e.Due, seq: e.seq, item: x})
	q.up(len(q.slots) - 1)
}

// Pop removes and returns the element due first; the heap must not be
// empty.
func (q *Heap[T]) Pop() T {
	q.dropStaleTop()
	x := q.slots[0].item
	q.entry(x).seq = 0
	q.live--
	q.removeTop()
	q.bound()
	return x
}

// Remove takes x out of the heap, if it is there.
func (q *Heap[T]) Remove(x T) {
	e := q.entry(x)
	if e.seq == 0 {
		return
	}
	e.seq = 0
	q.live--
	q.bound()
}

// bound keeps the stale slots fewer than the live ones (plus a few): it
// drops them all when they are not.
func (q *Heap[T]) bound() {
	switch {
	case q.live == 0:
		q.slots = nil // let a burst's backing array go
	case len(q.slots) > 2*q.live+64:
		q.compact()
	}
}

// Fix restores the order after x's Due changed; x must be in the heap.
func (q *Heap[T]) Fix(x T) {
	q.Remove(x)
	q.Push(x)
}

// stale reports whether slot i's element has left the heap or moved.
func (q *Heap[T]) stale(i int) bool {
	return q.entry(q.slots[i].item).seq != q.slots[i].seq
}

// dropStaleTop removes stale slots from the top until a live one is there.
func (q *Heap[T]) dropStaleTop() {
	for q.stale(0) {
		q.removeTop()
	}
}

// removeTop removes slot 0.
func (q *Heap[T]) removeTop() {
	n := len(q.slots) - 1
	last := q.slots[n]
	q.slots[n] = slot[T]{} // let the element go
	q.slots = q.slots[:n]
	if n == 0 {
		q.slots = nil // let a burst's backing array go
		return
	}
	q.slots[0] = last
	q.down(0)
}

// compact drops every stale slot and orders the rest again.
func (q *Heap[T]) compact() {
	kept := q.slots[:0]
	for i := range q.slots {
		if !q.stale(i) {
			kept = append(kept, q.slots[i])
		}
	}
	clear(q.slots[len(kept):])
	q.slots = kept
	for i := (len(kept) - 2) / 4; i >= 0; i-- {
		q.down(i)
	}
}

// up moves slot i towards the root to its place.
func (q *Heap[T]) up(i int) {
	s := q.slots[i]
	for i > 0 {
		p := (i - 1) / 4
		if !s.due.Before(q.slots[p].due) {
			break
		}
		q.slots[i] = q.slots[p]
		i = p
	}
	q.slots[i] = s
}

// down moves slot i away from the root to its place.
func (q *Heap[T]) down(i int) {
	s, n := q.slots[i], len(q.slots)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		// The earliest of i's up to four children.
		m := c
		for k := c + 1; k < min(c+4, n); k++ {
			if q.slots[k].due.Before(q.slots[m].due) {
				m = k
			}
		}
		if !q.slots[m].due.Before(s.due) {
			break
		}
		q.slots[i] = q.slots[m]
		i = m
	}
	q.slots[i] = s
}
