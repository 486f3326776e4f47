package memstore

import (
	"runtime"
	"sync"
	"testing"

	"github.com/leasehq/lease"
)

// TestIDsDistinct draws several batches of IDs: none is zero or repeated.
func TestIDsDistinct(t *testing.T) {
	var g idSource
	g.init()
	seen := make(map[lease.ID]bool)
	for range 5 * idBatch {
		id := g.next()
		if id.IsZero() || seen[id] {
			t.Fatalf("id %v is zero or repeated", id)
		}
		seen[id] = true
	}
	var h idSource
	h.init()
	if seen[h.next()] {
		t.Error("two sources made the same id: not seeded independently")
	}
}

// TestIDNeverZero: a zero ID in the keystream is skipped, and an ID zero in
// one half only is not.
func TestIDNeverZero(t *testing.T) {
	var g idSource
	g.init()
	g.used = 0
	clear(g.buf[:32])
	g.buf[31] = 1 // the second ID: zero but for its last byte
	want := lease.ID(g.buf[16:32])
	if got := g.next(); got != want {
		t.Errorf("next() = %x, want the second ID in the batch, %x", got[:], want[:])
	}
	g.used = 0
	clear(g.buf[:32])
	g.buf[0] = 1 // the first ID: zero but for its first byte
	if got := g.next(); got != lease.ID(g.buf[:16]) {
		t.Errorf("next() = %x, want the first ID in the batch, %x", got[:], g.buf[:16])
	}
}

// TestIDSourcesPerProcessor: when GOMAXPROCS has grown past the
// processors the sources were made for, a processor without one makes
// sources for all, keeping those in use; IDs drawn from many goroutines at
// once never repeat.
func TestIDSourcesPerProcessor(t *testing.T) {
	var x idSources
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var id lease.ID
	x.fill(&id)
	first := (*x.srcs.Load())[0]
	procs := max(4, prev)
	runtime.GOMAXPROCS(procs)
	var id2 lease.ID
	x.fillSlow(&id2) // what fill does on a processor past the sources
	if srcs := *x.srcs.Load(); len(srcs) != procs || srcs[0] != first {
		t.Fatalf("%d sources after GOMAXPROCS(%d), the first kept: %v", len(srcs), procs, srcs[0] == first)
	}
	const workers, each = 8, 500
	ids := make([][]lease.ID, workers)
	var wg sync.WaitGroup
	for w := range ids {
		wg.Go(func() {
			ids[w] = make([]lease.ID, each)
			for i := range ids[w] {
				x.fill(&ids[w][i])
			}
		})
	}
	wg.Wait()
	seen := map[lease.ID]bool{id: true, id2: true}
	if len(seen) != 2 {
		t.Fatal("the first two IDs are the same")
	}
	for _, s := range ids {
		for _, id := range s {
			if id.IsZero() || seen[id] {
				t.Fatalf("id %v is zero or repeated", id)
			}
			seen[id] = true
		}
	}
}
