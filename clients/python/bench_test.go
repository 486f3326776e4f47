package python_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/cli"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasehttp"
)

// row is one implementation measured: a job without its size.
type row struct {
	name string
	job  benchutil.Job
}

// setup starts the servers the rows use and the Python worker, all stopped
// when tb ends, and returns the rows in report order, each floor before
// what it bounds.
func setup(tb testing.TB) (*benchutil.Worker, []row) {
	b := build(tb)

	// The leasehttp server over memstore, where the client's own cost shows
	// (lease serve has no memory store: it would lose tokens).
	api, err := leasehttp.NewServer(memtest.New(tb), leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatal(err)
	}
	mem := httptest.NewServer(api)
	tb.Cleanup(func() {
		api.Close()
		mem.Close()
	})
	// lease serve itself, in process, on its embedded store (fsync on); and
	// a durable Redis (appendonly yes, appendfsync always) for redis-py.
	bolt := serve(tb, filepath.Join(tb.TempDir(), "data"), "")
	rds := redistest.Start(tb)

	cmd := exec.Command(b.python, filepath.Join("bench", "worker.py"))
	w := benchutil.StartWorker(tb, "bench/worker.py", cmd)
	if v, err := exec.Command(b.python, "--version").Output(); err == nil {
		tb.Logf("engine: %s", strings.TrimSpace(string(v)))
	}
	return w, []row{
		{"http-pair-mem", benchutil.Job{Impl: "http-pair", Server: mem.URL}},
		{"py-mem", benchutil.Job{Impl: "py", Server: mem.URL}},
		{"http-pair-bolt", benchutil.Job{Impl: "http-pair", Server: bolt}},
		{"py-bolt", benchutil.Job{Impl: "py", Server: bolt}},
		{"redis-py-lock", benchutil.Job{Impl: "redis-lock", Redis: rds.Addr}},
	}
}

// BenchmarkComparePython: one op = one acquire+release pair from Python, on
// a key of the thread's own, at 1 and 16 threads in one process. Each round
// runs every row for a batch of pairs, in an order that turns each round, so
// that a slow spell of the shared machine falls on every row alike; a row's
// latency samples are its batches' time per pair (at c=1 a batch is one
// pair). A first round warms every row up (connections, threads) and is not
// counted, and there are at least minRounds. See groupNotes in
// tools/benchreport.
func BenchmarkComparePython(b *testing.B) {
	w, rows := setup(b)
	// One thread alternates the rows pair by pair; 16 threads run a batch of
	// each row at a time, so that a row's throughput is its own.
	for _, c := range []int{1, 16} {
		batch, minRounds := 1, 200
		if c > 1 {
			batch, minRounds = 10*c, 10
		}
		b.Run(fmt.Sprintf("c=%d/interleaved", c), func(b *testing.B) {
			for _, r := range rows {
				j := r.job
				j.Clients, j.N = c, batch
				if _, err := w.Run(j); err != nil {
					b.Fatalf("%s: %v", r.name, err)
				}
			}
			lat := make([][]time.Duration, len(rows))
			var total time.Duration
			rounds := max(b.N, minRounds)
			for round := range rounds {
				for k := range rows {
					i := (round + k) % len(rows)
					j := rows[i].job
					j.Clients, j.N = c, batch
					d, err := w.Run(j)
					if err != nil {
						b.Fatalf("%s: %v", rows[i].name, err)
					}
					total += d
					lat[i] = append(lat[i], d/time.Duration(batch))
				}
			}
			out := make([]benchutil.Row, len(rows))
			for i, r := range rows {
				out[i] = benchutil.Row{Name: r.name, Latencies: lat[i]}
			}
			benchutil.ReportRows(b, total/time.Duration(rounds), out)
		})
	}
}

// BenchmarkComparePythonImport: the import time of leasehq_lease (as
// `from leasehq_lease import LeaseClient, FencedResource, …` in a fresh
// interpreter), from -X importtime: one op is one interpreter, at most 20 of
// them whatever b.N asks (each takes a process start); import-ms is the
// best, ns/op the mean.
func BenchmarkComparePythonImport(b *testing.B) {
	w, _ := setup(b)
	b.Run("c=1/leasehq_lease", func(b *testing.B) {
		n := min(b.N, 20)
		var best, total time.Duration
		for i := range n {
			d, err := w.Run(benchutil.Job{Impl: "import", Clients: 1, N: 1})
			if err != nil {
				b.Fatal(err)
			}
			total += d
			if i == 0 || d < best {
				best = d
			}
		}
		b.ReportMetric(float64(total.Nanoseconds())/float64(n), "ns/op")
		b.ReportMetric(float64(best.Microseconds())/1000, "import-ms")
	})
}

// TestBenchRowsWork runs every row of the benchmark a few times from a few
// threads, so that a broken benchmark fails make test, not make bench.
func TestBenchRowsWork(t *testing.T) {
	w, rows := setup(t)
	for _, r := range append(rows, row{"import", benchutil.Job{Impl: "import"}}) {
		j := r.job
		j.Clients, j.N = 3, 9
		if j.Impl == "import" {
			j.Clients, j.N = 1, 1
		}
		if _, err := w.Run(j); err != nil {
			t.Errorf("%s: %v", r.name, err)
		}
	}
}

// serve starts lease serve in process with its defaults, on dataDir's
// embedded store or, where backend is not empty, on that engine's URL,
// closed when tb ends, and returns its URL.
func serve(tb testing.TB, dataDir, backend string) string {
	cfg := cli.DefaultServeConfig(dataDir, slog.New(slog.DiscardHandler))
	cfg.Backend = backend
	s, err := cli.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Run(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return "http://" + s.Addr()
}
