package leasehttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// startCountingServer is startServer that also counts the acquire
// requests that carry owner in their body.
func startCountingServer(t *testing.T, b lease.Backend, owner string, opts ...leasehttp.ServerOption) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	srv := newServer(t, b, opts...)
	var n atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			body := peekBody(t, r)
			if strings.Contains(body, `"owner":"`+owner+`"`) {
				n.Add(1)
			}
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return hs, &n
}

// lineOrder queues w1, w2 and w3 in that order for a held key, lets w2's
// wait be re-sent (its client asks for 30 ms at a time) while the others'
// requests still wait, and returns the order in which they are served.
func lineOrder(t *testing.T, b lease.Backend, opts ...leasehttp.ServerOption) []string {
	hs, resent := startCountingServer(t, b, "w2", opts...)
	c := newClient(t, hs.URL)
	short := newClient(t, hs.URL, leasehttp.WithWaitChunk(30*time.Millisecond))
	holder, err := c.Acquire(ctxFor(t), "line", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type served struct {
		who string
		l   lease.Lease
		err error
	}
	out := make(chan served, 3)
	for i, who := range []string{"w1", "w2", "w3"} {
		cl := c
		if who == "w2" {
			cl = short
		}
		go func() {
			l, err := cl.AcquireWait(ctxFor(t), "line", who, time.Minute)
			out <- served{who, l, err}
		}()
		eventually(t, who+" queued", func() bool { return metric(t, hs.URL, "lease_waiters") >= float64(i+1) })
	}
	eventually(t, "w2's wait re-sent", func() bool { return resent.Load() >= 3 })
	prev := holder
	var order []string
	for range 3 {
		if err := c.Release(ctxFor(t), prev); err != nil {
			t.Fatal(err)
		}
		s := <-out
		if s.err != nil {
			t.Fatalf("%s: %v", s.who, s.err)
		}
		if s.l.Token <= prev.Token {
			t.Fatalf("%s got token %d, not above %d", s.who, s.l.Token, prev.Token)
		}
		order, prev = append(order, s.who), s.l
	}
	return order
}

// TestResentWaitKeepsItsPlace checks that a wait re-sent at the server's
// max wait keeps its place in line: asked w1, w2, w3, served w1, w2, w3,
// whichever way the server waits. Its control turns tickets off, and w2,
// re-sent, falls behind w3.
func TestResentWaitKeepsItsPlace(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			got := strings.Join(lineOrder(t, be.new(t)), ",")
			if got != "w1,w2,w3" {
				t.Fatalf("served %s, want w1,w2,w3", got)
			}
		})
		t.Run(be.name+"/ControlWithoutTickets", func(t *testing.T) {
			t.Parallel()
			got := strings.Join(lineOrder(t, be.new(t), leasehttp.WithWaitGrace(0)), ",")
			if got != "w1,w3,w2" {
				t.Fatalf("without tickets served %s, want w1,w3,w2 (the re-sent wait at the back)", got)
			}
		})
	}
}

// TestAbandonedTicketLeavesTheLine checks that a ticketed wait whose client
// never asks again leaves the line within the grace, not at a TTL: a lease
// granted to it meanwhile is released, and the waiter behind it is served.
//
// It runs in a synctest bubble, the client talking to the server through
// handlerTransport: the grace runs from the end of the ghost's request, and
// "next" must be in line behind the ghost before it ends. On the real clock
// under load (2 cores, load 12), next's AcquireWait sometimes reached the
// server more than the 200 ms grace after the ghost's request: the ghost
// had left the line by then, lease_waiters never read 2, and the test
// failed waiting 10 s for "next queued". In the bubble the grace starts
// only once every goroutine is blocked, next among them in line.
func TestAbandonedTicketLeavesTheLine(t *testing.T) {
	const grace = 200 * time.Millisecond
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { abandonedTicketLeavesTheLine(t, be.new(t), grace) })
		})
	}
}

