package main

import (
	"math"
	"testing"
)

func result(group string, clients int, impl string, metrics map[string]float64) Result {
	return Result{Group: group, Clients: clients, Impl: impl, Runs: 1, Metrics: metrics}
}

func TestEvaluate(t *testing.T) {
	results := []Result{
		result("G", 1, "seed", map[string]float64{"ns/op": 50}),
		result("G", 1, "fast", map[string]float64{"ns/op": 40, "allocs/op": 0}),
		result("G", 1, "slow", map[string]float64{"ns/op": 60, "allocs/op": 2}),
		result("G", 4, "seed", map[string]float64{"ns/op": 50}),                      // 20M ops/s derived
		result("G", 4, "fast", map[string]float64{"ns/op": 25, "ops/s": 40_000_000}), // 2× seed
	}
	for _, tc := range []struct {
		name     string
		target   Target
		measured float64
		status   string
	}{
		{"ns ratio met", Target{Group: "G", Clients: 1, Impl: "fast", Versus: "seed", Cmp: "<=", Ratio: 1, Metric: "ns/op"}, 0.8, "met"},
		{"ns ratio not met", Target{Group: "G", Clients: 1, Impl: "slow", Versus: "seed", Cmp: "<=", Ratio: 1, Metric: "ns/op"}, 1.2, "NOT met"},
		{"equal is met", Target{Group: "G", Clients: 1, Impl: "seed", Versus: "seed", Cmp: "<=", Ratio: 1, Metric: "ns/op"}, 1, "met"},
		{"throughput at MaxProcs", Target{Group: "G", Clients: MaxProcs, Impl: "fast", Versus: "seed", Cmp: ">=", Ratio: 1.8, Metric: "ops/s"}, 2, "met"},
		{"throughput not met", Target{Group: "G", Clients: 4, Impl: "fast", Versus: "seed", Cmp: ">=", Ratio: 2.5, Metric: "ops/s"}, 2, "NOT met"},
		{"absolute met", Target{Group: "G", Clients: 1, Impl: "fast", Cmp: "<=", Ratio: 0, Metric: "allocs/op"}, 0, "met"},
		{"absolute not met", Target{Group: "G", Clients: 1, Impl: "slow", Cmp: "<=", Ratio: 0, Metric: "allocs/op"}, 2, "NOT met"},
		{"missing impl", Target{Group: "G", Clients: 1, Impl: "gone", Versus: "seed", Cmp: "<=", Ratio: 1, Metric: "ns/op"}, 0, "not measured: no G/c=1/gone in this run"},
		{"missing versus", Target{Group: "G", Clients: 1, Impl: "fast", Versus: "gone", Cmp: "<=", Ratio: 1, Metric: "ns/op"}, 0, "not measured: no G/c=1/gone in this run"},
		{"missing metric", Target{Group: "G", Clients: 1, Impl: "seed", Cmp: "<=", Ratio: 0, Metric: "allocs/op"}, 0, "not measured: seed has no allocs/op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Evaluate([]Target{tc.target}, results, 4)[0]
			if got.Status != tc.status || math.Abs(got.Measured-tc.measured) > 1e-9 {
				t.Errorf("got %v, %q; want %v, %q", got.Measured, got.Status, tc.measured, tc.status)
			}
			if got.Met() != (tc.status == "met") {
				t.Errorf("Met() = %v with status %q", got.Met(), got.Status)
			}
		})
	}
}

func TestEvaluateResolvesMaxProcs(t *testing.T) {
	results := []Result{result("G", 2, "a", map[string]float64{"ns/op": 1})}
	got := Evaluate([]Target{{Group: "G", Clients: MaxProcs, Impl: "a", Cmp: "<=", Ratio: 1, Metric: "ns/op"}}, results, 2)[0]
	if got.Clients != 2 || !got.Met() {
		t.Errorf("got c=%d %q, want c=2 met", got.Clients, got.Status)
	}
}

func TestTargetsAreWellFormed(t *testing.T) {
	for _, tg := range Targets {
		if tg.Group == "" || tg.Impl == "" || tg.Metric == "" || (tg.Cmp != "<=" && tg.Cmp != ">=") || tg.Note == "" {
			t.Errorf("malformed target %+v", tg)
		}
	}
}
