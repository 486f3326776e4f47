package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
)

// LineOrder (issue 29): waiters that queued for a key one after another
// through the server are served in that order, however many times each
// wait was re-sent at the server's wait cap.
const LineOrder Property = "line order"

// LineConfig is one run of the long-wait simulation: Waiters clients
// queue, one after another, for a key that a holder keeps for Hold,
// through a leasehttp server over memstore whose wait cap is 10 ms, so
// that every wait is re-sent about Hold/10ms times. Each request and each
// answer crosses a network that delays it by a seeded 0 to 3 ms.
type LineConfig struct {
	Seed    uint64
	Waiters int           // default 6
	Hold    time.Duration // default 1 s
	// ServerQueues hides memstore's own FIFO wait, so that the server
	// queues the waiters itself.
	ServerQueues bool
	// NoTickets runs the server with WithWaitGrace(0): a re-sent wait
	// joins the back of the line (a negative control).
	NoTickets bool
}

// Line runs the long-wait simulation in a testing/synctest bubble (virtual
// time) and returns what it found: a Violation of LineOrder, or none.
func Line(t *testing.T, cfg LineConfig) Result {
	if cfg.Waiters == 0 {
		cfg.Waiters = 6
	}
	if cfg.Hold == 0 {
		cfg.Hold = time.Second
	}
	var res Result
	synctest.Test(t, func(t *testing.T) {
		res = line(t, cfg)
	})
	return res
}

// lineBackend hides memstore's abilities (LineConfig.ServerQueues).
type lineBackend struct{ lease.Backend }

func line(t *testing.T, cfg LineConfig) Result {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	var backend lease.Backend = store
	if cfg.ServerQueues {
		backend = lineBackend{store}
	}
	grace := leasehttp.DefaultWaitGrace
	if cfg.NoTickets {
		grace = 0
	}
	srv, err := leasehttp.NewServer(backend, leasehttp.WithMaxWait(10*time.Millisecond), leasehttp.WithWaitGrace(grace),
		leasehttp.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), leasehttp.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	net := &lineNet{srv: srv, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d))}
	newClient := func() *leasehttp.Client {
		c, err := leasehttp.NewClient("http://127.0.0.1", leasehttp.WithHTTPClient(&http.Client{Transport: net}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := newClient()
	defer hc.Close()
	holder, err := hc.Acquire(ctx, "line", "holder", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	type served struct {
		i int
		l lease.Lease
	}
	out := make(chan served, cfg.Waiters)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	res := Result{}
	for i := range cfg.Waiters {
		c := newClient()
		wg.Go(func() {
			defer c.Close()
			l, err := c.AcquireWait(ctx, "line", "w"+strconv.Itoa(i), time.Hour)
			if err == nil {
				out <- served{i, l}
			}
		})
		// The request has crossed the network (at most 3 ms) and waits.
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
	}
	time.Sleep(cfg.Hold)
	prev := holder
	for want := range cfg.Waiters {
		if err := hc.Release(ctx, prev); err != nil {
			t.Fatal(err)
		}
		s := <-out
		res.Trace = append(res.Trace, fmt.Sprintf("served w%d", s.i))
		if s.i != want && res.Violation == "" {
			res.Property = LineOrder
			res.Violation = fmt.Sprintf("waiter %d was served in place %d after waiting %v through a 10 ms wait cap", s.i, want, cfg.Hold)
		}
		prev = s.l
	}
	if err := hc.Release(ctx, prev); err != nil {
		t.Fatal(err)
	}
	return res
}

// lineNet carries requests to the server in process, each way after a
// seeded delay of 0 to 3 ms.
type lineNet struct {
	srv *leasehttp.Server
	mu  sync.Mutex
	rng *rand.Rand
}

func (n *lineNet) delay() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Duration(n.rng.Int64N(int64(3 * time.Millisecond)))
}

func (n *lineNet) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(n.delay())
	rec := httptest.NewRecorder()
	n.srv.ServeHTTP(rec, req)
	time.Sleep(n.delay())
	return rec.Result(), nil
}
