package main

import (
	"fmt"
	"runtime"
)

// MaxProcs as a Target's Clients means GOMAXPROCS of the run.
const MaxProcs = 0

// Target is a goal the report checks: Impl's Metric compared with Versus's
// in the same group and client count. With Versus empty, Ratio bounds Impl's
// Metric itself (e.g. allocs/op <= 0).
type Target struct {
	Group   string
	Clients int // MaxProcs: GOMAXPROCS
	Impl    string
	Versus  string
	Cmp     string // "<=" or ">="
	Ratio   float64
	Metric  string
	Note    string // where the target comes from, what it means
}

// Targets are the issues' goals. Add a backend's targets here.
var Targets = []Target{
	{Group: "Memstore", Clients: 1, Impl: "memstore", Versus: "seed-node", Cmp: "<=", Ratio: 1.0, Metric: "ns/op",
		Note: "issue 2: a pair no slower than the seed's; memstore reads the monotonic clock twice per pair, the seed reads none"},
	{Group: "Memstore", Clients: 1, Impl: "memstore-callerclock", Versus: "seed-node", Cmp: "<=", Ratio: 1.0, Metric: "ns/op",
		Note: "the same target under the seed's conditions: the caller passes the time in"},
	{Group: "Memstore", Clients: 1, Impl: "memstore", Cmp: "<=", Ratio: 0, Metric: "allocs/op",
		Note: "issue 2: no allocation on the hot path"},
	{Group: "Memstore", Clients: MaxProcs, Impl: "memstore", Versus: "seed-node", Cmp: ">=", Ratio: 1.8, Metric: "ops/s",
		Note: "issue 2: distinct keys at GOMAXPROCS goroutines, real clock; the seed runs on Node's one thread"},
	{Group: "Memstore", Clients: MaxProcs, Impl: "memstore-callerclock", Versus: "seed-node", Cmp: ">=", Ratio: 1.8, Metric: "ops/s",
		Note: "the same target under the seed's conditions"},
}

// Outcome is a Target evaluated on a run's results.
type Outcome struct {
	Target
	Clients  int     // resolved client count
	Measured float64 // Impl's metric ÷ Versus's, or Impl's metric when Versus is empty
	Status   string  // "met", "NOT met", or why it could not be judged
}

// Met reports whether the target was measured and met.
func (o Outcome) Met() bool { return o.Status == "met" }

// Evaluate judges each target on results; procs resolves MaxProcs.
func Evaluate(targets []Target, results []Result, procs int) []Outcome {
	out := make([]Outcome, 0, len(targets))
	for _, t := range targets {
		o := Outcome{Target: t, Clients: t.Clients}
		if o.Clients == MaxProcs {
			o.Clients = procs
		}
		o.Measured, o.Status = evaluate(t, o.Clients, results)
		out = append(out, o)
	}
	return out
}

func evaluate(t Target, clients int, results []Result) (float64, string) {
	v, err := lookup(results, t.Group, clients, t.Impl, t.Metric)
	if err != nil {
		return 0, err.Error()
	}
	measured := v
	if t.Versus != "" {
		base, err := lookup(results, t.Group, clients, t.Versus, t.Metric)
		if err != nil {
			return 0, err.Error()
		}
		if base == 0 {
			return 0, fmt.Sprintf("%s's %s is zero", t.Versus, t.Metric)
		}
		measured = v / base
	}
	var ok bool
	switch t.Cmp {
	case "<=":
		ok = measured <= t.Ratio
	case ">=":
		ok = measured >= t.Ratio
	default:
		return measured, fmt.Sprintf("bad comparison %q", t.Cmp)
	}
	if ok {
		return measured, "met"
	}
	return measured, "NOT met"
}

func lookup(results []Result, group string, clients int, impl, metric string) (float64, error) {
	for _, r := range results {
		if r.Group == group && r.Clients == clients && r.Impl == impl {
			if v, ok := r.Value(metric); ok {
				return v, nil
			}
			return 0, fmt.Errorf("not measured: %s has no %s", impl, metric)
		}
	}
	return 0, fmt.Errorf("not measured: no %s/c=%d/%s in this run", group, clients, impl)
}

// defaultProcs is the GOMAXPROCS the benchmarks run with: the report's own,
// since `go test` inherits its environment.
func defaultProcs() int { return runtime.GOMAXPROCS(0) }

// groupNotes say what each group measures; they are printed above its table.
var groupNotes = map[string]string{
	"Memstore": "One op = one acquire+release pair; every client cycles through its own 1024 keys, so clients never contend. " +
		"seed-node: the seed's LeaseStore under Node.js, `now` passed in; Node runs one thread, so its c=N is N callers interleaved on it. " +
		"memstore: the real clock, read on each call. memstore-callerclock: a clock returning a time the caller set (the seed's conditions). " +
		"map-mutex: the seed's logic in plain Go (one map, one mutex, time.Now, crypto/rand ID).",
	"MemstoreOneKey": "One op = one successful acquire+release pair on a single key all clients race for with try-acquire; " +
		"a try that finds the key held is retried at once and counted in held/op. This is the rate at which one key changes hands.",
}
