package scalebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// BenchmarkScaleRenewClientAt looks into the ordinary Client's row
// (clientRow): it holds the row's 131,072 holds at each TTL of
// LEASE_SCALE_CLIENT_TTLS (a comma list, "1.2s,870ms"; skipped without
// it), traced when LEASE_SCALE_CLIENT_TRACE is set (renewTrace, which costs
// CPU of its own), and logs the process's CPU per renewal, server and
// Clients together, and the GC's pauses. LEASE_SCALE_BATCH_RATE=R first
// runs the batch row's 64 callers of 256 renewals for 3 s, paced to R
// renewals a second, for its CPU per renewal at that rate;
// LEASE_SCALE_CPUPROFILE=P writes a CPU profile of each (P.batch, P.<ttl>).
// Run with `cd tools && LEASE_SCALE_CLIENT_TTLS=870ms go test -run '^$'
// -bench ScaleRenewClientAt -benchtime 1x -v ./scalebench`.
func BenchmarkScaleRenewClientAt(b *testing.B) {
	ttls := os.Getenv("LEASE_SCALE_CLIENT_TTLS")
	if ttls == "" {
		b.Skip("LEASE_SCALE_CLIENT_TTLS is not set")
	}
	_, hc, url := serveBolt(b)
	row := newClientRow(b, hc, url)
	profile := func(name string) func() {
		prefix := os.Getenv("LEASE_SCALE_CPUPROFILE")
		if prefix == "" {
			return func() {}
		}
		f, err := os.Create(prefix + "." + name)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		return func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}
	}

	if v := os.Getenv("LEASE_SCALE_BATCH_RATE"); v != "" {
		var rate float64
		if _, err := fmt.Sscan(v, &rate); err != nil || rate <= 0 {
			b.Fatalf("LEASE_SCALE_BATCH_RATE=%q: want renewals a second", v)
		}
		stop := profile("batch")
		n, took, cpu := pacedBatches(b, hc, row, rate, 3*time.Second)
		stop()
		b.Logf("batch256 paced at %.0f/s: %.0f renewals/s, %.2f µs CPU a renewal, %.2f cores",
			rate, float64(n)/took.Seconds(), float64(cpu.Nanoseconds())/1e3/float64(n), cpu.Seconds()/took.Seconds())
	}

	for _, s := range strings.Split(ttls, ",") {
		ttl, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		var gc0, gc1 debug.GCStats
		debug.ReadGCStats(&gc0)
		stop := profile(s)
		renewed0, cpu0, t0 := row.pool.renewed.Load(), cpuTime(), time.Now()
		n, took, lost, err := row.hold(ttl)
		cpu, wall := cpuTime()-cpu0, time.Since(t0)
		renewed := row.pool.renewed.Load() - renewed0
		stop()
		if err != nil {
			b.Fatal(err)
		}
		gc1.PauseQuantiles = make([]time.Duration, 5)
		debug.ReadGCStats(&gc1)
		b.Logf("TTL %v: %d lost, %.0f renewals/s counted; over the turn %.2f µs CPU a renewal, %.2f cores; GC %d cycles, %v paused, the longest %v",
			ttl, lost, float64(n)/took.Seconds(), float64(cpu.Nanoseconds())/1e3/float64(renewed), cpu.Seconds()/wall.Seconds(),
			gc1.NumGC-gc0.NumGC, gc1.PauseTotal-gc0.PauseTotal, gc1.PauseQuantiles[4])
	}
}

