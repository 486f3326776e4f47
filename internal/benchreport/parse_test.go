package main

import (
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
	} {
		if _, err := Parse(strings.NewReader(line+"\n"), 2); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", line)
		}
	}
}
