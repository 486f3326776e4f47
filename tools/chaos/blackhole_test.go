package chaos_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
	"github.com/leasehq/lease/tools/chaos"
)

// TestBlackholedWatcherAndWaiter puts a watcher and a waiter of a lease
// server behind toxiproxy and blackholes the link (a timeout toxic with no
// timeout: the bytes stop, the connection stays open, as on a network that
// drops everything). The watcher reports the break (ErrUnavailable) within
// the silence limit, and not the change made after the blackhole; the
// waiter whose caller gives up returns at once, not after the request
// timeout. The bounds are generous for a shared machine; the benchmarks
// measure the p99.
func TestBlackholedWatcherAndWaiter(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	const hb = 100 * time.Millisecond
	srv, err := leasehttp.NewServer(store, leasehttp.WithHeartbeat(hb))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() { srv.Close(); hs.Close() }()
	px, err := chaos.NewProxies([]string{hs.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	c, err := leasehttp.NewClient("http://" + px.Listen(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := store.Acquire(ctx, "busy", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	type item struct {
		ev  lease.Event
		err error
	}
	events := make(chan item, 16)
	go func() {
		defer close(events)
		for ev, err := range c.Watch(ctx, "jobs/") {
			events <- item{ev, err}
		}
	}()
	if it := <-events; it.err != nil || it.ev.Kind != lease.Synced {
		t.Fatalf("%+v, want Synced", it)
	}
	wctx, giveUp := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { _, err := c.AcquireWait(wctx, "busy", "waiter", time.Minute); waited <- err }()
	poll.True(t, 10*time.Second, "the waiter reaches the server", func() bool { return waiting(t, hs.URL) > 0 })

	if err := px.Add(chaos.Toxic{Name: "blackhole", Type: "timeout", Stream: "downstream", Attributes: map[string]int64{"timeout": 0}},
		chaos.Toxic{Name: "blackhole-up", Type: "timeout", Stream: "upstream", Attributes: map[string]int64{"timeout": 0}}); err != nil {
		t.Fatal(err)
	}
	holed := time.Now()
	if _, err := store.Acquire(ctx, "jobs/late", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case it := <-events:
		if it.err == nil {
			t.Fatalf("%v %s arrived through the blackhole, want the break", it.ev.Kind, it.ev.Lease.Key)
		}
		if !errors.Is(it.err, lease.ErrUnavailable) {
			t.Fatalf("the blackholed watch ended with %v, want ErrUnavailable", it.err)
		}
		if took := time.Since(holed); took > 3*time.Second {
			t.Errorf("the break came %v after the blackhole, want under 3 s (silence limit %v)", took, leasehttp.MissedHeartbeats*hb+leasehttp.SilenceSlack)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blackholed watch reported nothing within 30 s")
	}

	gaveUp := time.Now()
	giveUp()
	select {
	case err := <-waited:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the waiter given up: %v, want context.Canceled", err)
		}
		if took := time.Since(gaveUp); took > 2*time.Second {
			t.Errorf("the waiter returned %v after its caller gave up, want under 2 s", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter given up has not returned within 30 s")
	}
}

func waiting(t *testing.T, base string) int {
	t.Helper()
	n, err := chaos.ServerWaiters(base)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