// pacedBatches renews each of the row's Clients' first 256 leases (or all,
// if fewer), one RenewBatch of them per caller at a time, from
// renewClients callers paced to rate renewals a second in all, for d. It
// returns the renewals, how long they took and the process's CPU time
// meanwhile.
func pacedBatches(b *testing.B, hc *leasehttp.Client, row *clientRow, rate float64, d time.Duration) (int, time.Duration, time.Duration) {
	batches := make([][]lease.Renewal, renewClients)
	for w := range batches {
		for i := range min(leasesPerRenew, row.holds) {
			batches[w] = append(batches[w], lease.Renewal{Lease: row.pool.held[clientKey(w, i)], TTL: setupTTL})
		}
	}
	var (
		total atomic.Int64
		wg    sync.WaitGroup
	)
	every := time.Duration(float64(time.Second) * float64(len(batches[0])*renewClients) / rate)
	cpu0, start := cpuTime(), time.Now()
	for w := range renewClients {
		wg.Go(func() {
			next := start.Add(every * time.Duration(w) / renewClients)
			for time.Since(start) < d {
				time.Sleep(time.Until(next)) // real time: the callers are paced on the real server
				next = next.Add(every)
				res, err := hc.RenewBatch(context.Background(), batches[w])
				if err != nil {
					b.Error(err)
					return
				}
				total.Add(int64(len(res)))
			}
		})
	}
	wg.Wait()
	return int(total.Load()), time.Since(start), cpuTime() - cpu0
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// renewTrace follows the client row's batches (LEASE_SCALE_CLIENT_TRACE):
// each turn, it logs the batch sizes, their round trips, the time between
// two sends of one hold, and for each hold lost, how: it waited in its
// Client's queue past its deadline (no send after the one that set the
// deadline), or it was sent again and the answer came after the deadline
// (or never).
type renewTrace struct {
	holds int // per Client
	t0    time.Time

	// By hold (clientKey's w × holds + i), since t0: its last send and
	// when that send was answered (0 not yet).
	lastSent, answeredAt []atomic.Int64
	failed               atomic.Int64 // batches failed whole

	mu        sync.Mutex
	sizes     []int
	rtts      []time.Duration
	intervals []time.Duration // between two sends of a hold
}

func newRenewTrace(holds int) *renewTrace {
	return &renewTrace{holds: holds, lastSent: make([]atomic.Int64, renewClients*holds), answeredAt: make([]atomic.Int64, renewClients*holds)}
}

// reset starts a turn at t0.
func (t *renewTrace) reset(t0 time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t0 = t0
	t.sizes, t.rtts, t.intervals = nil, nil, nil
	for i := range t.lastSent {
		t.lastSent[i].Store(0)
		t.answeredAt[i].Store(0)
	}
	t.failed.Store(0)
}

// index is a client row key's place (clientKey: "client/WW/IIIII").
func (t *renewTrace) index(key string) int {
	num := func(s string) int {
		n := 0
		for _, c := range []byte(s) {
			n = n*10 + int(c-'0')
		}
		return n
	}
	return num(key[7:9])*t.holds + num(key[10:15])
}

// sent records a batch about to be sent and returns the time.
func (t *renewTrace) sent(renewals []lease.Renewal) time.Time {
	now := time.Now()
	at := int64(now.Sub(t.t0))
	var intervals []time.Duration
	for _, r := range renewals {
		i := t.index(r.Lease.Key)
		if prev := t.lastSent[i].Swap(at); prev != 0 {
			intervals = append(intervals, time.Duration(at-prev))
		}
		t.answeredAt[i].Store(0)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sizes = append(t.sizes, len(renewals))
	t.intervals = append(t.intervals, intervals...)
	return now
}

// answered records the answer to a batch sent at sent.
func (t *renewTrace) answered(renewals []lease.Renewal, sent time.Time, err error) {
	now := time.Now()
	at := int64(now.Sub(t.t0))
	for _, r := range renewals {
		t.answeredAt[t.index(r.Lease.Key)].Store(at)
	}
	if err != nil {
		t.failed.Add(1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rtts = append(t.rtts, now.Sub(sent))
}

// report logs the turn at ttl, whose holds are released or were lost.
func (t *renewTrace) report(tb testing.TB, ttl time.Duration, holds []*lease.Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb.Logf("  batches: %s renewals; %d failed whole", spread(t.sizes), t.failed.Load())
	tb.Logf("  round trips: %s", spread(t.rtts))
	tb.Logf("  between two sends of a hold (TTL/3 = %v): %s", ttl/3, spread(t.intervals))
	var queued, late int
	var when []time.Duration
	for _, h := range holds {
		if !errors.Is(h.Err(), lease.ErrLost) {
			continue
		}
		i := t.index(h.Key())
		deadline := h.Deadline().Sub(t.t0)
		when = append(when, deadline)
		// The send that set the deadline was TTL − the default margin before it.
		setBy := deadline - (ttl - ttl/100 - 2*time.Millisecond)
		if time.Duration(t.lastSent[i].Load()) <= setBy+time.Millisecond {
			queued++
		} else {
			late++ // sent again, answered after the deadline or not at all
		}
	}
	tb.Logf("  lost: %d waiting in their Clients' queues, %d sent and answered too late; their deadlines, from the turn's start: %s", queued, late, spread(when))
}

// spread is xs's count, mean and quantiles.
func spread[T int | time.Duration](xs []T) string {
	if len(xs) == 0 {
		return "none"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += float64(x)
	}
	q := func(p float64) T { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d mean=%v p10=%v p50=%v p90=%v p99=%v max=%v", len(s), T(sum/float64(len(s))), q(0.1), q(0.5), q(0.9), q(0.99), s[len(s)-1])
}
