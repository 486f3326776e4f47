package leasehttp_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// replica is one of several servers in front of one backend, as lease
// serve replicas over one etcd cluster are. It counts the requests it
// gets, and can be told to answer the next ones with 503 or to act and
// then lose the answer (the connection cut, as a replica killed after its
// backend applied the request).
type replica struct {
	srv     http.Handler
	url     string
	calls   atomic.Int32
	refuse  atomic.Int32 // answer this many more requests 503, untouched
	lose    atomic.Int32 // act on this many more requests, then cut the connection
	hang    atomic.Int32 // take this many more requests and never answer them
	slow    atomic.Int64 // answer each request only after this many nanoseconds
	refused atomic.Int32
}

func (r *replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.calls.Add(1)
	if r.refuse.Add(-1) >= 0 {
		r.refused.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"replica: backend unreachable"}}`))
		return
	}
	if d := time.Duration(r.slow.Load()); d > 0 {
		// real time: the delay stands for a server slow to answer, against
		// the Client's real-time timers.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-req.Context().Done():
		}
		t.Stop()
	}
	if r.hang.Add(-1) >= 0 {
		_, _ = io.Copy(io.Discard, req.Body) // so that net/http sees the client hang up
		<-req.Context().Done()               // until the client gives up
		return
	}
	if r.lose.Add(-1) >= 0 {
		r.srv.ServeHTTP(httptest.NewRecorder(), req)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	r.srv.ServeHTTP(w, req)
}

// replicas starts n servers over one memstore.
func replicas(t *testing.T, n int) ([]*replica, lease.Backend) {
	t.Helper()
	store := memtest.New(t)
	var rs []*replica
	for range n {
		r := &replica{srv: newServer(t, store)}
		hs := httptest.NewServer(r)
		t.Cleanup(hs.Close)
		r.url = hs.URL
		rs = append(rs, r)
	}
	return rs, store
}

// deadURL is the URL of a loopback port nothing listens on: connecting to
// it is refused, so a request to it provably never leaves.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func calls(rs ...*replica) []int32 {
	var out []int32
	for _, r := range rs {
		out = append(out, r.calls.Load())
	}
	return out
}

func TestNewClientSeveralEndpoints(t *testing.T) {
	c, err := leasehttp.NewClient("http://a:7420/,https://b:7420/base,http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := []string{"http://a:7420", "https://b:7420/base", "http://127.0.0.1:1"}
	if got := c.Endpoints(); !slices.Equal(got, want) {
		t.Errorf("Endpoints() = %q, want %q", got, want)
	}
	for _, u := range []string{"http://a,", ",http://a", "http://a,,http://b", "http://a, ", "http://a,localhost:7420",
		"http://a,ftp://b", "http://a,http://b/?q=1", "http://a:1,http://a:1/"} {
		if _, err := leasehttp.NewClient(u); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("NewClient(%q): err = %v, want ErrInvalid", u, err)
		}
	}
}

// TestClientMovesOnFromUnreachableEndpoint: a request that cannot connect
// never left, so every call, Acquire included, goes on to the next
// endpoint; and then stays there (sticky) rather than trying the dead one
// first every time.
func TestClientMovesOnFromUnreachableEndpoint(t *testing.T) {
	rs, store := replicas(t, 1)
	c := newClient(t, deadURL(t)+","+rs[0].url)
	l, err := c.Acquire(ctxFor(t), "multi/dial", "o", time.Minute)
	if err != nil {
		t.Fatalf("Acquire with the first endpoint down: %v", err)
	}
	if got, err := store.Get(ctxFor(t), "multi/dial"); err != nil || got.Token != l.Token {
		t.Fatalf("the backend has %+v, %v; want token %d", got, err, l.Token)
	}
	// Every later call goes straight to the endpoint that worked: a dead
	// first endpoint tried each time would cost a refused dial per call,
	// invisible here, but a 503 one would not (next test). Count instead
	// that each call reaches the live one exactly once.
	before := rs[0].calls.Load()
	if _, err := c.Renew(ctxFor(t), l, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctxFor(t), "multi/dial"); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	if n := rs[0].calls.Load() - before; n != 3 {
		t.Errorf("3 calls reached the live endpoint %d times", n)
	}
}

// TestClientIsStickyAndRotatesOn503: requests go to one endpoint until it
// answers 503, then to the next, and stay there.
func TestClientIsStickyAndRotatesOn503(t *testing.T) {
	rs, _ := replicas(t, 3)
	c := newClient(t, rs[0].url+","+rs[1].url+","+rs[2].url)
	for range 3 {
		if _, err := c.Get(ctxFor(t), "multi/none"); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
	}
	if got := calls(rs...); !slices.Equal(got, []int32{3, 0, 0}) {
		t.Fatalf("3 Gets reached the replicas %v times, want [3 0 0]", got)
	}
	rs[0].refuse.Store(1)
	if _, err := c.Get(ctxFor(t), "multi/none"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get with the first replica answering 503: %v", err)
	}
	for range 2 {
		if _, err := c.Get(ctxFor(t), "multi/none"); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
	}
	if got := calls(rs...); !slices.Equal(got, []int32{4, 3, 0}) {
		t.Fatalf("after a 503 from the first, 3 more Gets reached the replicas %v times in all, want [4 3 0]", got)
	}
	// The last endpoint's failure wraps around to the first.
	rs[1].refuse.Store(1)
	rs[2].refuse.Store(1)
	if _, err := c.Get(ctxFor(t), "multi/none"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get with two replicas answering 503: %v", err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{5, 4, 1}) {
		t.Fatalf("replica calls %v, want [5 4 1]", got)
	}
}

// TestAcquireIsNotRetriedElsewhereAfter503: a 503 may come from a backend
// call whose outcome is unknown, so Acquire surfaces it rather than asking
// another replica; the next call starts on the next replica.
func TestAcquireIsNotRetriedElsewhereAfter503(t *testing.T) {
	rs, _ := replicas(t, 2)
	c := newClient(t, rs[0].url+","+rs[1].url)
	rs[0].refuse.Store(1)
	_, err := c.Acquire(ctxFor(t), "multi/503", "o", time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Acquire answered 503: err = %v, want ErrUnavailable", err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{1, 0}) {
		t.Fatalf("Acquire answered 503 was sent %v times, want [1 0]: never again elsewhere", got)
	}
	if _, err := c.Acquire(ctxFor(t), "multi/503", "o", time.Minute); err != nil {
		t.Fatalf("the next Acquire: %v", err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{1, 1}) {
		t.Fatalf("the next Acquire went to %v, want the second replica", got)
	}
}

// TestAcquireWithLostAnswerIsNotRetriedElsewhere: the first replica
// grants the lease and dies before answering; asking the second would make
// a second grant attempt the caller does not know about.
func TestAcquireWithLostAnswerIsNotRetriedElsewhere(t *testing.T) {
	rs, store := replicas(t, 2)
	c := newClient(t, rs[0].url+","+rs[1].url)
	rs[0].lose.Store(1)
	_, err := c.Acquire(ctxFor(t), "multi/lost", "o", time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("Acquire with a lost answer: err = %v, want ErrUnavailable saying the outcome is unknown", err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{1, 0}) {
		t.Fatalf("Acquire with a lost answer was sent %v times, want [1 0]", got)
	}
	if _, err := store.Get(ctxFor(t), "multi/lost"); err != nil {
		t.Fatalf("the lease granted before the answer was lost: %v", err)
	}
}

// TestIdempotentCallsMoveOnAfterLostAnswer: Renew, Get and Release whose
// answer is lost on one replica are sent to the next, which serves the
// same backend.
func TestIdempotentCallsMoveOnAfterLostAnswer(t *testing.T) {
	rs, store := replicas(t, 2)
	c := newClient(t, rs[0].url+","+rs[1].url)
	l, err := c.Acquire(ctxFor(t), "multi/idem", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rs[0].lose.Store(1)
	r, err := c.Renew(ctxFor(t), l, 2*time.Minute)
	if err != nil || r.Token != l.Token || r.TTL != 2*time.Minute {
		t.Fatalf("Renew whose first answer was lost: %+v, %v", r, err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{2, 1}) {
		t.Fatalf("replica calls %v, want [2 1]: acquire and the lost renew on the first, the renew again on the second", got)
	}
	rs[1].lose.Store(1)
	err = c.Release(ctxFor(t), l)
	if !errors.Is(err, lease.ErrNotHeld) || !strings.Contains(err.Error(), "may have released") {
		t.Fatalf("Release whose first answer was lost: err = %v, want ErrNotHeld saying an earlier attempt may have released it", err)
	}
	if _, err := store.Get(ctxFor(t), "multi/idem"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after Release the backend has %v", err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{3, 2}) {
		t.Fatalf("replica calls %v, want [3 2]", got)
	}
	// A lost answer to a GET may also be retried by net/http itself, on
	// the same replica: lose one answer on each.
	rs[0].lose.Store(1)
	rs[1].lose.Store(1)
	if _, err := c.Get(ctxFor(t), "multi/idem"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get whose answers were lost on both replicas: %v, want ErrNotFound", err)
	}
}

// TestRenewalMovesOnFromAReplicaThatNeverAnswers: a renewal a replica
// takes and never answers (one cut from etcd by a link that drops
// everything) is sent to the next replica too after a third of the TTL,
// not after the Client's whole timeout (10 s): a holder renews a third of
// its TTL after its last renewal, and with the whole timeout its lease was
// lost though the next replica could renew it.
func TestRenewalMovesOnFromAReplicaThatNeverAnswers(t *testing.T) {
	const ttl = 3 * time.Second
	rs, _ := replicas(t, 2)
	for _, tc := range []struct {
		name  string
		renew func(c *leasehttp.Client, l lease.Lease) (lease.Lease, error)
	}{
		{"Renew", func(c *leasehttp.Client, l lease.Lease) (lease.Lease, error) { return c.Renew(ctxFor(t), l, ttl) }},
		{"RenewBatch", func(c *leasehttp.Client, l lease.Lease) (lease.Lease, error) {
			res, err := c.RenewBatch(ctxFor(t), []lease.Renewal{{Lease: l, TTL: ttl}})
			if err != nil {
				return lease.Lease{}, err
			}
			return res[0].Lease, res[0].Err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, rs[0].url+","+rs[1].url)
			l, err := c.Acquire(ctxFor(t), "multi/hang/"+tc.name, "o", ttl)
			if err != nil {
				t.Fatal(err)
			}
			rs[0].hang.Store(1) // the replica the client is on
			sent := time.Now()
			r, err := tc.renew(c, l)
			took := time.Since(sent)
			if err != nil || r.Token != l.Token {
				t.Fatalf("%s with the first replica hanging: %+v, %v", tc.name, r, err)
			}
			if took > ttl/2 {
				t.Errorf("%s with the first replica hanging took %v; want it renewed through the second within half the TTL %v, with time to spare", tc.name, took.Round(time.Millisecond), ttl)
			}
		})
	}
}

// TestSlowRenewalStillCounts: with every replica slow to answer (half the
// TTL, as over an etcd slow to commit), a renewal is asked of the next
// replica too after a third of the TTL, but the first, still under way,
// is answered in time and renews the lease: it is not cut at a third of
// the TTL, which would lose leases that slow servers still renew.
func TestSlowRenewalStillCounts(t *testing.T) {
	const ttl = 3 * time.Second
	rs, _ := replicas(t, 2)
	c := newClient(t, rs[0].url+","+rs[1].url)
	l, err := c.Acquire(ctxFor(t), "multi/slow", "o", ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		r.slow.Store(int64(ttl / 2))
	}
	sent := time.Now()
	r, err := c.Renew(ctxFor(t), l, ttl)
	if err != nil || r.Token != l.Token {
		t.Fatalf("Renew with every replica answering after %v: %+v, %v", ttl/2, r, err)
	}
	if took := time.Since(sent); took > 2*ttl/3 {
		t.Errorf("Renew with every replica answering after %v took %v, past two thirds of the TTL", ttl/2, took.Round(time.Millisecond))
	}
}

// TestAllEndpointsDown: every endpoint refuses connections; Acquire fails
// saying it never reached a server, after trying each endpoint in each
// round.
func TestAllEndpointsDown(t *testing.T) {
	c := newClient(t, deadURL(t)+","+deadURL(t))
	_, err := c.Acquire(ctxFor(t), "k", "o", time.Minute)
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "never reached") {
		t.Fatalf("Acquire with every endpoint down: err = %v, want ErrUnavailable saying it never reached the server", err)
	}
}

// syncedKinds reads c's Watch of prefix up to its synced event and returns
// the kinds of the events it gave; an error fails t, saying what the watch
// was.
func syncedKinds(t *testing.T, c *leasehttp.Client, prefix, what string) []lease.EventKind {
	t.Helper()
	var kinds []lease.EventKind
	for ev, err := range c.Watch(ctxFor(t), prefix) {
		if err != nil {
			t.Fatalf("Watch %s: %v", what, err)
		}
		kinds = append(kinds, ev.Kind)
		if ev.Kind == lease.Synced {
			break
		}
	}
	return kinds
}

// TestWatchStartsOnTheNextEndpoint: a Watch whose endpoint cannot be
// reached opens its stream on the next one.
func TestWatchStartsOnTheNextEndpoint(t *testing.T) {
	rs, store := replicas(t, 1)
	if _, err := store.Acquire(ctxFor(t), "w/a", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	kinds := syncedKinds(t, newClient(t, deadURL(t)+","+rs[0].url), "w/", "with the first endpoint down")
	if !slices.Equal(kinds, []lease.EventKind{lease.Held, lease.Synced}) {
		t.Fatalf("Watch gave %v, want held, synced", kinds)
	}
	// A 503 moves the next Watch on as well.
	rs2, _ := replicas(t, 2)
	rs2[0].refuse.Store(1)
	c2 := newClient(t, rs2[0].url+","+rs2[1].url)
	for ev, err := range c2.Watch(ctxFor(t), "w/") {
		if err != nil {
			t.Fatalf("Watch with the first replica answering 503: %v", err)
		}
		if ev.Kind == lease.Synced {
			break
		}
	}
	if got := calls(rs2...); !slices.Equal(got, []int32{1, 1}) {
		t.Fatalf("replica calls %v, want [1 1]", got)
	}
}

// TestWatchRetriedAfterLostAnswer: a Watch whose request reached an
// endpoint that then cut the connection without an answer (a replica
// killed) opens its stream on the next endpoint, as Get is retried there
// (the package doc: Watch retries opening its stream as Get does).
func TestWatchRetriedAfterLostAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// Read the request, then cut the connection: its answer is lost.
			_, _ = http.ReadRequest(bufio.NewReader(conn))
			conn.Close()
		}
	}()
	rs, store := replicas(t, 1)
	if _, err := store.Acquire(ctxFor(t), "w/a", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	cutting := "http://" + ln.Addr().String()
	if _, err := newClient(t, cutting+","+rs[0].url).Get(ctxFor(t), "w/a"); err != nil {
		t.Fatalf("Get whose first answer was lost: %v", err)
	}
	kinds := syncedKinds(t, newClient(t, cutting+","+rs[0].url), "w/", "whose first answer was lost")
	if !slices.Equal(kinds, []lease.EventKind{lease.Held, lease.Synced}) {
		t.Fatalf("Watch gave %v, want held, synced", kinds)
	}
	// An answer that is no stream is an answer: not asked again, as a
	// malformed answer to Get is not.
	var asked atomic.Int32
	notStream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"leases":[]}`))
	}))
	t.Cleanup(notStream.Close)
	for _, err := range newClient(t, notStream.URL).Watch(ctxFor(t), "w/") {
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Watch answered 200 application/json: %v, want ErrUnavailable", err)
		}
		break
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("a Watch answered with no stream asked %d times, want once", n)
	}
}

