package benchutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Job is what a Worker is asked: Impl's operation against Server (a lease
// server's URL) or Redis (an address), N times across Clients concurrent
// callers.
type Job struct {
	Impl    string `json:"impl"`
	Server  string `json:"server,omitempty"`
	Redis   string `json:"redis,omitempty"`
	Clients int    `json:"clients"`
	N       int    `json:"n"`
}

// Worker is a benchmark worker in another language (the TypeScript
// client's bench/worker.js, the Python client's bench/worker.py): a process
// that reads one JSON Job a line and answers each with one line,
// {"ns": elapsed} or {"error": why}.
type Worker struct {
	name string
	in   io.WriteCloser
	out  *bufio.Scanner
}

// StartWorker starts cmd as the Worker name (its script, for messages),
// ended when tb ends: its input is closed, and an exit with an error fails
// tb with what it wrote to stderr.
func StartWorker(tb testing.TB, name string, cmd *exec.Cmd) *Worker {
	tb.Helper()
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
			tb.Errorf("%s: %v: %s", name, err, stderr.String())
		}
	})
	return &Worker{name: name, in: in, out: bufio.NewScanner(out)}
}

// Bench returns the body of a benchmark that asks w to do j's operation
// b.N times (j.N is ignored) and reports the time w answers as ns/op and
// ops/s. Before the first timed round of the body returned, once however
// often Go calls it (its N ramp, -count), it asks w for warmup operations
// of j with the benchmark's timer stopped, so that neither the timing nor
// the ramp sees them. A worker that compiles code as it runs (V8) reaches its
// steady speed only after some thousand operations of a row, and Go reports
// only the last round of its ramp: without the warm-up, how warm a row's
// reported round is depends on how many rounds the ramp took, and on which
// rows ran before it in the same process.
func (w *Worker) Bench(j Job, warmup int) func(*testing.B) {
	return bench(w, j, warmup)
}

// runner is what bench measures: a Worker, or a stand-in in its tests.
type runner interface {
	Run(Job) (time.Duration, error)
}

func bench(r runner, j Job, warmup int) func(*testing.B) {
	warm := warmup == 0
	return func(b *testing.B) {
		if !warm {
			b.StopTimer()
			wj := j
			wj.N = warmup
			if _, err := r.Run(wj); err != nil {
				b.Fatalf("warm-up: %v", err)
			}
			warm = true
			b.StartTimer()
		}
		tj := j
		tj.N = b.N
		d, err := r.Run(tj)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "ns/op")
		b.ReportMetric(float64(b.N)/d.Seconds(), "ops/s")
	}
}

// Run asks the worker to do j and returns the elapsed time it answers.
func (w *Worker) Run(j Job) (time.Duration, error) {
	line, _ := json.Marshal(j)
	if _, err := w.in.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	if !w.out.Scan() {
		return 0, fmt.Errorf("%s ended: %v", w.name, w.out.Err())
	}
	var ans struct {
		NS    int64  `json:"ns"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(w.out.Bytes(), &ans); err != nil {
		return 0, fmt.Errorf("%s answered %q: %v", w.name, w.out.Text(), err)
	}
	if ans.Error != "" {
		return 0, fmt.Errorf("%s: %s", w.name, ans.Error)
	}
	return time.Duration(ans.NS), nil
}
