package watchbench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/leasehttp"
)

// Rounds per row at each watcher count: each round one change reaches
// every watcher of every row.
var watchRounds = map[int]int{1: 2000, 1000: 100}

// arrivalTimeout bounds the wait for a change to reach every watcher.
const arrivalTimeout = 30 * time.Second

// arrival is an event as a watcher received it.
type arrival struct {
	kind  lease.EventKind
	token lease.Token
	at    time.Time
	err   error
}

// fan is one row: change makes one change reach every watcher and
// returns, for each watcher, the time from the change's commit returning
// to the watcher receiving it.
type fan struct {
	name   string
	change func(ctx context.Context, round int) ([]time.Duration, error)
}

// BenchmarkCompareWatch measures, at c = 1 and 1,000 watchers, interleaved
// round by round (each round one change through each row, starting from
// the next row each round), the time from an acquisition's commit
// returning to its Acquired event reaching each watcher:
//
//   - sse-floor: no store; a handler per stream, woken through a channel,
//     writes and flushes the bytes leasehttp would send for the event, and
//     each watcher reads them off its stream with a bufio.Reader: the least
//     any watch over HTTP on this loopback must do (from the wake-up);
//   - boltstore-watch: boltstore's own Watch in process, no HTTP;
//   - leasehttp-bolt: boltstore behind leasehttp's server on loopback,
//     each watcher a leasehttp.Client.Watch stream of its own.
//
// The acquisitions are made in process, on the Store (Store.Acquire
// returning is the commit). boltstore publishes a batch's changes once it
// is durable and just before it answers its callers, so a watcher may
// receive a change before the caller does: such a latency is negative.
// Each round also releases the lease and waits until every watcher has
// seen that, untimed, so no row's work spills into the next's.
func BenchmarkCompareWatch(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("c=%d/interleaved", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rows := []fan{sseFloor(b, ctx, n), boltWatch(b, ctx, n), httpWatch(b, ctx, n)}
			rounds := max(b.N, watchRounds[n])
			lat := make([][]time.Duration, len(rows))
			b.ResetTimer()
			start := time.Now()
			for r := range rounds {
				for k := range rows {
					i := (r + k) % len(rows)
					d, err := rows[i].change(ctx, r)
					if err != nil {
						b.Fatalf("%s, round %d: %v", rows[i].name, r, err)
					}
					lat[i] = append(lat[i], d...)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			out := make([]benchutil.Row, len(rows))
			for i, row := range rows {
				out[i] = benchutil.Row{Name: row.name, Latencies: lat[i]}
			}
			benchutil.ReportRows(b, elapsed/time.Duration(rounds), out)
		})
	}
}

// watchers runs n watchers of w under prefix, each sending what it
// receives on the returned channel, and returns once all have synced.
// They end with ctx.
func watchers(b *testing.B, ctx context.Context, w lease.Watcher, prefix string, n int) <-chan arrival {
	b.Helper()
	ch := make(chan arrival, 2*n)
	var synced sync.WaitGroup
	synced.Add(n)
	var done sync.WaitGroup
	for range n {
		done.Go(func() {
			ready := false
			for ev, err := range w.Watch(ctx, prefix) {
				if err != nil {
					if ctx.Err() == nil {
						ch <- arrival{err: err}
					}
					break
				}
				if ev.Kind == lease.Synced {
					ready = true
					synced.Done()
					continue
				}
				ch <- arrival{kind: ev.Kind, token: ev.Lease.Token, at: time.Now()}
			}
			if !ready {
				synced.Done()
			}
		})
	}
	b.Cleanup(done.Wait) // after the cancel of ctx: cleanups run last first
	synced.Wait()
	return ch
}

// collect takes n arrivals of kind for token from ch, and returns each
// one's time after t0.
func collect(ch <-chan arrival, n int, kind lease.EventKind, token lease.Token, t0 time.Time) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	timeout := time.NewTimer(arrivalTimeout)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case a := <-ch:
			switch {
			case a.err != nil:
				return nil, a.err
			case a.kind != kind || a.token != token:
				return nil, fmt.Errorf("a watcher received %s of token %d, want %s of token %d", a.kind, a.token, kind, token)
			}
			out = append(out, a.at.Sub(t0))
		case <-timeout.C:
			return nil, fmt.Errorf("%d of %d watchers received %s of token %d within %v", len(out), n, kind, token, arrivalTimeout)
		}
	}
	return out, nil
}

