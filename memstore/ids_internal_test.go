package memstore

import (
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
