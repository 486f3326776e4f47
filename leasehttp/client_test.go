package leasehttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// TestRootClientOverHTTP runs the application-side lease.Client on the HTTP
// Client: it acquires, renews in the background past several TTLs, releases,
// and, when the server goes away, cancels the Hold with ErrLost once the
// safe deadline has passed.
func TestRootClientOverHTTP(t *testing.T) {
	store := memtest.New(t)
	srv := newServer(t, store)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	hc := newClient(t, hs.URL)
	lc, err := lease.NewClient(hc, lease.WithOwner("worker-a"))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 300 * time.Millisecond
	h, err := lc.Acquire(ctxFor(t), "root/job", ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	first := h.Lease()
	// Until the backend's expiry has been moved past three TTLs after the
	// first: only renewals keep it.
	eventually(t, "renewals past 3 TTLs", func() bool {
		got, err := store.Get(ctxFor(t), "root/job")
		return err != nil || !got.Expires.Before(first.Expires.Add(2*ttl))
	})
	if err := h.Err(); err != nil {
		t.Fatalf("hold lost while the server was up: %v", err)
	}
	got, err := store.Get(ctxFor(t), "root/job")
	if err != nil || got.Token != first.Token || !got.Expires.After(first.Expires) {
		t.Fatalf("after 3 TTLs the backend has %+v, %v; want token %d renewed past %v", got, err, first.Token, first.Expires)
	}
	if err := h.Release(ctxFor(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := store.Get(ctxFor(t), "root/job"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after Release Get err = %v, want ErrNotFound", err)
	}

	// A second worker waits for the key through the server's FIFO wait.
	h2, err := lc.Acquire(ctxFor(t), "root/job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= first.Token {
		t.Fatalf("token %d after %d", h2.Token(), first.Token)
	}

	// The server goes away: renewals fail, and the Hold ends at its deadline.
	srv.Close()
	hs.Close()
	select {
	case <-h2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Hold not cancelled within 10 s of the server stopping")
	}
	if now := time.Now(); now.Before(h2.Deadline()) {
		t.Errorf("Hold cancelled at %v, before its safe deadline %v", now, h2.Deadline())
	}
	if err := h2.Err(); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Hold error = %v, want ErrLost", err)
	}
	if err := h2.Release(ctxFor(t)); !errors.Is(err, lease.ErrLost) {
		t.Errorf("Release after loss = %v, want ErrLost", err)
	}
}

// lossy serves the real server but, for the first drop requests whose path
// ends in suffix, lets the real handler act and then cuts the connection
// instead of answering: the outcome happened, the answer was lost.
type lossy struct {
	real   http.Handler
	suffix string
	drop   atomic.Int32
	calls  atomic.Int32
}

func (l *lossy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, l.suffix) {
		l.real.ServeHTTP(w, r)
		return
	}
	l.calls.Add(1)
	if l.drop.Add(-1) < 0 {
		l.real.ServeHTTP(w, r)
		return
	}
	l.real.ServeHTTP(httptest.NewRecorder(), r)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func lossyServer(t *testing.T, suffix string, drop int32) (*lossy, lease.Backend, *leasehttp.Client) {
	t.Helper()
	store := memtest.New(t)
	srv := newServer(t, store)
	l := &lossy{real: srv, suffix: suffix}
	l.drop.Store(drop)
	hs := httptest.NewServer(l)
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return l, store, newClient(t, hs.URL)
}

func TestAcquireWithLostAnswerIsNotRetried(t *testing.T) {
	l, store, c := lossyServer(t, "/acquire", 1)
	_, err := c.Acquire(ctxFor(t), "lost/acquire", "o", time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("Acquire with a lost answer: err = %v, want ErrUnavailable saying the outcome is unknown", err)
	}
	if n := l.calls.Load(); n != 1 {
		t.Fatalf("Acquire was sent %d times, want 1", n)
	}
	// It had in fact been granted; it stays until its TTL.
	if _, err := store.Get(ctxFor(t), "lost/acquire"); err != nil {
		t.Fatalf("the granted lease: %v", err)
	}
}

func TestRenewWithLostAnswerIsRetried(t *testing.T) {
	l, _, c := lossyServer(t, "/renew", 1)
	held, err := c.Acquire(ctxFor(t), "lost/renew", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Renew(ctxFor(t), held, 2*time.Minute)
	if err != nil {
		t.Fatalf("Renew with one lost answer: %v", err)
	}
	if r.Token != held.Token || r.ID != held.ID || r.TTL != 2*time.Minute {
		t.Fatalf("renewed %+v from %+v", r, held)
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("Renew was sent %d times, want 2", n)
	}
}

func TestReleaseWithLostAnswerSaysSo(t *testing.T) {
	l, store, c := lossyServer(t, "/release", 1)
	held, err := c.Acquire(ctxFor(t), "lost/release", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Release(ctxFor(t), held)
	if !errors.Is(err, lease.ErrNotHeld) || !strings.Contains(err.Error(), "may have released") {
		t.Fatalf("Release whose first answer was lost: err = %v, want ErrNotHeld saying an earlier attempt may have released it", err)
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("Release was sent %d times, want 2", n)
	}
	if _, err := store.Get(ctxFor(t), "lost/release"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("the lease is still there: %v", err)
	}
}

func TestGetWithLostAnswersIsRetried(t *testing.T) {
	_, _, c := lossyServer(t, "/lost/get", 2)
	if _, err := c.Acquire(ctxFor(t), "lost/get", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctxFor(t), "lost/get")
	if err != nil || got.Owner != "o" {
		t.Fatalf("Get with two lost answers = %+v, %v", got, err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestUnreachableServer(t *testing.T) {
	c := newClient(t, "http://"+closedPort(t))
	_, err := c.Acquire(ctxFor(t), "k", "o", time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "never reached") {
		t.Errorf("Acquire to a closed port: err = %v, want ErrUnavailable saying it never reached the server", err)
	}
	if _, err := c.Get(ctxFor(t), "k"); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("Get to a closed port: err = %v, want ErrUnavailable", err)
	}
	l := lease.Lease{Key: "k", Token: 1, ID: lease.NewID()}
	if _, err := c.Renew(ctxFor(t), l, time.Minute); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("Renew to a closed port: err = %v, want ErrUnavailable", err)
	}
	if err := c.Release(ctxFor(t), l); !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Release to a closed port: err = %v, want ErrUnavailable", err)
	}
}

// TestUnreachableServerMessage: a request that cannot reach the server
// fails with one clean line that says each thing once, and still matches
// lease.ErrUnavailable, through a lease.Client too.
func TestUnreachableServerMessage(t *testing.T) {
	addr := closedPort(t)
	c := newClient(t, "http://"+addr)
	want := `leasehttp: get "k": backend unavailable (request not sent to http://` + addr + `): dial tcp ` + addr + `: connect: connection refused`
	_, err := c.Get(ctxFor(t), "k")
	if !errors.Is(err, lease.ErrUnavailable) || err.Error() != want {
		t.Errorf("Get to a closed port: %q (ErrUnavailable: %v)\nwant %q", err, errors.Is(err, lease.ErrUnavailable), want)
	}
	lc, err := lease.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.TryAcquire(ctxFor(t), "k", time.Minute); !errors.Is(err, lease.ErrUnavailable) || strings.Count(err.Error(), "leasehttp:") != 1 || strings.Count(err.Error(), "unavailable") != 1 {
		t.Errorf("lease.Client.TryAcquire to a closed port: %q; want ErrUnavailable, saying leasehttp and unavailable once", err)
	}
}

func TestAcquireWaitEndsWithContext(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	c := newClient(t, hs.URL, leasehttp.WithWaitChunk(20*time.Millisecond))
	if _, err := c.Acquire(ctxFor(t), "chunks", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	// Several chunks, then the deadline: the server's held answer comes back.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.AcquireWait(ctx, "chunks", "w", time.Minute)
	// The server's held answer, normally; the context's error if the last
	// answer arrived after the deadline (a loaded machine).
	var he *lease.HeldError
	if !(errors.As(err, &he) && he.Owner == "holder") && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireWait until the deadline: err = %v, want a *lease.HeldError naming holder or the deadline", err)
	}
	if got, err := c.Get(ctxFor(t), "chunks"); err != nil || got.Owner != "holder" {
		t.Fatalf("after the wait the key is %+v, %v; want it still with holder", got, err)
	}
	if got := metric(t, hs.URL, `lease_acquisitions_total{result="held"}`); got < 3 {
		t.Errorf("only %v held answers: the wait was not sent in chunks", got)
	}
}

func TestOddKeysTravelIntact(t *testing.T) {
	store := memtest.New(t)
	_, hs := startServer(t, store)
	c := newClient(t, hs.URL)
	for _, k := range []string{".", "..", "a/../b", "a//b", "/", "./x", "%2F", "100%", "sp ace", "q?x=1#f", "+plus+", "ü/🔒"} {
		l, err := c.Acquire(ctxFor(t), k, "o", time.Minute)
		if err != nil {
			t.Errorf("Acquire(%q): %v", k, err)
			continue
		}
		if l.Key != k {
			t.Errorf("Acquire(%q) returned key %q", k, l.Key)
		}
		if got, err := store.Get(ctxFor(t), k); err != nil || got.Key != k {
			t.Errorf("backend Get(%q) = %+v, %v", k, got, err)
		}
		if got, err := c.Get(ctxFor(t), k); err != nil || got.Key != k {
			t.Errorf("Get(%q) = %+v, %v", k, got, err)
		}
		if ls, err := c.List(ctxFor(t), k, lease.Page{}); err != nil || len(ls.Leases) == 0 || ls.Leases[0].Key != k {
			t.Errorf("List(%q) = %+v, %v", k, ls, err)
		}
		if err := c.Release(ctxFor(t), l); err != nil {
			t.Errorf("Release(%q): %v", k, err)
		}
	}
}

func TestNewClientValidates(t *testing.T) {
	for _, u := range []string{"", "localhost:7420", "ftp://h", "http://", "http://h/?q=1", "http://h/#f", "http://u:p@h", "http://h/%zz"} {
		if _, err := leasehttp.NewClient(u); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("NewClient(%q): err = %v, want ErrInvalid", u, err)
		}
	}
	for name, o := range map[string]leasehttp.ClientOption{
		"empty token":      leasehttp.WithAuthToken(""),
		"token with space": leasehttp.WithAuthToken("a b"),
		"nil http client":  leasehttp.WithHTTPClient(nil),
		"zero timeout":     leasehttp.WithTimeout(0),
		"tiny wait chunk":  leasehttp.WithWaitChunk(time.Millisecond),
	} {
		if _, err := leasehttp.NewClient("http://127.0.0.1:1", o); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	c, err := leasehttp.NewClient("https://lease.example:7420/base/")
	if err != nil {
		t.Fatalf("NewClient with a path prefix: %v", err)
	}
	c.Close()
}

// TestClientUnderPathPrefix serves the API under /lease/ behind a proxy-like
// StripPrefix and reaches it with a base URL that has the path.
func TestClientUnderPathPrefix(t *testing.T) {
	srv := newServer(t, newMem(t))
	mux := http.NewServeMux()
	mux.Handle("/lease/", http.StripPrefix("/lease", srv))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	c := newClient(t, hs.URL+"/lease/")
	l, err := c.Acquire(ctxFor(t), "a/b", "o", time.Minute)
	if err != nil {
		t.Fatalf("Acquire under a path prefix: %v", err)
	}
	if err := c.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
}

func TestTTLRoundedUpToMillis(t *testing.T) {
	store := memtest.New(t)
	_, hs := startServer(t, store)
	c := newClient(t, hs.URL)
	l, err := c.Acquire(ctxFor(t), "round", "o", 10*time.Millisecond+time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL != 11*time.Millisecond {
		t.Fatalf("TTL %v, want 11ms (rounded up, never down)", l.TTL)
	}
}

// TestClientReusesConnections: many goroutines sharing one Client keep
// their connections. With net/http's default of 2 idle connections per host
// most requests would dial anew, and a body not read to EOF would cost its
// connection too.
func TestClientReusesConnections(t *testing.T) {
	srv := newServer(t, newMem(t))
	var dialed atomic.Int64
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	c := newClient(t, hs.URL)
	const clients, pairs = 32, 20
	errs := make(chan error, clients)
	for w := range clients {
		go func() {
			key := fmt.Sprintf("reuse/%d", w)
			for range pairs {
				l, err := c.Acquire(ctxFor(t), key, "o", time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if err := c.Release(ctxFor(t), l); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// One connection per goroutine is the need; allow the transport a dial
	// that loses a race for each, but not one per request.
	if n := dialed.Load(); n > 2*clients {
		t.Errorf("%d connections for %d goroutines doing %d requests each", n, clients, 2*pairs)
	}
}

// noWaitServer serves store with waiting turned off (WithMaxWait(0)), as a
// server configured so, or one that is closing, answers a wait_ms acquire:
// at once. It counts the acquire requests.
func noWaitServer(t *testing.T, store lease.Backend) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	srv := newServer(t, store, leasehttp.WithMaxWait(0))
	acquires := new(atomic.Int64)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			acquires.Add(1)
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return hs, acquires
}

// TestAcquireWaitBacksOffWhenServerDoesNotWait: when the server answers a
// wait_ms acquire of a held key at once, AcquireWait must pace its requests
// instead of sending them back to back until its context ends.
func TestAcquireWaitBacksOffWhenServerDoesNotWait(t *testing.T) {
	store := memtest.New(t)
	hs, acquires := noWaitServer(t, store)
	if _, err := store.Acquire(ctxFor(t), "nowait", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, hs.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(500*time.Millisecond, cancel)
	defer stop.Stop()
	_, err := c.AcquireWait(ctx, "nowait", "w", time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait of a held key until cancelled: err = %v, want context.Canceled", err)
	}
	// Backing off up to 500 ms asks about 8 times in 500 ms; requests back
	// to back ask hundreds of times.
	if n := acquires.Load(); n > 25 {
		t.Errorf("AcquireWait sent %d acquires in 500 ms to a server that does not wait: busy polling", n)
	}
}

// TestAcquireWaitKeepsWaitingWhenServerDoesNotWait: a context with a
// deadline still means "wait until then", also when the server answers at
// once: a release before the deadline must be seen.
func TestAcquireWaitKeepsWaitingWhenServerDoesNotWait(t *testing.T) {
	store := memtest.New(t)
	hs, _ := noWaitServer(t, store)
	held, err := store.Acquire(ctxFor(t), "nowait", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, hs.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := acquireWaitAsync(ctx, c, "nowait", "w", time.Minute)
	select {
	case r := <-done:
		t.Fatalf("AcquireWait with 5 s left returned at once: %+v, %v", r.l, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := store.Release(ctxFor(t), held); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.l.Owner != "w" {
		t.Fatalf("AcquireWait after the holder released: %+v, %v; want the lease", r.l, r.err)
	}
}

// TestAcquireWaitOutlivesSlowCappedAnswers: a server whose max wait is
// shorter than the client's last chunk cuts each wait short, and on a
// loaded host (or a long way off) its answer comes back later than the
// client's 500 ms "the server did not wait" mark. That answer is not the
// end of the wait: AcquireWait must ask again until ctx's deadline and
// take the lease released meanwhile, not give up with the holder's error
// after the first answer (as it once did, failing the semaphore's
// dead-head check through a loaded server with a 30 ms cap).
func TestAcquireWaitOutlivesSlowCappedAnswers(t *testing.T) {
	// In a bubble, through handlerTransport: the slow way is slow on the
	// bubble's clock, which the client's pacing reads too.
	synctest.Test(t, func(t *testing.T) {
		const slow = 600 * time.Millisecond // more than the client's pollMax
		srv := newServer(t, newMem(t), leasehttp.WithMaxWait(30*time.Millisecond))
		var answered atomic.Int64
		proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/acquire") {
				time.Sleep(slow)
				defer answered.Add(1)
			}
			srv.ServeHTTP(w, r)
		})
		c := newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(&http.Client{Transport: handlerTransport{proxy}}))
		held, err := c.Acquire(ctxFor(t), "slowcap", "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		base := answered.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := acquireWaitAsync(ctx, c, "slowcap", "w", time.Minute)
		eventually(t, "the first capped answer", func() bool { return answered.Load() > base })
		if err := c.Release(ctxFor(t), held); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.l.Owner != "w" {
			left, _ := ctx.Deadline()
			t.Fatalf("AcquireWait with %v left after a slow capped answer: %+v, %v; want the lease released meanwhile", time.Until(left).Round(time.Second), r.l, r.err)
		}
	})
}

// handlerTransport serves each request with h in the caller's goroutine,
// with no socket between them, so that a synctest bubble holds the whole
// exchange (a bubble cannot wait on a real connection).
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err // the caller gave up: the answer never reaches it
	}
	return rec.Result(), nil
}

// TestAcquireWaitCancelledInFlightSaysOutcomeUnknown: the server grants the
// lease, and the caller cancels before the answer arrives. The lease may
// well be held now (here it is). The caller is not kept waiting for an
// answer that may never come: the error is its context's at once, and says
// that the wait ends in the background, where a grant is given back or,
// with no answer, expires after its TTL.
func TestAcquireWaitCancelledInFlightSaysOutcomeUnknown(t *testing.T) {
	store := memtest.New(t)
	srv := newServer(t, store)
	granted := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/acquire") {
			srv.ServeHTTP(w, r)
			return
		}
		// The server acts; its answer is still on the way when the caller
		// gives up.
		srv.ServeHTTP(httptest.NewRecorder(), r)
		close(granted)
		<-r.Context().Done()
	}))
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	c := newClient(t, hs.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-granted
		cancel()
	}()
	_, err := c.AcquireWait(ctx, "inflight", "w", time.Minute)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "expires after its TTL") {
		t.Fatalf("AcquireWait cancelled with the request in flight: err = %v, want context.Canceled saying a grant without an answer expires after its TTL", err)
	}
	if _, err := store.Get(ctxFor(t), "inflight"); err != nil {
		t.Fatalf("the lease granted in flight: %v", err)
	}
}

// TestBare404IsNotNotFound: a 404 without the API's error body comes from
// something else at that URL (a proxy, a wrong path prefix), not from a
// lease server saying the key is free. Get must not turn it into
// lease.ErrNotFound, which would tell the caller nobody holds the key.
func TestBare404IsNotNotFound(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(hs.Close)
	c := newClient(t, hs.URL+"/wrong-prefix")
	_, err := c.Get(ctxFor(t), "k")
	if err == nil || errors.Is(err, lease.ErrNotFound) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Get answered by a bare 404: err = %v, want an error naming HTTP 404 that does not match ErrNotFound", err)
	}
	// The server's own 404 for a free key still is ErrNotFound.
	_, real := startServer(t, newMem(t))
	if _, err := newClient(t, real.URL).Get(ctxFor(t), "free"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of a free key: err = %v, want ErrNotFound", err)
	}
}

// TestBareStatusesMapAsTheTableSays: an error answer without the API's
// body (a proxy's page) is judged by its status alone, as the TypeScript
// and Python clients judge it: the statuses the error table gives code
// invalid (DESIGN.md: 400, 405, 408, 413, 415) match lease.ErrInvalid.
func TestBareStatusesMapAsTheTableSays(t *testing.T) {
	for status, want := range map[int]error{
		400: lease.ErrInvalid, 405: lease.ErrInvalid, 408: lease.ErrInvalid, 413: lease.ErrInvalid, 415: lease.ErrInvalid,
		401: leasehttp.ErrUnauthorized, 403: leasehttp.ErrForbidden, 502: lease.ErrUnavailable,
	} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "<html>a proxy's page</html>")
		}))
		_, err := newClient(t, hs.URL, leasehttp.WithTimeout(time.Second)).Get(ctxFor(t), "k")
		hs.Close()
		if !errors.Is(err, want) {
			t.Errorf("a bare HTTP %d: err = %v, want it to match %v", status, err, want)
		}
	}
}

