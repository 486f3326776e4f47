package main

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cannedOutput is `go test -bench` output as GOMAXPROCS=2 prints it, with a
// run of -count 3, an engine log line, and lines the parser must ignore.
const cannedOutput = `goos: linux
goarch: amd64
pkg: github.com/leasehq/lease/memstore
cpu: AMD EPYC
BenchmarkCompareMemstore/c=1/memstore-2         	 2377323	       237.4 ns/op	   4212675 ops/s	       0 B/op	       0 allocs/op
BenchmarkCompareMemstore/c=1/memstore-2         	 2377323	       200.0 ns/op	   5000000 ops/s	       0 B/op	       0 allocs/op
BenchmarkCompareMemstore/c=1/memstore-2         	 2377323	       250.0 ns/op	   4000000 ops/s	       0 B/op	       1 allocs/op
BenchmarkCompareMemstore/c=2/bolt-32-2          	     100	     10000 ns/op	       48 B/op	       2 allocs/op
    bench_test.go:42: engine: redis 7.0.15
BenchmarkCompareRedis/c=32/redislock-2          	   12000	      8000 ns/op	    65900 ops/s	  410.5 p50-µs	 1200 p99-µs	     800 B/op	      12 allocs/op
BenchmarkOther-2                                	 1000000	      1000 ns/op
PASS
ok  	github.com/leasehq/lease/memstore	10.068s
`

func TestParse(t *testing.T) {
	out, err := Parse(strings.NewReader(cannedOutput), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Samples) != 5 {
		t.Fatalf("got %d samples, want 5: %+v", len(out.Samples), out.Samples)
	}
	if got, want := strings.Join(out.Engines, ";"), "redis 7.0.15"; got != want {
		t.Errorf("engines = %q, want %q", got, want)
	}
	res := Aggregate(out.Samples)
	if len(res) != 3 {
		t.Fatalf("got %d results, want 3: %+v", len(res), res)
	}
	for i, want := range []struct {
		group, impl string
		clients     int
		runs        int
		nsPerOp     float64
	}{
		{"Memstore", "memstore", 1, 3, 200},  // the fastest of three
		{"Memstore", "bolt-32", 2, 1, 10000}, // only the -procs suffix is stripped
		{"Redis", "redislock", 32, 1, 8000},
	} {
		r := res[i]
		if r.Group != want.group || r.Impl != want.impl || r.Clients != want.clients || r.Runs != want.runs {
			t.Errorf("result %d = %s/c=%d/%s ×%d, want %s/c=%d/%s ×%d",
				i, r.Group, r.Clients, r.Impl, r.Runs, want.group, want.clients, want.impl, want.runs)
		}
		if r.Metrics["ns/op"] != want.nsPerOp {
			t.Errorf("result %d ns/op = %v, want %v", i, r.Metrics["ns/op"], want.nsPerOp)
		}
	}
	// The fastest run's metrics are kept together.
	if got := res[0].Metrics["ops/s"]; got != 5000000 {
		t.Errorf("fastest run's ops/s = %v, want 5000000", got)
	}
	if res[0].Slowest != 250 {
		t.Errorf("slowest ns/op = %v, want 250", res[0].Slowest)
	}
	redis := res[2]
	for unit, want := range map[string]float64{"ops/s": 65900, "p50-µs": 410.5, "p99-µs": 1200, "B/op": 800, "allocs/op": 12} {
		if got := redis.Metrics[unit]; got != want {
			t.Errorf("redislock %s = %v, want %v", unit, got, want)
		}
	}
	// bolt-32 reported no ops/s: it is derived from ns/op.
	if v, ok := res[1].Value("ops/s"); !ok || v != 1e5 {
		t.Errorf("derived ops/s = %v, %v; want 100000, true", v, ok)
	}
	if _, ok := res[1].Value("p50-µs"); ok {
		t.Error("p50-µs reported for a benchmark that did not measure it")
	}
}

