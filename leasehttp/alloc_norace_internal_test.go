//go:build !race

package leasehttp

// Allocation counts mean nothing under the race detector, whose
// instrumentation allocates on its own account: this file is built
// without it only, and make test runs it in its alloc-check target.

import (
	"testing"

	"github.com/leasehq/lease"
)

// TestReadRenewAnswerDoesNotAllocate: a Client reads the answer to a batch
// of renewals into the results it was given without an allocation for
// each result: a result's key is its request's string, and the owner and
// expiry the leases of a batch share are read once.
func TestReadRenewAnswerDoesNotAllocate(t *testing.T) {
	allocs := func(n int) float64 {
		results, renewals := benchLeases(n)
		body := appendRenewAnswer(nil, results, false)
		out := make([]lease.RenewResult, len(renewals))
		return testing.AllocsPerRun(20, func() {
			if err := readRenewAnswer(body, renewals, out); err != nil {
				t.Fatal(err)
			}
		})
	}
	// The answer's own (the owner's string, once) are not the results'.
	one, full := allocs(1), allocs(lease.MaxRenewBatch)
	if full > one {
		t.Errorf("reading the answer to %d renewals allocates %v times, to 1 renewal %v: want nothing more for each result", lease.MaxRenewBatch, full, one)
	}
}