// TestClientRefusesAnAnswerForAnotherLease: an answer to acquire, renew or
// get whose lease is on another key (or, to a renew, of another token) is
// a malformed answer (lease.ErrUnavailable), as the TypeScript and Python
// clients take it and as RenewBatch's reader takes such a result: a Hold on
// key k must never carry another key's token, which fences nothing of k.
func TestClientRefusesAnAnswerForAnotherLease(t *testing.T) {
	const exp = `"expires_at":"2026-12-02T10:00:00.000Z"`
	id := lease.NewID()
	answer := func(key string, token int) string {
		return fmt.Sprintf(`{"key":%q,"owner":"o","token":%d,"id":%q,"ttl_ms":60000,%s}`, key, token, id.Reveal(), exp)
	}
	mine := lease.Lease{Key: "k", Owner: "o", Token: 7, ID: id}
	for _, tc := range []struct {
		name, body string
		call       func(c *leasehttp.Client) (lease.Lease, error)
		ok         bool
	}{
		{"acquire", answer("k", 7), func(c *leasehttp.Client) (lease.Lease, error) {
			return c.Acquire(ctxFor(t), "k", "o", time.Minute)
		}, true},
		{"acquire answered for another key", answer("other", 7), func(c *leasehttp.Client) (lease.Lease, error) {
			return c.Acquire(ctxFor(t), "k", "o", time.Minute)
		}, false},
		{"renew answered for another key", answer("other", 7), func(c *leasehttp.Client) (lease.Lease, error) {
			return c.Renew(ctxFor(t), mine, time.Minute)
		}, false},
		{"renew answered for another token", answer("k", 8), func(c *leasehttp.Client) (lease.Lease, error) {
			return c.Renew(ctxFor(t), mine, time.Minute)
		}, false},
		{"get answered for another key", answer("other", 7), func(c *leasehttp.Client) (lease.Lease, error) {
			return c.Get(ctxFor(t), "k")
		}, false},
	} {
		checkLeaseAnswer(t, tc.name, tc.body, tc.ok, tc.call)
	}
}

