package main

import (
	"strings"
	"testing"
	"time"
)

func TestReportTables(t *testing.T) {
	out, err := Parse(strings.NewReader(`BenchmarkCompareM/c=1/seed-node-2	100	50 ns/op	20000000 ops/s
BenchmarkCompareM/c=2/seed-node-2	100	50 ns/op	20000000 ops/s
BenchmarkCompareM/c=1/store-2	100	40 ns/op	0 B/op	0 allocs/op
BenchmarkCompareM/c=1/store-2	100	60 ns/op	0 B/op	0 allocs/op
BenchmarkCompareM/c=2/store-2	100	25 ns/op	0 B/op	0 allocs/op
BenchmarkCompareN/c=8/raw-2	100	1000 ns/op	1000000 ops/s	61.5 p50-µs	120 p99-µs
BenchmarkCompareN/c=8/lease-2	100	3000 ns/op	333333 ops/s	190 p50-µs	400 p99-µs
`), 2)
	if err != nil {
		t.Fatal(err)
	}
	res := Aggregate(out.Samples)
	rep := &Report{
		Date:     time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Machine:  []string{"cpu: test"},
		Command:  "cd tools && go run ./benchreport",
		Results:  res,
		Outcomes: Evaluate([]Target{{Group: "M", Clients: MaxProcs, Impl: "store", Versus: "seed-node", Cmp: ">=", Ratio: 1.8, Metric: "ops/s", Note: "n"}}, res, 2),
		Groups:   map[string]string{"M": "about M"},
	}
	var b strings.Builder
	if err := rep.Write(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"- date: 2026-12-02 10:00 UTC\n",
		"## Targets\n\n1 of 1 met.\n\n",
		"| M | 2 | store | ops/s >= 1.8× seed-node | 2.00× | met | n |\n",
		"## M\n\nabout M\n\n",
		"| impl | c=1 ns/op | c=1 ops/s | c=1 allocs/op | c=1 B/op | c=1 × base | c=2 ns/op | c=2 ops/s | c=2 allocs/op | c=2 B/op | c=2 × base |\n",
		"| seed-node | 50 | 20.00M | – | – | base | 50 | 20.00M | – | – | base |\n",
		"| store | 40 (60) | 25.00M | 0 | 0 | 0.80× | 25 | 40.00M | 0 | 0 | 0.50× |\n", // the fastest of two, the slowest in brackets
		"| impl | c=8 ns/op | c=8 ops/s | c=8 p50-µs | c=8 p99-µs | c=8 × base |\n",
		"| lease | 3000 | 333.3k | 190 | 400 | 3.00× |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Index(md, "## M") > strings.Index(md, "## N") {
		t.Error("groups not in order of first appearance")
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 3: "3", 2.5: "2.50", 12.34: "12.3", 237.4: "237", 1e6: "1000000"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestTargetText: a ratio is printed as written, not rounded to one
// decimal (issue 23's 1.15 read as 1.1, a target it was not).
func TestTargetText(t *testing.T) {
	for ratio, want := range map[float64]string{1.15: "ops/s >= 1.15× base", 1.8: "ops/s >= 1.8× base", 2: "ops/s >= 2.0× base"} {
		if got := targetText(Target{Impl: "x", Versus: "base", Cmp: ">=", Ratio: ratio, Metric: "ops/s"}); got != want {
			t.Errorf("ratio %v: %q, want %q", ratio, got, want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"go", "test", "-run", "^$", "-bench", "it's", "./x"})
	if want := `go test -run '^$' -bench 'it'\''s' ./x`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

func TestKeepGroups(t *testing.T) {
	seed := []sample{{group: "Memstore", impl: "seed-node"}, {group: "MemstoreOneKey", impl: "seed-node"}}
	goSamples := []sample{{group: "Memstore", impl: "memstore"}, {group: "Redis", impl: "raw"}}
	got := keepGroups(seed, goSamples)
	if len(got) != 1 || got[0].group != "Memstore" {
		t.Errorf("keepGroups = %+v, want only the Memstore seed sample", got)
	}
	res := Aggregate(append(got, goSamples...))
	if res[0].Impl != "seed-node" {
		t.Errorf("baseline of Memstore = %s, want seed-node", res[0].Impl)
	}
	targets := relevantTargets([]Target{{Group: "Memstore"}, {Group: "Etcd"}}, res)
	if len(targets) != 1 || targets[0].Group != "Memstore" {
		t.Errorf("relevantTargets = %+v, want only Memstore's", targets)
	}
}

func TestBenchLines(t *testing.T) {
	got := benchLines([]byte("goos: linux\nBenchmarkCompareA/c=1/x-2 1 2 ns/op\nPASS\nok x 1s\n"))
	if want := "BenchmarkCompareA/c=1/x-2 1 2 ns/op\n"; got != want {
		t.Errorf("benchLines = %q, want %q", got, want)
	}
}
