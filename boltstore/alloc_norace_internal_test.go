//go:build !race

package boltstore

// Allocation counts mean nothing under the race detector, whose
// instrumentation allocates on its own account: this file is built
// without it only, and make test runs it in its alloc-check target.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestReadLeaseDoesNotAllocate: the commit loop reads a lease record (a
// renewal's first B-tree walk) without allocating: the key's bytes for the
// Seek and the record's checksum are the transaction's buffer, and the
// owner a batch's leases share is one string.
func TestReadLeaseDoesNotAllocate(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "lease.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var keys []string
	for i := range 64 {
		l, err := s.Acquire(ctx, fmt.Sprintf("client/%02d/%05d", i%4, i), "worker", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, l.Key)
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	tx := s.live
	if _, _, err := tx.getLease(keys[0]); err != nil { // the cursor, the owner
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(20, func() {
		for _, k := range keys {
			if _, ok, err := tx.getLease(k); !ok || err != nil {
				t.Fatalf("getLease(%s) = %v, %v", k, ok, err)
			}
		}
	})
	if n != 0 {
		t.Errorf("reading %d lease records allocates %v times, want 0", len(keys), n)
	}
}
