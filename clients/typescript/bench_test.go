package typescript_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/cli"
	"github.com/leasehq/lease/internal/memtest"
	"github.com/leasehq/lease/internal/redistest"
	"github.com/leasehq/lease/leasehttp"
)

// worker is bench/worker.js, running: it does what a job asks and answers
// the elapsed time.
type worker struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

type job struct {
	Impl    string `json:"impl"`
	Server  string `json:"server,omitempty"`
	Redis   string `json:"redis,omitempty"`
	Clients int    `json:"clients"`
	N       int    `json:"n"`
}

func (w *worker) run(j job) (time.Duration, error) {
	line, _ := json.Marshal(j)
	if _, err := w.in.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	if !w.out.Scan() {
		return 0, fmt.Errorf("bench/worker.js ended: %v", w.out.Err())
	}
	var ans struct {
		NS    int64  `json:"ns"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(w.out.Bytes(), &ans); err != nil {
		return 0, fmt.Errorf("bench/worker.js answered %q: %v", w.out.Text(), err)
	}
	if ans.Error != "" {
		return 0, fmt.Errorf("bench/worker.js: %s", ans.Error)
	}
	return time.Duration(ans.NS), nil
}

// row is one implementation measured: a job without its size.
type row struct {
	name string
	job  job
}

// setup starts the servers the rows use and the Node.js worker, all stopped
// when tb ends, and returns the rows in report order, the baseline first.
func setup(tb testing.TB) (*worker, []row) {
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
	serve := func(dataDir, backend string) string {
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
	bolt := serve(filepath.Join(tb.TempDir(), "data"), "")
	overRedis := serve("", "redis://"+rds.Addr)

	// LEASE_BENCH_NODE_FLAGS passes flags to the worker's node, such as
	// "--cpu-prof --cpu-prof-dir=/tmp/prof" to see where its time goes.
	args := append(strings.Fields(os.Getenv("LEASE_BENCH_NODE_FLAGS")), filepath.Join(b.js, "bench", "worker.js"))
	cmd := exec.Command(b.node, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		in.Close() // the worker ends at the end of its input
		if err := cmd.Wait(); err != nil {
			tb.Errorf("bench/worker.js: %v: %s", err, stderr.String())
		}
	})
	if v, err := exec.Command(b.node, "--version").Output(); err == nil {
		tb.Logf("engine: node %s", strings.TrimSpace(string(v)))
	}
	return &worker{in: in, out: bufio.NewScanner(out)}, []row{
		{"http-pair-mem", job{Impl: "http-pair", Server: mem.URL}},
		{"fetch-pair-mem", job{Impl: "fetch-pair", Server: mem.URL}},
		{"ts-mem", job{Impl: "ts", Server: mem.URL}},
		{"ts-fetch-mem", job{Impl: "ts-fetch", Server: mem.URL}},
		{"http-pair-bolt", job{Impl: "http-pair", Server: bolt}},
		{"fetch-pair-bolt", job{Impl: "fetch-pair", Server: bolt}},
		{"ts-bolt", job{Impl: "ts", Server: bolt}},
		{"ts-redis", job{Impl: "ts", Server: overRedis}},
		{"redlock", job{Impl: "redlock", Redis: rds.Addr}},
	}
}

// BenchmarkCompareTypeScript: one op = one acquire+release pair from
// Node.js, on a key of the caller's own, at 1 and 32 concurrent callers in
// one Node process. See groupNotes in internal/benchreport.
func BenchmarkCompareTypeScript(b *testing.B) {
	w, rows := setup(b)
	for _, c := range []int{1, 32} {
		for _, r := range rows {
			b.Run(fmt.Sprintf("c=%d/%s", c, r.name), func(b *testing.B) {
				j := r.job
				j.Clients, j.N = c, b.N
				d, err := w.run(j)
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
		if _, err := w.run(j); err != nil {
			t.Errorf("%s: %v", r.name, err)
		}
	}
}