func abandonedTicketLeavesTheLine(t *testing.T, b lease.Backend, grace time.Duration) {
	srv := newServer(t, b, leasehttp.WithWaitGrace(grace))
	c := newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(&http.Client{Transport: handlerTransport{srv}}))
	waiters := func() float64 { return metricIn(t, metricsOf(t, srv), "lease_waiters") }
	holder, err := c.Acquire(ctxFor(t), "gone", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The abandoned wait: one request of 20 ms, never re-sent.
	rec := serve(srv, "POST", "/v1/leases/gone/acquire", "application/json",
		[]byte(`{"owner":"ghost","ttl_ms":60000,"wait_ms":20,"ticket":"0123456789abcdef0123456789abcdef"}`))
	if rec.Code != http.StatusConflict {
		t.Fatalf("the ghost's wait: HTTP %d %s, want 409", rec.Code, rec.Body)
	}
	if n := waiters(); n != 1 {
		t.Fatalf("after the ghost's request, %v waits in line; want the ghost kept for its grace (1)", n)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.AcquireWait(ctxFor(t), "gone", "next", time.Minute)
		got <- err
	}()
	synctest.Wait() // next waits in line, behind the ghost
	if n := waiters(); n != 2 {
		t.Fatalf("with next's wait sent, %v wait in line; want 2 (the ghost, then next)", n)
	}
	released := time.Now()
	if err := c.Release(ctxFor(t), holder); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind an abandoned wait was not served within 10 s (a TTL is a minute)")
	}
	if d := time.Since(released); d > 5*time.Second {
		t.Fatalf("served %v after the release; the grace is %v", d, grace)
	}
}

// TestTicketResumesAfterAGrant checks that a lease granted to a ticketed
// wait between its requests is handed to the next request with the ticket,
// renewed so that it lasts its TTL from then.
func TestTicketResumesAfterAGrant(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			clk := fakeclock.New(time.Now()) // the backend's: it moves between the grant and the hand-over
			_, hs := startServer(t, be.new(t, memstore.WithClock(clk)), leasehttp.WithWaitGrace(time.Minute))
			c := newClient(t, hs.URL)
			holder, err := c.Acquire(ctxFor(t), "resume", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			const req = `{"owner":"back","ttl_ms":60000,"wait_ms":20,"ticket":"00000000000000000000000000000abc"}`
			if status, body := call(t, "POST", hs.URL+"/v1/leases/resume/acquire", "", req); status != http.StatusConflict {
				t.Fatalf("first request: HTTP %d %s, want 409", status, body)
			}
			if err := c.Release(ctxFor(t), holder); err != nil {
				t.Fatal(err)
			}
			eventually(t, "granted to the ticket", func() bool {
				l, err := c.Get(ctxFor(t), "resume")
				return err == nil && l.Owner == "back"
			})
			granted, _ := c.Get(ctxFor(t), "resume")
			clk.Advance(20 * time.Millisecond) // so that a renewal shows
			status, body := call(t, "POST", hs.URL+"/v1/leases/resume/acquire", "", req)
			if status != http.StatusOK {
				t.Fatalf("second request: HTTP %d %s, want 200", status, body)
			}
			l, err := c.Get(ctxFor(t), "resume")
			if err != nil {
				t.Fatal(err)
			}
			if l.Token != granted.Token || !l.Expires.After(granted.Expires) {
				t.Fatalf("handed over token %d expiring %v; granted token %d expiring %v: want the same token, renewed",
					l.Token, l.Expires, granted.Token, granted.Expires)
			}
			// A second request with the ticket while it waits is refused.
			h2, err := c.Acquire(ctxFor(t), "busy", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Release(context.Background(), h2) }()
			const busy = `{"owner":"o","ttl_ms":60000,"wait_ms":2000,"ticket":"00000000000000000000000000000def"}`
			first := make(chan int, 1)
			go func() {
				st, _ := call(t, "POST", hs.URL+"/v1/leases/busy/acquire", "", busy)
				first <- st
			}()
			eventually(t, "the first request waits", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
			if st, body := call(t, "POST", hs.URL+"/v1/leases/busy/acquire", "", busy); st != http.StatusBadRequest {
				t.Fatalf("a second request with a ticket in use: HTTP %d %s, want 400", st, body)
			}
			if st := <-first; st != http.StatusConflict {
				t.Fatalf("first request: HTTP %d, want 409", st)
			}
		})
	}
}

// peekBody reads r's body and puts it back for the handler.
func peekBody(t *testing.T, r *http.Request) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading a request body: %v", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return string(b)
}

