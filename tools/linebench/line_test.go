package linebench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/cli"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
)

const lineWaiters = 50

// envDuration reads a duration from the environment, or def.
func envDuration(tb testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// serve starts `lease serve` on the embedded store with the given wait cap
// and grace, and returns its URL.
func serve(tb testing.TB, maxWait, grace time.Duration) string {
	cfg := cli.DefaultServeConfig(filepath.Join(tb.TempDir(), "data"), slog.New(slog.DiscardHandler))
	cfg.MaxWait, cfg.WaitGrace = maxWait, grace
	s, err := cli.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return "http://" + s.Addr()
}

// waiters reads the server's lease_waiters gauge.
func waiters(url string) (int, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "lease_waiters "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no lease_waiters in %s/metrics", url)
}

// line queues lineWaiters waiters in order behind a holder, lets them wait
// for wait, and serves them one by one. It returns each waiter's wait and
// the number of waiters served before one that queued ahead of them.
func line(url string, wait time.Duration) ([]time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait+5*time.Minute)
	defer cancel()
	newClient := func() (*leasehttp.Client, error) { return leasehttp.NewClient(url) }
	hc, err := newClient()
	if err != nil {
		return nil, 0, err
	}
	defer hc.Close()
	holder, err := hc.Acquire(ctx, "line", "holder", time.Hour)
	if err != nil {
		return nil, 0, err
	}
	type served struct {
		i int
		l lease.Lease
		d time.Duration
	}
	out := make(chan served, lineWaiters)
	errs := make(chan error, lineWaiters)
	var wg sync.WaitGroup
	defer func() {
		cancel() // waiters left behind by an error give up
		wg.Wait()
	}()
	for i := range lineWaiters {
		c, err := newClient()
		if err != nil {
			return nil, 0, err
		}
		start := time.Now()
		wg.Go(func() {
			defer c.Close()
			l, err := c.AcquireWait(ctx, "line", "w"+strconv.Itoa(i), time.Hour)
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			out <- served{i, l, time.Since(start)}
		})
		// Queued when the server counts it. Without tickets a wait is not
		// counted between its requests, so the count may never show all
		// at once: there, 100 ms apart is the order, and the poll's end
		// at 100 ms is no error.
		var asked error
		_ = poll.Err(100*time.Millisecond, func() error {
			n, err := waiters(url)
			if err != nil {
				asked = err
				return nil
			}
			if n < i+1 {
				return errors.New("not counted yet")
			}
			return nil
		})
		if asked != nil {
			return nil, 0, asked
		}
	}
	time.Sleep(wait) // real time: the long wait through the real server that the benchmark measures
	prev := holder
	lat := make([]time.Duration, 0, lineWaiters)
	overtakes, next := 0, 0
	done := make([]bool, lineWaiters)
	for range lineWaiters {
		if err := hc.Release(ctx, prev); err != nil {
			return nil, 0, err
		}
		var s served
		select {
		case s = <-out:
		case err := <-errs:
			return nil, 0, err
		}
		if s.i != next {
			overtakes++ // served before a waiter that queued ahead of it
		}
		done[s.i] = true
		for next < lineWaiters && done[next] {
			next++
		}
		lat = append(lat, s.d)
		prev = s.l
	}
	return lat, overtakes, hc.Release(ctx, prev)
}

// BenchmarkCompareLine: see the package documentation.
func BenchmarkCompareLine(b *testing.B) {
	wait := envDuration(b, "LINEBENCH_WAIT", 5*time.Minute)
	limit := envDuration(b, "LINEBENCH_CAP", time.Second)
	rows := []struct {
		name string
		url  string
	}{
		{"no-resend-floor", serve(b, wait+time.Minute, cli.DefaultWaitGrace)},
		{"serve-tickets", serve(b, limit, cli.DefaultWaitGrace)},
		{"serve-no-tickets", serve(b, limit, 0)},
	}
	b.Run("c="+strconv.Itoa(lineWaiters)+"/interleaved", func(b *testing.B) {
		out := make([]benchutil.Row, len(rows))
		errs := make([]error, len(rows))
		var wg sync.WaitGroup
		start := time.Now()
		for i, r := range rows {
			wg.Go(func() {
				lat, overtakes, err := line(r.url, wait)
				out[i] = benchutil.Row{Name: r.name, Latencies: lat, Extra: map[string]float64{"overtakes": float64(overtakes)}}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				b.Fatalf("%s: %v", rows[i].name, err)
			}
		}
		benchutil.ReportRows(b, time.Since(start), out)
	})
}

// newLoopbackServer serves h on a loopback port until tb ends.
func newLoopbackServer(tb testing.TB, h interface {
	http.Handler
	Close() error
}) string {
	hs := httptest.NewServer(h)
	tb.Cleanup(func() {
		_ = h.Close()
		hs.Close()
	})
	return hs.URL
}
