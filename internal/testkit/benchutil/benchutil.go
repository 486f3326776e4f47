// Package benchutil runs benchmarks of network operations with an exact
// number of concurrent clients and reports throughput and latency
// percentiles, so that a backend and the alternatives it is compared with are
// measured the same way in one run.
//
// Naming convention read by `make bench` (tools/benchreport):
//
//	BenchmarkCompare<Group>/c=<clients>/<impl>
//
// The first <impl> run in each group and client count is the baseline (the
// engine's raw round trip); every other row is reported as a ratio to it.
//
// An interleaved benchmark (Interleave), named
// BenchmarkCompare<Group>/c=<clients>/interleaved, measures several
// implementations in one line; the report makes a row of each.
package benchutil

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
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
	b.ResetTimer()
	start := time.Now()
	all, err := runOps(op, clients, b.N, make([]time.Duration, 0, b.N))
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("benchutil: %v", err)
	}
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(all[len(all)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100])/1e3, "p99-µs")
}

// Impl is one implementation that Interleave measures: Op is one
// operation, from client worker in [0, clients).
type Impl struct {
	Name string
	Op   func(worker int) error
}

// MinRounds is the fewest rounds Interleave measures from one client,
// whatever b.N: a p50 of fewer than a few thousand samples of a
// millisecond-long operation moves by percents between runs.
const MinRounds = 2000

// From more than one client, a round runs SliceOps operations per client of
// each impl, and there are at least MinSliceRounds rounds. Long slices keep
// small the share of each slice's start and end, when fewer than all
// clients are busy.
const (
	SliceOps       = 64
	MinSliceRounds = 12
)

// Interleave measures impls side by side, from exactly clients goroutines:
// each round runs every impl in turn, starting from the next impl each
// round, so that every implementation meets the same moments of the machine
// and the engine (a slow spell of the disk falls on all of them alike) and
// none always follows the same other. Rows measured one after another, as
// Run's are, each get a window of their own; on this machine a window's
// luck moved the ratio between two etcd rows by up to ±10% at one client
// and ±15% at 32 between runs, interleaved by a few percent.
//
// From one client a round is one operation of each impl, and there are
// max(b.N, MinRounds) rounds. From more, a round is a slice of
// SliceOps×clients operations of each impl, taken by the clients as they
// come, and there are max(b.N, MinSliceRounds) rounds; an impl's time is
// the wall time of its slices.
//
// For each impl it reports "<name>:ns/op" (its time per operation),
// "<name>:ops/s", "<name>:p50-µs", "<name>:p99-µs" and its place in impls as
// "<name>:row" (go test prints units sorted), beside the benchmark's own
// ns/op, allocs/op and B/op per round of all impls together.
// tools/benchreport makes one row of each impl out of them. Name must
// not contain a colon or white space.
func Interleave(b *testing.B, clients int, impls []Impl) {
	b.Helper()
	if clients < 1 {
		b.Fatalf("benchutil: %d clients", clients)
	}
	if len(impls) == 0 {
		b.Fatal("benchutil: no impls to interleave")
	}
	for _, im := range impls {
		if im.Name == "" || strings.ContainsAny(im.Name, ": \t\n") {
			b.Fatalf("benchutil: impl name %q: want a non-empty name without colons or white space", im.Name)
		}
	}
	rounds, per := max(b.N, MinRounds), 1
	if clients > 1 {
		rounds, per = max(b.N, MinSliceRounds), SliceOps*clients
	}
	lat := make([][]time.Duration, len(impls))
	for i := range lat {
		lat[i] = make([]time.Duration, 0, rounds*per)
	}
	busy := make([]time.Duration, len(impls))
	var before, after runtime.MemStats
	b.ResetTimer()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for r := range rounds {
		for k := range impls {
			i := (r + k) % len(impls)
			t0 := time.Now()
			var err error
			lat[i], err = runOps(func(w, _ int) error { return impls[i].Op(w) }, clients, per, lat[i])
			busy[i] += time.Since(t0)
			if err != nil {
				b.Fatalf("benchutil: %s, round %d: %v", impls[i].Name, r, err)
			}
		}
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	b.StopTimer()
	ops := float64(rounds * per)
	for i, im := range impls {
		slices.Sort(lat[i])
		b.ReportMetric(float64(busy[i].Nanoseconds())/ops, im.Name+":ns/op")
		b.ReportMetric(ops/busy[i].Seconds(), im.Name+":ops/s")
		b.ReportMetric(float64(lat[i][len(lat[i])/2])/1e3, im.Name+":p50-µs")
		b.ReportMetric(float64(lat[i][len(lat[i])*99/100])/1e3, im.Name+":p99-µs")
		b.ReportMetric(float64(i), im.Name+":row")
	}
	// Per round, not per b.N: the two differ when a minimum applies.
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(rounds), "ns/op")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(rounds), "allocs/op")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(rounds), "B/op")
}

