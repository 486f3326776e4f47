package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Result is one benchmark, BenchmarkCompare<Group>/c=<Clients>/<Impl>, with
// the metrics of its fastest run.
type Result struct {
	Group   string
	Clients int
	Impl    string
	Runs    int
	Metrics map[string]float64 // unit ("ns/op", "ops/s", "allocs/op", …) → value
	Slowest float64            // the ns/op of the slowest run, to show the spread
}

// sample is one benchmark line, or one implementation's part of an
// interleaved line.
type sample struct {
	group   string
	clients int
	impl    string
	metrics map[string]float64
	// rank orders the runs of one benchmark, fastest first: the line's
	// ns/op. The implementations of an interleaved line share it, so that
	// Aggregate takes all of them from the same round, measured side by
	// side, rather than each from its own luckiest round.
	rank float64
}

// interleaved is the impl name of a benchmark that measures several
// implementations in one line (benchutil.Interleave).
const interleaved = "interleaved"

// Output is what Parse reads from benchmark output.
type Output struct {
	Samples []sample
	// Engines are the "engine: NAME VERSION" lines that benchmarks logged
	// with b.Logf, in order of first appearance.
	Engines []string
}

var (
	nameRE   = regexp.MustCompile(`^BenchmarkCompare([A-Za-z0-9_]+)/c=(\d+)/(\S+)$`)
	engineRE = regexp.MustCompile(`^\s+\S+\.go:\d+: engine: (.+?)\s*$`)
)

// Parse reads Go benchmark output (and the seed driver's lines in the same
// format). procs is the GOMAXPROCS of the run: `go test` appends "-<procs>"
// to a benchmark's name when procs > 1, and Parse strips it. Lines that are
// not BenchmarkCompare results are ignored, except engine lines.
func Parse(r io.Reader, procs int) (Output, error) {
	var out Output
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if m := engineRE.FindStringSubmatch(line); m != nil {
			if !slices.Contains(out.Engines, m[1]) {
				out.Engines = append(out.Engines, m[1])
			}
			continue
		}
		if !strings.HasPrefix(line, "BenchmarkCompare") {
			continue
		}
		s, err := parseLine(line, procs)
		if err != nil {
			return Output{}, err
		}
		if s.impl == interleaved {
			parts, err := splitInterleaved(s)
			if err != nil {
				return Output{}, fmt.Errorf("benchreport: %q: %v", line, err)
			}
			out.Samples = append(out.Samples, parts...)
			continue
		}
		out.Samples = append(out.Samples, s)
	}
	return out, sc.Err()
}

// parseLine parses "NAME-P  ITERS  V1 UNIT1  V2 UNIT2 …".
func parseLine(line string, procs int) (sample, error) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return sample{}, fmt.Errorf("benchreport: malformed benchmark line %q", line)
	}
	name := f[0]
	if suffix := "-" + strconv.Itoa(procs); procs > 1 && strings.HasSuffix(name, suffix) {
		name = strings.TrimSuffix(name, suffix)
	}
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return sample{}, fmt.Errorf("benchreport: %q is not BenchmarkCompare<Group>/c=<N>/<impl>", f[0])
	}
	clients, err := strconv.Atoi(m[2])
	if err != nil || clients < 1 {
		return sample{}, fmt.Errorf("benchreport: %q: bad client count", f[0])
	}
	if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
		return sample{}, fmt.Errorf("benchreport: %q: iterations %q: %v", f[0], f[1], err)
	}
	s := sample{group: m[1], clients: clients, impl: m[3], metrics: make(map[string]float64)}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return sample{}, fmt.Errorf("benchreport: %q: value %q: %v", f[0], f[i], err)
		}
		s.metrics[f[i+1]] = v
	}
	ns, ok := s.metrics["ns/op"]
	if !ok {
		return sample{}, fmt.Errorf("benchreport: %q has no ns/op", f[0])
	}
	s.rank = ns
	return s, nil
}

// splitInterleaved makes one sample per implementation of an interleaved
// line out of its "<impl>:<unit>" metrics, in the order of their
// "<impl>:row" (go test prints a line's units sorted; the order decides the
// baseline). Each gets its own ns/op, p50 and p99, and the line's rank; the
// line's allocs/op and B/op cover all the implementations together, so no
// row gets them.
func splitInterleaved(line sample) ([]sample, error) {
	byImpl := make(map[string]*sample)
	rows := make(map[string]float64)
	for unit, v := range line.metrics {
		impl, metric, ok := strings.Cut(unit, ":")
		if !ok {
			continue
		}
		if impl == "" || metric == "" {
			return nil, fmt.Errorf("metric %q is not <impl>:<unit>", unit)
		}
		if metric == "row" {
			rows[impl] = v
			continue
		}
		s := byImpl[impl]
		if s == nil {
			s = &sample{group: line.group, clients: line.clients, impl: impl, metrics: make(map[string]float64), rank: line.rank}
			byImpl[impl] = s
		}
		s.metrics[metric] = v
	}
	if len(byImpl) == 0 {
		return nil, errors.New("an interleaved benchmark reported no <impl>:<unit> metrics")
	}
	out := make([]sample, 0, len(byImpl))
	for impl, s := range byImpl {
		if _, ok := s.metrics["ns/op"]; !ok {
			return nil, fmt.Errorf("impl %q has no ns/op", impl)
		}
		if _, ok := rows[impl]; !ok {
			return nil, fmt.Errorf("impl %q has no row", impl)
		}
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b sample) int { return cmp.Compare(rows[a.impl], rows[b.impl]) })
	return out, nil
}

// Aggregate merges the runs of each benchmark into one Result: its fastest
// run (least ns/op; for an interleaved line's implementations, the line's),
// all of whose metrics are kept so that they agree with each other. On a
// shared machine other work only ever adds time, so the fastest of a few
// rounds is the steadiest estimate of the code's own speed.
// Results are in order of first appearance: that order decides each group's
// baseline.
func Aggregate(samples []sample) []Result {
	type key struct {
		group, impl string
		clients     int
	}
	index := make(map[key]int)
	var out []Result
	var runs [][]sample
	for _, s := range samples {
		k := key{s.group, s.impl, s.clients}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, Result{Group: s.group, Clients: s.clients, Impl: s.impl})
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], s)
	}
	for i, rs := range runs {
		rs = slices.Clone(rs)
		slices.SortStableFunc(rs, func(a, b sample) int { return cmp.Compare(a.rank, b.rank) })
		out[i].Runs = len(rs)
		out[i].Metrics = rs[0].metrics
		out[i].Slowest = rs[len(rs)-1].metrics["ns/op"]
	}
	return out
}

// Value returns r's metric. ops/s, when the benchmark did not report it, is
// derived from ns/op (for b.Loop and RunParallel benchmarks ns/op is wall
// time divided by ops, so the two agree).
func (r Result) Value(metric string) (float64, bool) {
	if v, ok := r.Metrics[metric]; ok {
		return v, true
	}
	if ns, ok := r.Metrics["ns/op"]; metric == "ops/s" && ok && ns > 0 {
		return 1e9 / ns, true
	}
	return 0, false
}
