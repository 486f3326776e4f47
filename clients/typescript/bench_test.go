package typescript_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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

// setup starts the servers the rows use and the Node.js worker, all stopped
// when tb ends, and returns the rows in report order, the baseline first.
func setup(tb testing.TB) (*benchutil.Worker, []row) {
	b := build(tb)

	// The leasehttp server over memstore, as lease serve serves a backend
	// (lease serve itself has no memory store: it would lose tokens).
	api, err := leasehttp.NewServer(memtest.New(tb), leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatal(err)
	}
	mem := httptest.NewServer(api)
	tb.Cleanup(func() {
		api.Close()
		mem.Close()
	})

	// lease serve itself, in process: the embedded store (fsync on), and
	// Redis with appendfsync always, the Redis redlock runs on too.
	rds := redistest.Start(tb)
	bolt := serve(tb, filepath.Join(tb.TempDir(), "data"), "")
	overRedis := serve(tb, "", "redis://"+rds.Addr)

	// LEASE_BENCH_NODE_FLAGS passes flags to the worker's node, such as
	// "--cpu-prof --cpu-prof-dir=/tmp/prof" to see where its time goes.
	args := append(strings.Fields(os.Getenv("LEASE_BENCH_NODE_FLAGS")), filepath.Join(b.js, "bench", "worker.js"))
	cmd := exec.Command(b.node, args...)
	w := benchutil.StartWorker(tb, "bench/worker.js", cmd)
	if v, err := exec.Command(b.node, "--version").Output(); err == nil {
		tb.Logf("engine: node %s", strings.TrimSpace(string(v)))
	}
	return w, []row{
		{"http-pair-mem", benchutil.Job{Impl: "http-pair", Server: mem.URL}},
		{"fetch-pair-mem", benchutil.Job{Impl: "fetch-pair", Server: mem.URL}},
		{"ts-mem", benchutil.Job{Impl: "ts", Server: mem.URL}},
		{"ts-fetch-mem", benchutil.Job{Impl: "ts-fetch", Server: mem.URL}},
		{"http-pair-bolt", benchutil.Job{Impl: "http-pair", Server: bolt}},
		{"fetch-pair-bolt", benchutil.Job{Impl: "fetch-pair", Server: bolt}},
		{"ts-bolt", benchutil.Job{Impl: "ts", Server: bolt}},
		{"ts-redis", benchutil.Job{Impl: "ts", Server: overRedis}},
		{"redlock", benchutil.Job{Impl: "redlock", Redis: rds.Addr}},
	}
}

// BenchmarkCompareTypeScript: one op = one acquire+release pair from
// Node.js, on a key of the caller's own, at 1 and 32 concurrent callers in
// one Node process. See groupNotes in tools/benchreport.
func BenchmarkCompareTypeScript(b *testing.B) {
	w, rows := setup(b)
	for _, c := range []int{1, 32} {
		for _, r := range rows {
			b.Run(fmt.Sprintf("c=%d/%s", c, r.name), func(b *testing.B) {
				j := r.job
				j.Clients, j.N = c, b.N
				d, err := w.Run(j)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
				b.ReportMetric(float64(b.N)/d.Seconds(), "ops/s")
			})
		}
	}
}

// TestBenchRowsWork runs every row of the benchmark a few times from a few
// callers, so that a broken benchmark fails make test, not make bench.
func TestBenchRowsWork(t *testing.T) {
	w, rows := setup(t)
	for _, r := range rows {
		j := r.job
		j.Clients, j.N = 3, 9
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
