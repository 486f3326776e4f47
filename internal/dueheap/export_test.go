package dueheap

// Slots returns the number of slots in q's array, stale ones included.
func Slots[T any](q *Heap[T]) int { return len(q.slots) }
