package benchutil

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// From one client, Interleave runs every impl once per round, at least
// MinRounds rounds, starting each round from the next impl, and reports
// each impl's metrics under its own name.
func TestInterleaveOneClient(t *testing.T) {
	var calls []string
	op := func(name string) func(int) error {
		return func(w int) error {
			if w != 0 {
				t.Errorf("worker %d from one client", w)
			}
			calls = append(calls, name)
			return nil
		}
	}
	impls := []Impl{{"a", op("a")}, {"b", op("b")}, {"c", op("c")}}
	var rounds int
	res := testing.Benchmark(func(b *testing.B) {
		calls = calls[:0]
		rounds = max(b.N, MinRounds)
		Interleave(b, 1, impls)
	})
	if len(calls) != 3*rounds || rounds < MinRounds {
		t.Fatalf("%d calls for %d rounds, want 3 per round and at least %d rounds", len(calls), rounds, MinRounds)
	}
	for r := range rounds {
		got := calls[3*r : 3*r+3]
		want := []string{"a", "b", "c"}
		for range r % 3 {
			want = append(want[1:], want[0])
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d called %v, want %v", r, got, want)
		}
	}
	checkMetrics(t, res, "a", "b", "c")
}

// From several clients, a round is a slice of SliceOps×clients operations
// of each impl in turn, from exactly that many goroutines, and slices of
// two impls never overlap.
func TestInterleaveClients(t *testing.T) {
	const clients = 4
	var (
		mu             sync.Mutex
		running        = map[string]int{}
		total          = map[string]int{}
		workers        = map[int]bool{}
		inFlight, most atomic.Int64
	)
	op := func(name string) func(int) error {
		return func(w int) error {
			mu.Lock()
			running[name]++
			total[name]++
			workers[w] = true
			for other, n := range running {
				if other != name && n > 0 {
					t.Errorf("%s runs while %s does", name, other)
				}
			}
			mu.Unlock()
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			for range 1000 { // let the others in
				if inFlight.Load() == clients {
					break
				}
			}
			inFlight.Add(-1)
			mu.Lock()
			running[name]--
			mu.Unlock()
			return nil
		}
	}
	var rounds int
	res := testing.Benchmark(func(b *testing.B) {
		clear(total)
		rounds = max(b.N, MinSliceRounds)
		Interleave(b, clients, []Impl{{"x", op("x")}, {"y", op("y")}})
	})
	for _, name := range []string{"x", "y"} {
		if want := rounds * SliceOps * clients; total[name] != want {
			t.Errorf("%s ran %d times, want %d", name, total[name], want)
		}
	}
	if len(workers) != clients || most.Load() > clients {
		t.Errorf("workers %v, at most %d in flight; want %d of them", workers, most.Load(), clients)
	}
	checkMetrics(t, res, "x", "y")
}

func TestInterleaveStopsAtAnError(t *testing.T) {
	var after atomic.Int64
	failing := errors.New("boom")
	res := testing.Benchmark(func(b *testing.B) {
		Interleave(b, 8, []Impl{{"bad", func(int) error {
			if after.Add(1) > 1 {
				return nil
			}
			return failing
		}}})
	})
	if res.N != 0 || after.Load() > 2*8*SliceOps {
		t.Errorf("a failing impl: result %+v after %d calls, want a failed benchmark stopped early", res, after.Load())
	}
}

func checkMetrics(t *testing.T, res testing.BenchmarkResult, names ...string) {
	t.Helper()
	for i, name := range names {
		for _, unit := range []string{":ns/op", ":ops/s", ":p50-µs", ":p99-µs"} {
			if v, ok := res.Extra[name+unit]; !ok || v <= 0 {
				t.Errorf("%s%s = %v, %v; want a positive value", name, unit, v, ok)
			}
		}
		if res.Extra[name+":row"] != float64(i) {
			t.Errorf("%s:row = %v, want %d", name, res.Extra[name+":row"], i)
		}
	}
}

// ReportRows reports each row's mean, p50, p99 and extra metrics under its
// own name, in the order given, as Interleave does.
func TestReportRows(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	res := testing.Benchmark(func(b *testing.B) {
		ReportRows(b, time.Second, []Row{
			{Name: "floor", Latencies: ms(3, 1, 2)},
			{Name: "impl", Latencies: ms(4, 8, 6, 2), Extra: map[string]float64{"over-ttl-rtt": 7}},
		})
	})
	for unit, want := range map[string]float64{
		"floor:ns/op": 2e6, "floor:p50-µs": 2000, "floor:p99-µs": 3000, "floor:ops/s": 500, "floor:row": 0,
		"impl:ns/op": 5e6, "impl:p50-µs": 6000, "impl:p99-µs": 8000, "impl:over-ttl-rtt": 7, "impl:row": 1,
	} {
		if got := res.Extra[unit]; got != want {
			t.Errorf("%s = %v, want %v", unit, got, want)
		}
	}
	if got := res.NsPerOp(); got != 1e9 {
		t.Errorf("ns/op = %v, want a second (one round)", got)
	}
	if got := Percentile(ms(5, 1, 9, 3), 50); got != 5*time.Millisecond {
		t.Errorf("Percentile(50) = %v, want 5ms", got)
	}
}
