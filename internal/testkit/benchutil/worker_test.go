package benchutil

import (
	"testing"
	"time"
)

// fakeWorker stands in for a Worker in bench's tests: it records the jobs
// asked, each with whether the benchmark's timer ran while it worked, and
// answers a microsecond per operation.
type fakeWorker struct {
	b     *testing.B // the benchmark running, set by the test's body
	jobs  []Job
	timed []bool
}

func (f *fakeWorker) Run(j Job) (time.Duration, error) {
	// The timer ran during the job if b.Elapsed moved while it worked: a
	// stopped timer's Elapsed stays put.
	e0 := f.b.Elapsed()
	for t0 := time.Now(); time.Since(t0) < 100*time.Microsecond; {
	}
	f.jobs = append(f.jobs, j)
	f.timed = append(f.timed, f.b.Elapsed() != e0)
	return time.Duration(j.N) * time.Microsecond, nil
}

// bench's body warms each row up once, before the row's first timed round,
// however often Go calls it (its N ramp, -count), with the timer stopped;
// every round after is timed at b.N, and the worker's time is reported.
func TestBenchWarmsUpOncePerRowOutsideTheTimer(t *testing.T) {
	f := &fakeWorker{}
	rows := []Job{
		{Impl: "floor", Server: "http://a", Clients: 32},
		{Impl: "client", Server: "http://a", Clients: 32},
	}
	const warmup = 777
	var bodies []func(*testing.B)
	for _, j := range rows {
		bodies = append(bodies, bench(f, j, warmup))
	}
	// Twice each, as -count 2 calls them, the rows in turn as b.Run does.
	var ns []int64
	for range 2 {
		for _, body := range bodies {
			res := testing.Benchmark(func(b *testing.B) {
				f.b = b
				body(b)
			})
			ns = append(ns, res.NsPerOp())
		}
	}

	warmups := map[string]int{}
	timedBefore := map[string]bool{}
	for i, j := range f.jobs {
		if j.N == warmup {
			warmups[j.Impl]++
			if timedBefore[j.Impl] {
				t.Errorf("job %d: %s warmed up after a timed round", i, j.Impl)
			}
			if f.timed[i] {
				t.Errorf("job %d: %s warmed up with the timer running", i, j.Impl)
			}
			continue
		}
		timedBefore[j.Impl] = true
		if !f.timed[i] {
			t.Errorf("job %d: %s at N=%d ran with the timer stopped", i, j.Impl, j.N)
		}
	}
	for _, j := range rows {
		if warmups[j.Impl] != 1 {
			t.Errorf("%s warmed up %d times, want once", j.Impl, warmups[j.Impl])
		}
		if !timedBefore[j.Impl] {
			t.Errorf("%s never timed", j.Impl)
		}
	}
	for i, j := range f.jobs {
		if j.Impl == "" || j.Server != "http://a" || j.Clients != 32 {
			t.Errorf("job %d is %+v, want the row's job with its N", i, j)
		}
	}
	for i, v := range ns {
		if v != 1000 {
			t.Errorf("benchmark %d reported %d ns/op, want the worker's 1000", i, v)
		}
	}
}

// With no warm-up asked, every job is a timed round.
func TestBenchNoWarmup(t *testing.T) {
	f := &fakeWorker{}
	body := bench(f, Job{Impl: "x", Clients: 1}, 0)
	testing.Benchmark(func(b *testing.B) {
		f.b = b
		body(b)
	})
	for i, timed := range f.timed {
		if !timed {
			t.Errorf("job %d (N=%d) ran with the timer stopped", i, f.jobs[i].N)
		}
	}
	if len(f.jobs) == 0 {
		t.Error("no job ran")
	}
}
