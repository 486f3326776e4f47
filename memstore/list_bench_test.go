package memstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// BenchmarkListWalk walks all pages of a store of 10^5 held leases at the
// default limit. With churn, a new key is acquired before each page, so
// every page has to sort a fresh key into the runs.
func BenchmarkListWalk(b *testing.B) {
	for _, churn := range []bool{false, true} {
		b.Run(fmt.Sprintf("churn=%v", churn), func(b *testing.B) {
			ctx := context.Background()
			s := memtest.New(b)
			const n = 100_000
			for i := range n {
				if _, err := s.Acquire(ctx, fmt.Sprintf("k/%07d", i), "o", time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			extra := 0
			for b.Loop() {
				var p lease.Page
				seen := 0
				for {
					if churn {
						extra++
						if _, err := s.Acquire(ctx, fmt.Sprintf("k/%07d-x%d", extra%n, extra), "o", time.Hour); err != nil {
							b.Fatal(err)
						}
					}
					page, err := s.List(ctx, "k/", p)
					if err != nil {
						b.Fatal(err)
					}
					seen += len(page.Leases)
					if page.Next == "" {
						break
					}
					p.After = page.Next
				}
				if seen < n {
					b.Fatalf("walk saw %d leases, want at least %d", seen, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/lease")
		})
	}
}
