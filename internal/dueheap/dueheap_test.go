package dueheap_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/dueheap"
)

type item struct {
	dueheap.Entry
	n int
}

// TestHeapOrder: pops come in Due order after pushes, removals and fixes
// in any order, and an element knows whether it is queued.
func TestHeapOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(0, 0)
	q := dueheap.New(func(x *item) *dueheap.Entry { return &x.Entry })
	var all []*item
	for i := range 200 {
		x := &item{n: i}
		x.Due = t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		q.Push(x)
		all = append(all, x)
	}
	for _, x := range all[:50] {
		q.Remove(x)
		q.Remove(x) // again: nothing
		if x.Queued() {
			t.Fatalf("item %d queued after Remove", x.n)
		}
	}
	for _, x := range all[50:100] {
		x.Due = t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		q.Fix(x)
	}
	var got []time.Time
	for q.Len() > 0 {
		if !q.Peek().Queued() {
			t.Fatal("the head is not queued")
		}
		got = append(got, q.Pop().Due)
	}
	if len(got) != 150 || !slices.IsSortedFunc(got, time.Time.Compare) {
		t.Fatalf("popped %d, sorted %v; want 150 in Due order", len(got), slices.IsSortedFunc(got, time.Time.Compare))
	}
	for _, x := range all {
		if x.Queued() {
			t.Fatalf("item %d queued after the heap emptied", x.n)
		}
	}
}

// TestHeapAgainstSorted drives the heap with random pushes, pops, removes
// and moves, checking each pop against the earliest live element found by
// a scan, and that the slots left behind by removes and moves stay bounded.
func TestHeapAgainstSorted(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Unix(0, 0)
	q := dueheap.New(func(x *item) *dueheap.Entry { return &x.Entry })
	var in []*item // the elements in the heap
	n := 0
	for step := range 100000 {
		in = slices.DeleteFunc(in, func(x *item) bool { return !x.Queued() })
		if q.Len() != len(in) {
			t.Fatalf("step %d: Len %d, want %d", step, q.Len(), len(in))
		}
		if max := 2*len(in) + 64; dueheap.Slots(&q) > max {
			t.Fatalf("step %d: %d slots for %d elements, want at most %d", step, dueheap.Slots(&q), len(in), max)
		}
		switch op := r.IntN(10); {
		case op < 4 || len(in) == 0:
			n++
			x := &item{n: n}
			x.Due = t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
			in = append(in, x)
			q.Push(x)
		case op < 6:
			want := slices.MinFunc(in, func(a, b *item) int { return a.Due.Compare(b.Due) })
			got := q.Pop()
			if !got.Due.Equal(want.Due) || got.Queued() {
				t.Fatalf("step %d: popped %v (queued %v), want due %v", step, got.Due, got.Queued(), want.Due)
			}
		case op < 8:
			q.Remove(in[r.IntN(len(in))])
		default:
			x := in[r.IntN(len(in))]
			x.Due = t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
			q.Fix(x)
		}
	}
}
