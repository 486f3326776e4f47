//go:build !race

package memstore

// Allocation counts mean nothing under the race detector, which makes
// sync.Pool drop a share of the items put back on purpose (so the
// per-processor ID sources are made afresh now and then): this file is
// built without it only, and make test runs it in its alloc-check target.

import (
	"context"
	"testing"
	"time"
)

// TestPairDoesNotAllocate: once a key's entry exists, an acquire+release
// pair allocates nothing (issue 2's hot-path goal).
func TestPairDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	s := New()
	pair := func() {
		l, err := s.Acquire(ctx, "job", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	pair() // creates the entry
	if n := testing.AllocsPerRun(100, pair); n != 0 {
		t.Errorf("acquire+release allocates %v times, want 0", n)
	}
}