// TestLastRequestLeavesOnlyWhenItRanWhole: "last" says the client will not
// ask again once its wait_ms has run. A last request the server cuts short
// at its max wait keeps the wait in line (the client will ask again); one
// that runs its whole wait_ms takes it out.
func TestLastRequestLeavesOnlyWhenItRanWhole(t *testing.T) {
	_, hs := startServer(t, newMem(t), leasehttp.WithMaxWait(50*time.Millisecond), leasehttp.WithWaitGrace(time.Minute))
	c := newClient(t, hs.URL)
	holder, err := c.Acquire(ctxFor(t), "last", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(context.Background(), holder)
	const capped = `{"owner":"w","ttl_ms":60000,"wait_ms":60000,"ticket":"000000000000000000000000000000aa","last":true}`
	if status, body := call(t, "POST", hs.URL+"/v1/leases/last/acquire", "", capped); status != http.StatusConflict {
		t.Fatalf("a capped last request: HTTP %d %s, want 409", status, body)
	}
	if n := metric(t, hs.URL, "lease_waiters"); n != 1 {
		t.Fatalf("after a last request cut short at the server's max wait, %v waits in line; want it kept (1)", n)
	}
	const whole = `{"owner":"w","ttl_ms":60000,"wait_ms":20,"ticket":"000000000000000000000000000000aa","last":true}`
	if status, body := call(t, "POST", hs.URL+"/v1/leases/last/acquire", "", whole); status != http.StatusConflict {
		t.Fatalf("a last request that ran whole: HTTP %d %s, want 409", status, body)
	}
	eventually(t, "the wait left the line", func() bool { return metric(t, hs.URL, "lease_waiters") == 0 })
}

// TestGivenUpWaitLeavesTheLine: a wait that AcquireWait ends while its
// server may keep it in line for the grace takes its ticket out of the line
// with one more request, so the next waiter is served as soon as the key
// is free, not after the grace (a minute here) with the key granted to a
// wait nobody will take. Two ways: the answer, held at the server's max
// wait, is lost with its connection ("lost": AcquireWait fails
// ErrUnavailable); or the caller gives the wait up just as that answer is
// on its way, which the server sees only after it answered ("aborted").
func TestGivenUpWaitLeavesTheLine(t *testing.T) {
	for _, how := range []string{"lost", "aborted"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, newMem(t), leasehttp.WithMaxWait(50*time.Millisecond), leasehttp.WithWaitGrace(time.Minute))
			ctx, giveUp := context.WithCancel(ctxFor(t))
			defer giveUp()
			var cut atomic.Bool
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasSuffix(r.URL.Path, "/acquire") || !strings.Contains(peekBody(t, r), `"owner":"w"`) || !cut.CompareAndSwap(false, true) {
					srv.ServeHTTP(w, r)
					return
				}
				// The server answers held, at its max wait, and keeps the
				// wait in line for its grace.
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, r)
				if rec.Code != http.StatusConflict {
					t.Errorf("the first request's answer: HTTP %d %s, want 409", rec.Code, rec.Body)
				}
				if how == "lost" {
					if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
						conn.Close()
					}
					return
				}
				giveUp()
				<-r.Context().Done() // the client's hang-up, after the answer was decided
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				_, _ = w.Write(rec.Body.Bytes())
			}))
			t.Cleanup(hs.Close)
			c := newClient(t, hs.URL)
			holder, err := c.Acquire(ctxFor(t), "k", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.AcquireWait(ctx, "k", "w", time.Minute)
			want := lease.ErrUnavailable
			if how == "aborted" {
				want = context.Canceled
			}
			if !errors.Is(err, want) || !cut.Load() {
				t.Fatalf("AcquireWait: %v, want %v", err, want)
			}
			eventually(t, "the given-up wait left the line", func() bool { return metric(t, hs.URL, "lease_waiters") == 0 })
			if err := c.Release(ctxFor(t), holder); err != nil {
				t.Fatal(err)
			}
			next, err := c.Acquire(ctxFor(t), "k", "next", time.Minute)
			if err != nil {
				t.Fatalf("the key after its holder's release, with the given-up wait gone: %v", err)
			}
			if next.Token != holder.Token+1 {
				t.Fatalf("next got token %d, want %d: the given-up wait was granted the key meanwhile", next.Token, holder.Token+1)
			}
		})
	}
}
