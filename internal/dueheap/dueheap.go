// Package dueheap is a min-heap of entries by due time that keeps each
// entry's place in it, so that an entry can be moved or taken out without a
// search: the timer queues of lease.Client's renewal scheduler and of the
// HTTP server's expiry tracker.
package dueheap

import (
	"container/heap"
	"time"
)

// Entry is the part of an element the heap uses: embed it (or keep it as a
// field) and give New a function that finds it.
type Entry struct {
	// Due orders the heap. Change it only through Heap.Fix while the
	// element is in the heap.
	Due   time.Time
	place int // index in the heap + 1; 0 when not in it
}

// Queued reports whether the element is in a heap.
func (e *Entry) Queued() bool { return e.place > 0 }

// Heap is a min-heap of T by Entry.Due. It is not safe for concurrent use.
type Heap[T any] struct{ h impl[T] }

// New returns an empty heap of elements whose Entry entry finds.
func New[T any](entry func(T) *Entry) Heap[T] { return Heap[T]{impl[T]{entry: entry}} }

// Len returns the number of elements in the heap.
func (q *Heap[T]) Len() int { return len(q.h.items) }

// Peek returns the element due first; the heap must not be empty.
func (q *Heap[T]) Peek() T { return q.h.items[0] }

// Push adds x, which must not be in the heap.
func (q *Heap[T]) Push(x T) { heap.Push(&q.h, x) }

// Pop removes and returns the element due first; the heap must not be
// empty.
func (q *Heap[T]) Pop() T { return heap.Pop(&q.h).(T) }

// Remove takes x out of the heap, if it is there.
func (q *Heap[T]) Remove(x T) {
	if e := q.h.entry(x); e.place > 0 {
		heap.Remove(&q.h, e.place-1)
	}
}

// Fix restores the order after x's Due changed; x must be in the heap.
func (q *Heap[T]) Fix(x T) { heap.Fix(&q.h, q.h.entry(x).place-1) }

// impl is container/heap's interface over the elements.
type impl[T any] struct {
	items []T
	entry func(T) *Entry
}

func (h impl[T]) Len() int { return len(h.items) }
func (h impl[T]) Less(i, j int) bool {
	return h.entry(h.items[i]).Due.Before(h.entry(h.items[j]).Due)
}
func (h impl[T]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.entry(h.items[i]).place, h.entry(h.items[j]).place = i+1, j+1
}

func (h *impl[T]) Push(x any) {
	h.items = append(h.items, x.(T))
	h.entry(x.(T)).place = len(h.items)
}

func (h *impl[T]) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	var zero T
	h.items[n] = zero // let the element go
	h.items = h.items[:n]
	h.entry(x).place = 0
	if n == 0 {
		h.items = nil // let a burst's backing array go
	}
	return x
}
