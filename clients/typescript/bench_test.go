package typescript_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/clientharness"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// row is one implementation measured: a job without its size.
type row struct {
	name string
	job  benchutil.Job
}

// setup starts the servers the rows use and the Node.js worker, all stopped
// when tb ends, and returns the rows in report order, the baseline first.
func setup(tb testing.TB) (*benchutil.Worker, []row) {
	b := build.Get(tb)

	// The leasehttp server over memstore, as lease serve serves a backend;
	// lease serve itself, in process: the embedded store (fsync on), and
	// Redis with appendfsync always, the Redis redlock runs on too.
	mem := clientharness.MemServer(tb)
	rds := redistest.Start(tb)
	bolt := clientharness.Serve(tb, filepath.Join(tb.TempDir(), "data"), "")
	overRedis := clientharness.Serve(tb, "", "redis://"+rds.Addr)

	// LEASE_BENCH_NODE_FLAGS passes flags to the worker's node, such as
	// "--cpu-prof --cpu-prof-dir=/tmp/prof" to see where its time goes.
	args := append(strings.Fields(os.Getenv("LEASE_BENCH_NODE_FLAGS")), filepath.Join(b.js, "bench", "worker.js"))
	cmd := exec.Command(b.node, args...)
	w := benchutil.StartWorker(tb, "bench/worker.js", cmd)
	if v, err := exec.Command(b.node, "--version").Output(); err == nil {
		tb.Logf("engine: node %s", strings.TrimSpace(string(v)))
	}
	return w, []row{
		{"http-pair-mem", benchutil.Job{Impl: "http-pair", Server: mem}},
		{"fetch-pair-mem", benchutil.Job{Impl: "fetch-pair", Server: mem}},
		{"ts-mem", benchutil.Job{Impl: "ts", Server: mem}},
		{"ts-fetch-mem", benchutil.Job{Impl: "ts-fetch", Server: mem}},
		{"http-pair-bolt", benchutil.Job{Impl: "http-pair", Server: bolt}},
		{"fetch-pair-bolt", benchutil.Job{Impl: "fetch-pair", Server: bolt}},
		{"ts-bolt", benchutil.Job{Impl: "ts", Server: bolt}},
		{"ts-redis", benchutil.Job{Impl: "ts", Server: overRedis}},
		{"redlock", benchutil.Job{Impl: "redlock", Redis: rds.Addr}},
	}
}

// warmupPairs is how many pairs each row runs untimed in the worker before
// its first timed round (benchutil.Worker.Bench). In a fresh worker, Node's
// CPU per pair settled after 2,000 to 2,500 pairs of a row, at 1 and at 32
// callers, raw node:http and the client alike (V8 tiers a function up by how
// often it ran, not by time: a time budget would leave slow rows colder);
// from 3,000 on it moved within the machine's noise. The TypeScript group's
// notes in tools/benchreport (targets_typescript.go) say this number.
const warmupPairs = 3000

// BenchmarkCompareTypeScript: one op = one acquire+release pair from
// Node.js, on a key of the caller's own, at 1 and 32 concurrent callers in
// one Node process; every row is warmed up alike first (warmupPairs). See
// groupNotes in tools/benchreport.
func BenchmarkCompareTypeScript(b *testing.B) {
	w, rows := setup(b)
	for _, c := range []int{1, 32} {
		for _, r := range rows {
			j := r.job
			j.Clients = c
			b.Run(fmt.Sprintf("c=%d/%s", c, r.name), w.Bench(j, warmupPairs))
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
