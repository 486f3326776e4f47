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