func TestParseSingleProc(t *testing.T) {
	// With GOMAXPROCS 1 go test adds no suffix, so a trailing -1 is the impl's.
	out, err := Parse(strings.NewReader("BenchmarkCompareX/c=1/pool-1 \t 10 \t 5 ns/op\n"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Samples) != 1 || out.Samples[0].impl != "pool-1" {
		t.Errorf("samples = %+v, want impl pool-1", out.Samples)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, line := range []string{
		"BenchmarkCompareX/c=1/a-2 \t 10 \t 5",                  // a value without a unit
		"BenchmarkCompareX/c=1/a-2 \t ten \t 5 ns/op",           // bad iterations
		"BenchmarkCompareX/c=1/a-2 \t 10 \t five ns/op",         // bad value
		"BenchmarkCompareX/c=0/a-2 \t 10 \t 5 ns/op",            // no clients
		"BenchmarkCompareX/a-2 \t 10 \t 5 ns/op",                // no c=
		"BenchmarkCompareX/c=1/a-2 \t 10 \t 5 allocs/op \t 1 x", // no ns/op
		// Interleaved lines: no impl metrics, an impl without ns/op, a
		// metric without impl or unit.
		"BenchmarkCompareX/c=1/interleaved-2 \t 1 \t 5 ns/op \t 3 allocs/op",
		"BenchmarkCompareX/c=1/interleaved-2 \t 1 \t 5 ns/op \t 2 a:ns/op \t 4 b:p50-µs",
		"BenchmarkCompareX/c=1/interleaved-2 \t 1 \t 5 ns/op \t 2 :ns/op",
		"BenchmarkCompareX/c=1/interleaved-2 \t 1 \t 5 ns/op \t 2 a:ns/op \t 3 a:",
		"BenchmarkCompareX/c=1/interleaved-2 \t 1 \t 5 ns/op \t 2 a:ns/op \t 3 a:p50-µs", // no a:row
	} {
		if _, err := Parse(strings.NewReader(line+"\n"), 2); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", line)
		}
	}
}

// An interleaved line makes one row per implementation, in the line's order,
// and every implementation's row comes from the same round: the one whose
// line was fastest, even where another round was luckier for one of them.
func TestParseInterleaved(t *testing.T) {
	// As go test prints them: units sorted, so the rows' order is in row.
	const lines = `BenchmarkCompareEtcd/c=1/interleaved-2 	 1	 4000 ns/op	 1000 etcdstore:ns/op	 950 etcdstore:p50-µs	 2400 etcdstore:p99-µs	 2 etcdstore:row	 1100 mutex:ns/op	 1000 mutex:p50-µs	 2500 mutex:p99-µs	 1 mutex:row	 900 put-pair:ns/op	 850 put-pair:p50-µs	 2000 put-pair:p99-µs	 0 put-pair:row	 800 allocs/op	 60000 B/op
BenchmarkCompareEtcd/c=1/interleaved-2 	 1	 3900 ns/op	 1200 etcdstore:ns/op	 1100 etcdstore:p50-µs	 2600 etcdstore:p99-µs	 2 etcdstore:row	 900 mutex:ns/op	 870 mutex:p50-µs	 2100 mutex:p99-µs	 1 mutex:row	 880 put-pair:ns/op	 840 put-pair:p50-µs	 1900 put-pair:p99-µs	 0 put-pair:row	 800 allocs/op	 60000 B/op
BenchmarkCompareEtcd/c=32/etcdstore-2 	 100	 100 ns/op
`
	out, err := Parse(strings.NewReader(lines), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Samples) != 7 {
		t.Fatalf("got %d samples, want 7 (3 impls × 2 rounds + 1)", len(out.Samples))
	}
	res := Aggregate(out.Samples)
	var impls []string
	for _, r := range res {
		impls = append(impls, fmt.Sprintf("%d/%s", r.Clients, r.Impl))
	}
	if got, want := strings.Join(impls, " "), "1/put-pair 1/mutex 1/etcdstore 32/etcdstore"; got != want {
		t.Fatalf("rows %q, want %q", got, want)
	}
	for i, want := range []map[string]float64{
		{"ns/op": 880, "p50-µs": 840, "p99-µs": 1900},
		{"ns/op": 900, "p50-µs": 870, "p99-µs": 2100},
		{"ns/op": 1200, "p50-µs": 1100, "p99-µs": 2600}, // not its own faster round's 1000
	} {
		r := res[i]
		if r.Runs != 2 || r.Slowest != map[int]float64{0: 900, 1: 1100, 2: 1000}[i] {
			t.Errorf("%s: runs %d, slowest %v", r.Impl, r.Runs, r.Slowest)
		}
		if len(r.Metrics) != len(want) {
			t.Errorf("%s: metrics %v, want exactly %v (the line's allocs cover every impl)", r.Impl, r.Metrics, want)
		}
		for unit, v := range want {
			if r.Metrics[unit] != v {
				t.Errorf("%s %s = %v, want %v", r.Impl, unit, r.Metrics[unit], v)
			}
		}
	}
	if v, ok := res[2].Value("ops/s"); !ok || int(v) != 833333 {
		t.Errorf("etcdstore's ops/s = %v, %v; want it derived from its own ns/op", v, ok)
	}
}
