package leasehttp_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backendOnly hides every optional ability of the backend it wraps (here
// memstore's WaitAcquirer), so the server must queue waiters itself, as it
// does for pgstore and redisstore.
type backendOnly struct{ lease.Backend }

// quiet is a logger for tests that do not look at logs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer serves b over a loopback httptest server until the test ends,
// checked against openapi.json (newServer).
func startServer(t *testing.T, b lease.Backend, opts ...leasehttp.ServerOption) (*checkedServer, *httptest.Server) {
	t.Helper()
	srv := newServer(t, b, opts...)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return srv, hs
}

func newClient(t *testing.T, url string, opts ...leasehttp.ClientOption) *leasehttp.Client {
	t.Helper()
	c, err := leasehttp.NewClient(url, opts...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// call sends a raw request and returns status and body.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	return callHeader(t, method, url, auth, body)
}

// callHeader is call with the Authorization header given whole.
func callHeader(t *testing.T, method, url, auth, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxFor(t), method, url, rd)
	if err != nil {
		t.Fatalf("NewRequest %s %s: %v", method, url, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	return resp.StatusCode, string(b)
}

func newMem(tb testing.TB) lease.Backend { return memtest.New(tb) }

func newHTTPServer(h http.Handler) *httptest.Server { return httptest.NewServer(h) }

// waited is what an AcquireWait in the background came to.
type waited struct {
	l   lease.Lease
	err error
}

// acquireWaitAsync runs c.AcquireWait in the background; its outcome
// comes on the channel.
func acquireWaitAsync(ctx context.Context, c *leasehttp.Client, key, owner string, ttl time.Duration) <-chan waited {
	done := make(chan waited, 1)
	go func() {
		l, err := c.AcquireWait(ctx, key, owner, ttl)
		done <- waited{l, err}
	}()
	return done
}

// pipeListener is a net.Listener whose connections are net.Pipe pairs, for
// tests in a synctest bubble: a real socket is outside the bubble, and a
// pipe's deadlines run on the bubble's clock, as an http.Server sets them.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial hands the listener one end of a new pipe and returns the other.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// servePipes serves h with hs (its Handler set to h) on a new
// pipeListener until the test ends.
func servePipes(t *testing.T, h http.Handler, hs *http.Server) *pipeListener {
	l := newPipeListener()
	hs.Handler = h
	served := make(chan error, 1)
	go func() { served <- hs.Serve(l) }()
	t.Cleanup(func() {
		_ = hs.Close()
		<-served
	})
	return l
}

// client is an http.Client whose every connection is a pipe to l.
func (l *pipeListener) client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: l.dial}}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "127.0.0.1:80" }
