// Package benchutil runs benchmarks of network operations with an exact
// number of concurrent clients and reports throughput and latency
// percentiles, so that a backend and the alternatives it is compared with are
// measured the same way in one run.
//
// Naming convention read by `make bench` (internal/benchreport):
//
//	BenchmarkCompare<Group>/c=<clients>/<impl>
//
// The first <impl> run in each group and client count is the baseline (the
// engine's raw round trip); every other row is reported as a ratio to it.
package benchutil

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run calls op b.N times in total from exactly clients goroutines, worker
// being the goroutine's number in [0, clients) and i the operation's number.
// It reports ops/s and the p50 and p99 latency in microseconds. Timing each
// call costs two clock reads (~60 ns here): use it for operations that take
// microseconds, not for in-memory ones.
func Run(b *testing.B, clients int, op func(worker, i int) error) {
	b.Helper()
	if clients < 1 {
		b.Fatalf("benchutil: %d clients", clients)
	}
	lat := make([][]time.Duration, clients)
	var (
		next   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Bool
	)
	b.ResetTimer()
	start := time.Now()
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, b.N/clients+1)
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					break
				}
				t0 := time.Now()
				if err := op(w, i); err != nil {
					failed.Store(true)
					b.Errorf("benchutil: worker %d op %d: %v", w, i, err)
					break
				}
				mine = append(mine, time.Since(t0))
			}
			lat[w] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(all[len(all)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100])/1e3, "p99-µs")
}