// runOps calls op n times in total from exactly clients goroutines (from
// this one if clients is 1), worker being the goroutine's number in
// [0, clients) and i the operation's number, and appends the calls'
// latencies to lat. It stops at the first error.
func runOps(op func(worker, i int) error, clients, n int, lat []time.Duration) ([]time.Duration, error) {
	if clients == 1 {
		for i := range n {
			t0 := time.Now()
			if err := op(0, i); err != nil {
				return lat, fmt.Errorf("worker 0 op %d: %w", i, err)
			}
			lat = append(lat, time.Since(t0))
		}
		return lat, nil
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n/clients+1)
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				t0 := time.Now()
				if err := op(w, i); err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("worker %d op %d: %w", w, i, err))
					mu.Unlock()
					next.Store(int64(n)) // the others stop
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat, first
}

// Row is one implementation's latencies, measured side by side with other
// rows' by a benchmark that interleaves them itself: one whose operation
// times only part of what it does (a hand-off after a term of waiting), or
// yields several latencies (an event reaching each of many watchers), which
// Interleave's operations cannot.
type Row struct {
	Name      string
	Latencies []time.Duration // at least one
	// Extra are further metrics of the row by unit, e.g. "over-ttl-rtt";
	// units must not contain a colon or white space.
	Extra map[string]float64
}

// Timed is one row of InterleaveRounds: Run does the row's operation of
// round r and returns how long the part that counts took.
type Timed struct {
	Name string
	Run  func(ctx context.Context, round int) (time.Duration, error)
}

// InterleaveRounds runs rounds rounds of rows, each round one operation of
// every row, starting from the next row each round (as Interleave does),
// and reports them with ReportRows. For operations whose time is not
// simply a call's (a hand-off timed from one event to another).
func InterleaveRounds(b *testing.B, ctx context.Context, rounds int, rows []Timed) {
	b.Helper()
	lat := make([][]time.Duration, len(rows))
	b.ResetTimer()
	start := time.Now()
	for r := range rounds {
		for k := range rows {
			i := (r + k) % len(rows)
			d, err := rows[i].Run(ctx, r)
			if err != nil {
				b.Fatalf("%s, round %d: %v", rows[i].Name, r, err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	out := make([]Row, len(rows))
	for i, row := range rows {
		out[i] = Row{Name: row.Name, Latencies: lat[i]}
	}
	ReportRows(b, elapsed/time.Duration(rounds), out)
}

// ReportRows reports rows in Interleave's format, so that
// tools/benchreport makes a row of each: for each, "<name>:ns/op" (the
// mean latency), "<name>:ops/s" (its inverse), "<name>:p50-µs",
// "<name>:p99-µs", its extra metrics and its place as "<name>:row". The
// benchmark's own ns/op is perRound, the wall time of one round of all
// rows (its allocs/op and B/op, under -benchmem, cover all rows together).
func ReportRows(b *testing.B, perRound time.Duration, rows []Row) {
	b.Helper()
	if len(rows) == 0 {
		b.Fatal("benchutil: no rows to report")
	}
	for i, r := range rows {
		if r.Name == "" || strings.ContainsAny(r.Name, ": \t\n") {
			b.Fatalf("benchutil: row name %q: want a non-empty name without colons or white space", r.Name)
		}
		if len(r.Latencies) == 0 {
			b.Fatalf("benchutil: row %s has no latencies", r.Name)
		}
		lat := slices.Clone(r.Latencies)
		slices.Sort(lat)
		var sum time.Duration
		for _, d := range lat {
			sum += d
		}
		mean := float64(sum.Nanoseconds()) / float64(len(lat))
		b.ReportMetric(mean, r.Name+":ns/op")
		if mean > 0 {
			b.ReportMetric(1e9/mean, r.Name+":ops/s")
		}
		b.ReportMetric(float64(lat[len(lat)/2])/1e3, r.Name+":p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, r.Name+":p99-µs")
		for unit, v := range r.Extra {
			if unit == "" || strings.ContainsAny(unit, ": \t\n") {
				b.Fatalf("benchutil: row %s: unit %q: want a non-empty unit without colons or white space", r.Name, unit)
			}
			b.ReportMetric(v, r.Name+":"+unit)
		}
		b.ReportMetric(float64(i), r.Name+":row")
	}
	b.ReportMetric(float64(perRound.Nanoseconds()), "ns/op")
}

// Percentile returns the p-th percentile (0 ≤ p < 100) of lat, as
// ReportRows computes it, without changing lat.
func Percentile(lat []time.Duration, p int) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*p/100]
}