// checkLeaseAnswer serves body as the answer to every request and checks
// what call makes of it: the lease k, token 7 if ok, else a malformed
// answer (lease.ErrUnavailable).
func checkLeaseAnswer(t *testing.T, what, body string, ok bool, call func(c *leasehttp.Client) (lease.Lease, error)) {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	defer hs.Close()
	l, err := call(newClient(t, hs.URL))
	switch {
	case ok && (err != nil || l.Key != "k" || l.Token != 7):
		t.Errorf("%s: got %+v, %v; want the lease k, token 7", what, l, err)
	case !ok && (!errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "malformed answer")):
		t.Errorf("%s: got %+v, %v; want a malformed answer", what, l, err)
	}
}

// TestClientReadsAnswersOneWay: the client reads an answer with the wire
// codec alone. A member it does not know (a newer server's) is skipped; a
// member repeated, named in another case, or null is a malformed answer
// (lease.ErrUnavailable), where encoding/json would have read it its own
// way: the last of two keys, "KEY" as the key.
func TestClientReadsAnswersOneWay(t *testing.T) {
	const exp = `"expires_at":"2026-12-02T10:00:00.000Z"`
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"key":"k","owner":"o","token":7,` + exp + `}`, true},
		{`{"key":"k","owner":"o","token":7,` + exp + `,"region":{"name":"eu","zones":[1,2]}}`, true},
		{`{"key":"k","key":"other","owner":"o","token":7,` + exp + `}`, false},
		{`{"key":"k","KEY":"other","owner":"o","token":7,` + exp + `}`, false},
		{`{"key":"k","owner":"o","Token":8,"token":7,` + exp + `}`, false},
		{`{"key":"k","owner":null,"token":7,` + exp + `}`, false},
	} {
		checkLeaseAnswer(t, tc.body, tc.body, tc.ok, func(c *leasehttp.Client) (lease.Lease, error) { return c.Get(ctxFor(t), "k") })
	}
}