// TestCallPastItsDeadlineMovesOn: a request its caller's deadline ends
// before the answer came is a timeout, as the Client's own: the next
// request goes to the next replica. A caller whose deadlines were shorter
// than the Client's timeout (10 s) stayed, for good, on a replica that
// took requests and never answered them (one cut from etcd by a silent
// link).
func TestCallPastItsDeadlineMovesOn(t *testing.T) {
	rs, _ := replicas(t, 2)
	c := newClient(t, rs[0].url+","+rs[1].url)
	rs[0].hang.Store(1)
	ctx, cancel := context.WithTimeout(ctxFor(t), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "multi/deadline"); err == nil {
		t.Fatal("Get unanswered by its deadline succeeded")
	}
	if _, err := c.Acquire(ctxFor(t), "multi/deadline", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := calls(rs...); !slices.Equal(got, []int32{1, 1}) {
		t.Fatalf("replica calls %v, want [1 1]: the get unanswered by its deadline on the first, the next request on the second", got)
	}
}

// TestCancelledCallDoesNotMoveOn: a caller ending its own request says
// nothing about the endpoint, so the next request goes to the same one.
func TestCancelledCallDoesNotMoveOn(t *testing.T) {
	rs, store := replicas(t, 2)
	if _, err := store.Acquire(ctxFor(t), "multi/held", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, rs[0].url+","+rs[1].url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// No deadline: the request waits on the server until the caller
	// cancels it.
	time.AfterFunc(100*time.Millisecond, cancel)
	if _, err := c.AcquireWait(ctx, "multi/held", "w", time.Minute); err == nil {
		t.Fatal("AcquireWait of a held key succeeded")
	}
	if _, err := c.Get(ctxFor(t), "multi/held"); err != nil {
		t.Fatal(err)
	}
	if got := calls(rs...); got[1] != 0 {
		t.Fatalf("replica calls %v: a cancelled wait moved the client on to the second replica", got)
	}
}
