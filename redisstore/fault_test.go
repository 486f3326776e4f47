package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// TestNoFalseGrantOnFaults streams acquires from several goroutines while
// connections are cut (CLIENT KILL) or the server is killed with SIGKILL
// and restarted. Every Acquire must either fail or return a lease the
// server confirms afterwards: no lease the server does not know.
func TestNoFalseGrantOnFaults(t *testing.T) {
	clientKill := func(t *testing.T, srv *redistest.Server) {
		c := srv.Client(t)
		for range 20 {
			_ = c.ClientKillByFilter(ctxFor(t), "TYPE", "normal", "SKIPME", "yes").Err()
			time.Sleep(5 * time.Millisecond)
		}
	}
	serverKill := func(t *testing.T, srv *redistest.Server) {
		srv.Kill(t)
		// Down for longer than go-redis retries a command (4 tries, each
		// of 5 dials 100 ms apart, plus backoff: about 2 s), so that some
		// acquires fail outright. A call queued behind a pipeline in
		// flight (see batch.go) may spend two such spans before it fails.
		time.Sleep(5 * time.Second)
		srv.Restart(t)
	}
	for _, tc := range []struct {
		name     string
		query    string // go-redis URL options
		fault    func(t *testing.T, srv *redistest.Server)
		mustFail bool
	}{
		{"client kill, go-redis retries", "", clientKill, false},
		{"client kill, no retries", "?max_retries=-1", clientKill, false},
		{"server kill, go-redis retries", "", serverKill, true},
		{"server kill, no retries", "?max_retries=-1", serverKill, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			srv.RequireOwned(t, "cutting connections and killing the server")
			s := openURL(t, "redis://"+srv.Addr+"/0"+tc.query)
			const workers = 8
			var (
				mu      sync.Mutex
				granted []lease.Lease
				failed  int
				wg      sync.WaitGroup
				stop    = make(chan struct{})
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := fmt.Sprintf("fault/%d/%d", w, i)
						l, err := s.Acquire(ctxFor(t), k, "streamer", time.Hour)
						mu.Lock()
						if err == nil {
							granted = append(granted, l)
						} else {
							failed++
							if !errors.Is(err, lease.ErrUnavailable) {
								t.Errorf("Acquire(%q) failed with %v, want an error matching ErrUnavailable", k, err)
							}
						}
						mu.Unlock()
						if err != nil {
							time.Sleep(time.Millisecond)
						}
					}
				}()
			}
			time.Sleep(100 * time.Millisecond)
			tc.fault(t, srv)
			time.Sleep(100 * time.Millisecond)
			close(stop)
			wg.Wait()

			if failed == 0 && tc.mustFail {
				t.Fatalf("no Acquire failed while the server was down (%d granted): the fault was not exercised", len(granted))
			}
			unknown := 0
			for _, l := range granted {
				got, err := getReachable(t, s, l.Key)
				if err != nil || got.Token != l.Token || got.Owner != l.Owner {
					unknown++
					if unknown <= 5 {
						t.Errorf("granted %q token %d, but the server has %+v, %v", l.Key, l.Token, got, err)
					}
				}
			}
			if unknown > 0 {
				t.Fatalf("%d of %d granted leases unknown to the server", unknown, len(granted))
			}
			t.Logf("%d granted and confirmed, %d failed", len(granted), failed)
		})
	}
}

// TestHoldLostWhileServerDown holds a lease through lease.Client, stops the
// server, and checks that the Hold is cancelled with cause ErrLost at a safe
// deadline no later than the TTL after the last renewal sent while the
// server was up (I5). After the server comes back the lease expires on the
// server's clock and a successor gets a higher token.
func TestHoldLostWhileServerDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "stopping the server")
	s := open(t, srv)
	c, err := lease.NewClient(s, lease.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	const k = "fault/hold"
	ttl := 600 * time.Millisecond
	h, err := c.TryAcquire(ctxFor(t), k, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())

	// Wait for a renewal, so the deadline under test is a renewal's.
	first := h.Deadline()
	for deadline := time.Now().Add(10 * time.Second); !h.Deadline().After(first); {
		if time.Now().After(deadline) {
			t.Fatal("no renewal within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopped := time.Now()
	srv.Stop(t)

	select {
	case <-h.Done():
	case <-time.After(20 * ttl):
		t.Fatalf("Hold still live %v after the server stopped", 20*ttl)
	}
	cause := context.Cause(h.Context())
	if !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", cause)
	}
	if !strings.Contains(cause.Error(), "safe deadline") {
		t.Errorf("cause = %v, want the safe deadline passing", cause)
	}
	// No renewal can have succeeded after the stop, so the deadline the Hold
	// gave up at is at most stop time + TTL (minus the drift margin).
	if d := h.Deadline(); d.After(stopped.Add(ttl)) {
		t.Fatalf("Hold deadline %v is later than stop + TTL %v", d, stopped.Add(ttl))
	}
	if err := h.Release(ctxFor(t)); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Release after the loss: err = %v, want ErrLost", err)
	}

	srv.Restart(t)
	next, err := lease.NewClient(s, lease.WithOwner("successor"))
	if err != nil {
		t.Fatal(err)
	}
	acqCtx, cancel := context.WithTimeout(ctxFor(t), 30*time.Second)
	defer cancel()
	h2, err := next.Acquire(acqCtx, k, time.Minute)
	if err != nil {
		t.Fatalf("successor Acquire: %v", err)
	}
	defer h2.Release(context.Background())
	if h2.Token() <= h.Token() {
		t.Fatalf("successor token %d not above %d", h2.Token(), h.Token())
	}
}

// getReachable is Get retried while the server cannot be reached: after a
// restart go-redis' pool keeps returning its last dial error for up to a
// second before it dials again.
func getReachable(t *testing.T, b lease.Backend, key string) (lease.Lease, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := b.Get(ctxFor(t), key)
		if !errors.Is(err, lease.ErrUnavailable) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
