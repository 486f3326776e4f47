package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/tools/chaos"
)

// blackholedWaiter queues a waiter behind a toxiproxy, then two more
// directly, blackholes the first one's connection both ways (toxiproxy's
// timeout toxic with timeout 0: nothing delivered, nothing closed, as a
// waiter whose network died), and releases the key. It returns how long
// the next waiter took to be served after the release, and the order the
// two live waiters were served in.
func blackholedWaiter(t *testing.T, grace time.Duration) (time.Duration, string) {
	srv, err := leasehttp.NewServer(memtest.New(t), leasehttp.WithMaxWait(100*time.Millisecond), leasehttp.WithWaitGrace(grace))
	if err != nil {
		t.Fatal(err)
	}
	// The doomed waiter's requests come through the proxy, so they name
	// its address as their Host: served counts those the server serves now.
	var proxyHost atomic.Pointer[string]
	var doomedServed atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := proxyHost.Load(); h != nil && r.Host == *h {
			doomedServed.Add(1)
			defer doomedServed.Add(-1)
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	px, err := chaos.NewProxies([]string{strings.TrimPrefix(hs.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	client := func(url string) *leasehttp.Client {
		c, err := leasehttp.NewClient(url, leasehttp.WithTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	doomedAddr := px.Listen(0)
	proxyHost.Store(&doomedAddr)
	direct, doomed := client(hs.URL), client("http://"+doomedAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	holder, err := direct.Acquire(ctx, "line", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	queued := func(n int) {
		t.Helper()
		poll.True(t, 10*time.Second, fmt.Sprintf("%d waiters queued", n), func() bool { return waiters(t, hs.URL) >= n })
	}
	dctx, stopDoomed := context.WithCancel(ctx)
	doomedDone := make(chan struct{})
	go func() {
		defer close(doomedDone)
		if l, err := doomed.AcquireWait(dctx, "line", "doomed", time.Minute); err == nil {
			t.Errorf("the blackholed waiter got the lease (token %d)", l.Token)
		}
	}()
	t.Cleanup(func() { stopDoomed(); <-doomedDone })
	queued(1)
	served := make(chan string, 2)
	for _, who := range []string{"w1", "w2"} {
		go func() {
			l, err := direct.AcquireWait(ctx, "line", who, time.Minute)
			if err != nil {
				served <- "error: " + err.Error()
				return
			}
			served <- who
			_ = direct.Release(context.Background(), l)
		}()
		queued(map[string]int{"w1": 2, "w2": 3}[who])
	}
	if err := px.Add(
		chaos.Toxic{Name: "up", Type: "timeout", Stream: "upstream", Attributes: map[string]int64{"timeout": 0}},
		chaos.Toxic{Name: "down", Type: "timeout", Stream: "downstream", Attributes: map[string]int64{"timeout": 0}},
	); err != nil {
		t.Fatal(err)
	}
	// Until the doomed waiter's request has reached the wait cap and been
	// answered (into the blackhole), so that it is between requests when
	// the key comes free: its next request never reaches the server.
	poll.True(t, 10*time.Second, "the doomed waiter's request ended at the wait cap", func() bool { return doomedServed.Load() == 0 })
	start := time.Now()
	if err := direct.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	var order []string
	var first time.Duration
	for range 2 {
		select {
		case who := <-served:
			if first == 0 {
				first = time.Since(start)
			}
			order = append(order, who)
		case <-time.After(40 * time.Second):
			t.Fatal("the live waiters were not served within 40 s")
		}
	}
	return first, strings.Join(order, ",")
}

// TestBlackholedWaiterLeavesTheLine: a waiter whose connection is
// blackholed while it waits leaves the line within the server's wait cap
// and grace, not a TTL: the live waiters behind it are served, in order,
// within a second or so of the release (the TTL is a minute). Its control
// is a server that keeps a wait 5 s for its client: then the live waiters
// wait that long.
func TestBlackholedWaiterLeavesTheLine(t *testing.T) {
	t.Run("Grace300ms", func(t *testing.T) {
		t.Parallel()
		d, order := blackholedWaiter(t, 300*time.Millisecond)
		if order != "w1,w2" {
			t.Fatalf("served %s, want w1,w2", order)
		}
		if d > 2*time.Second {
			t.Fatalf("the next waiter was served %v after the release, behind a blackholed waiter; want within the grace", d)
		}
	})
	t.Run("ControlGrace5s", func(t *testing.T) {
		t.Parallel()
		d, _ := blackholedWaiter(t, 5*time.Second)
		if d <= 2*time.Second {
			t.Fatalf("with a grace of 5 s the next waiter was served %v after the release: the check cannot tell a stalled line", d)
		}
		t.Logf("found: the next waiter served %v after the release", d)
	})
}

// waiters reads the server's count of waiting acquires (GET /v1/stats).
func waiters(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats struct {
		Waiters int `json:"waiters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	return stats.Waiters
}