func openStore(b *testing.B) *boltstore.Store {
	s, err := boltstore.Open(filepath.Join(b.TempDir(), "lease.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// storeChange acquires and releases a lease on s, returning the Acquired
// event's latencies at the n watchers that send on ch.
func storeChange(ctx context.Context, s *boltstore.Store, ch <-chan arrival, n int) ([]time.Duration, error) {
	l, err := s.Acquire(ctx, "w/k", "bench", time.Minute)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	lat, err := collect(ch, n, lease.Acquired, l.Token, t0)
	if err != nil {
		return nil, err
	}
	if err := s.Release(ctx, l); err != nil {
		return nil, err
	}
	if _, err := collect(ch, n, lease.Released, l.Token, t0); err != nil {
		return nil, err
	}
	return lat, nil
}

func boltWatch(b *testing.B, ctx context.Context, n int) fan {
	s := openStore(b)
	ch := watchers(b, ctx, s, "w/", n)
	return fan{"boltstore-watch", func(ctx context.Context, _ int) ([]time.Duration, error) {
		return storeChange(ctx, s, ch, n)
	}}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func httpWatch(b *testing.B, ctx context.Context, n int) fan {
	s := openStore(b)
	srv, err := leasehttp.NewServer(s, leasehttp.WithLogger(quiet), leasehttp.WithMaxWatchers(n))
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	b.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	c, err := leasehttp.NewClient(hs.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ch := watchers(b, ctx, c, "w/", n)
	return fan{"leasehttp-bolt", func(ctx context.Context, _ int) ([]time.Duration, error) {
		return storeChange(ctx, s, ch, n)
	}}
}

// sseFloor serves n bare event streams: each handler waits on a channel of
// its own and writes one event's bytes (as leasehttp would write an
// acquisition of the same lease) per wake-up.
func sseFloor(b *testing.B, ctx context.Context, n int) fan {
	data, err := json.Marshal(leasehttp.NewLeaseJSON(lease.Lease{Key: "w/k", Owner: "bench", Token: 1 << 20, TTL: time.Minute,
		Expires: time.Now().Add(time.Minute)}, false))
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu    sync.Mutex
		wakes []chan lease.Token
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wake := make(chan lease.Token, 1)
		mu.Lock()
		wakes = append(wakes, wake)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		var buf []byte
		for id := 1; ; id++ {
			select {
			case tok := <-wake:
				buf = append(buf[:0], "id: "...)
				buf = strconv.AppendInt(buf, int64(id), 10)
				buf = append(buf, "\nevent: acquired\ndata: "...)
				buf = append(buf, data...)
				buf = append(buf, "\n\n"...)
				// The token travels in the id line's place for the reader.
				buf = append(buf, ": "...)
				buf = strconv.AppendUint(buf, uint64(tok), 10)
				buf = append(buf, "\n"...)
				if _, err := w.Write(buf); err != nil {
					return
				}
				if rc.Flush() != nil {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
	}))
	b.Cleanup(hs.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ch := make(chan arrival, 2*n)
	var started, done sync.WaitGroup
	started.Add(n)
	for range n {
		done.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL, nil)
			if err != nil {
				started.Done()
				ch <- arrival{err: err}
				return
			}
			resp, err := hc.Do(req)
			started.Done()
			if err != nil {
				ch <- arrival{err: err}
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, io.EOF) {
						ch <- arrival{err: err}
					}
					return
				}
				if len(line) == 1 { // the blank line that ends the event
					at := time.Now()
					tok, err := br.ReadSlice('\n')
					if err != nil || len(tok) < 3 {
						ch <- arrival{err: fmt.Errorf("sse-floor: no token after the event: %v", err)}
						return
					}
					t, _ := strconv.ParseUint(string(tok[2:len(tok)-1]), 10, 64)
					ch <- arrival{kind: lease.Acquired, token: lease.Token(t), at: at}
				}
			}
		})
	}
	b.Cleanup(done.Wait)
	started.Wait()
	for { // every handler has registered
		mu.Lock()
		k := len(wakes)
		mu.Unlock()
		if k == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return fan{"sse-floor", func(ctx context.Context, round int) ([]time.Duration, error) {
		tok := lease.Token(round + 1)
		t0 := time.Now()
		mu.Lock()
		for _, w := range wakes {
			w <- tok
		}
		mu.Unlock()
		return collect(ch, n, lease.Acquired, tok, t0)
	}}
}
