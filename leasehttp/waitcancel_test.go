package leasehttp_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// answerGate holds back the server's first answer to an acquire: it tells
// the status on answering and writes it only once proceed is closed. The
// server has decided by then (granted and checked that its client is
// still there), so the test can make the client give up while the answer
// is on its way, as a busy machine sometimes does.
type answerGate struct {
	next      http.Handler
	answering chan int
	proceed   chan struct{}
	once      sync.Once // the first acquire is gated
	opened    sync.Once
}

// open lets the held-back answer go.
func (g *answerGate) open() { g.opened.Do(func() { close(g.proceed) }) }

func newAnswerGate(next http.Handler) *answerGate {
	return &answerGate{next: next, answering: make(chan int, 1), proceed: make(chan struct{})}
}

func (g *answerGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gated := false
	if strings.HasSuffix(r.URL.Path, "/acquire") {
		g.once.Do(func() { gated = true })
	}
	if gated {
		w = &gatedWriter{ResponseWriter: w, g: g}
	}
	g.next.ServeHTTP(w, r)
}

type gatedWriter struct {
	http.ResponseWriter
	g    *answerGate
	sent bool
}

func (w *gatedWriter) WriteHeader(code int) {
	if !w.sent {
		w.sent = true
		w.g.answering <- code
		<-w.g.proceed
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *gatedWriter) Write(b []byte) (int, error) {
	if !w.sent {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *gatedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hangUps is an HTTP client whose connections say when the client hangs
// up on them: closes them, or shuts down its side of them.
func hangUps() (*http.Client, <-chan string) {
	hung := make(chan string, 16)
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &watchedConn{TCPConn: c.(*net.TCPConn), hung: hung}, nil
	}}
	return &http.Client{Transport: tr}, hung
}

type watchedConn struct {
	*net.TCPConn
	hung chan<- string
	once sync.Once
}

func (c *watchedConn) tell(how string) { c.once.Do(func() { c.hung <- how }) }

func (c *watchedConn) Close() error {
	c.tell("close")
	return c.TCPConn.Close()
}

func (c *watchedConn) CloseWrite() error {
	c.tell("close write")
	return c.TCPConn.CloseWrite()
}

// TestWaitGrantedAsTheWaiterLeaves is the race of a release that hands the
// key to a waiter whose caller gives up at that moment: the server grants
// the lease and answers while the client, its context ended, hangs up.
// Whoever learns of the grant must give it back, so the key is free at
// once for the next acquirer instead of held by nobody until its TTL; and
// the caller, whose wait ended, is told so and holds nothing.
func TestWaitGrantedAsTheWaiterLeaves(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			srv := newServer(t, b)
			gate := newAnswerGate(srv)
			hs := httptest.NewServer(gate)
			t.Cleanup(func() {
				gate.open() // if the test did not get that far
				srv.Close()
				hs.Close()
			})
			hc, hung := hangUps()
			waiter := newClient(t, hs.URL, leasehttp.WithHTTPClient(hc))
			t.Cleanup(hc.CloseIdleConnections)
			other := newClient(t, hs.URL)

			holder, err := b.Acquire(ctxFor(t), "k", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctxFor(t))
			defer cancel()
			done := acquireWaitAsync(ctx, waiter, "k", "waiter", time.Minute)
			eventually(t, "a waiter", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
			// The release passes through the server, which hands the key to
			// the waiter and starts to answer it.
			if err := other.Release(ctxFor(t), holder); err != nil {
				t.Fatal(err)
			}
			if code := <-gate.answering; code != http.StatusOK {
				t.Fatalf("the waiter was answered HTTP %d after the release, want 200", code)
			}
			// Its caller gives up now, while the answer is on its way.
			cancel()
			how := <-hung
			t.Logf("the client hung up: %s", how)
			gate.open()

			r := <-done
			if r.err == nil {
				t.Fatalf("AcquireWait whose context ended returned the lease %+v; its caller stopped waiting", r.l)
			}
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("AcquireWait whose context ended: %v, want context.Canceled", r.err)
			}
			// The caller is not kept waiting for the answer: the lease is
			// given back in the background, soon.
			eventually(t, "the grant given back", func() bool {
				_, err := b.Get(ctxFor(t), "k")
				return errors.Is(err, lease.ErrNotFound)
			})
			if _, err := other.Acquire(ctxFor(t), "k", "next", time.Minute); err != nil {
				t.Fatalf("the next acquirer: %v", err)
			}
		})
	}
}

// TestWaitCancelledHearsTheOutcome: a waiter whose caller gives up while
// the key is still held learns from the server that it holds nothing; the
// error is its context's, not an outcome unknown.
func TestWaitCancelledHearsTheOutcome(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			_, hs := startServer(t, b)
			hc, hung := hangUps()
			waiter := newClient(t, hs.URL, leasehttp.WithHTTPClient(hc))
			t.Cleanup(hc.CloseIdleConnections)
			holder, err := b.Acquire(ctxFor(t), "k", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctxFor(t))
			done := make(chan error, 1)
			go func() {
				_, err := waiter.AcquireWait(ctx, "k", "waiter", time.Minute)
				done <- err
			}()
			eventually(t, "a waiter", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
			cancel()
			err = <-done
			t.Logf("the client hung up: %s", <-hung)
			if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("AcquireWait cancelled while the key was held: %v, want context.Canceled and not ErrUnavailable (the server said it holds nothing)", err)
			}
			if l, err := b.Get(ctxFor(t), "k"); err != nil || l.Token != holder.Token {
				t.Fatalf("the key after the waiter left: %+v, %v; want the holder's", l, err)
			}
		})
	}
}

// TestHalfCloseEndsTheWait is the protocol under Client.AcquireWait's
// cancel, as any client can use it: a waiting acquire whose client shuts
// down its side of the connection is answered 499, with a message that
// says the wait ended because the client left (not that the backend
// failed), and the waiter is gone from the queue.
func TestHalfCloseEndsTheWait(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			_, hs := startServer(t, b)
			if _, err := b.Acquire(ctxFor(t), "k", "holder", time.Minute); err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := `{"owner":"w","ttl_ms":60000,"wait_ms":60000}`
			req := "POST /v1/leases/k/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
				"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a waiter", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
			if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer after the half-close: %v", err)
			}
			defer resp.Body.Close()
			msg, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 499 || !strings.Contains(string(msg), "client went away") {
				t.Fatalf("answer to a wait whose client half-closed: HTTP %d %s; want 499 saying the client went away", resp.StatusCode, msg)
			}
			eventually(t, "the waiter gone", func() bool { return metric(t, hs.URL, "lease_waiters") == 0 })
		})
	}
}
