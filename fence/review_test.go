package fence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// TestMiddlewareInvalidStatusRecordsNothing: a handler that answers with a
// status net/http refuses (below 100 or above 999) panics, as it would
// without the middleware — and the panic must come before the guard records
// the token, not after, when the write counts as accepted but the client
// gets a broken connection instead of an answer.
func TestMiddlewareInvalidStatusRecordsNothing(t *testing.T) {
	for _, status := range []int{0, 42, 99, 1000} {
		g := fence.NewMemory(fence.AtLeast)
		mw, err := fence.Middleware(g, func(*http.Request) (string, error) { return "job", nil })
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
		}))
		req := httptest.NewRequest(http.MethodPut, "/job", strings.NewReader("x"))
		req.Header.Set(fence.TokenHeader, "5")
		func() {
			defer func() { _ = recover() }()
			h.ServeHTTP(httptest.NewRecorder(), req)
		}()
		if got := g.Highest("job"); got != 0 {
			t.Errorf("WriteHeader(%d): guard recorded token %d for a handler that never answered", status, got)
		}
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// reviewTTL is the TTL of holdRenewalsFail's lease.
const reviewTTL = 100 * time.Millisecond

// holdRenewalsFail returns a hold on "job" on a fake clock whose renewals
// all fail, so that advancing the clock by reviewTTL loses it.
func holdRenewalsFail(t *testing.T) (*fakeclock.Clock, *lease.Hold) {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := lease.NewClient(renewalsFail{memstore.New()}, lease.WithOwner("worker"), lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(context.Background(), "job", reviewTTL)
	if err != nil {
		t.Fatal(err)
	}
	return clock, h
}

// TestHoldTransportAbandonsRequestsOnLoss: a request handed to the
// Transport while the lease was held, but still waiting in the base
// transport (for a pooled connection, a dial, a TLS handshake, or a retry on
// a fresh connection) when the lease is lost, must not go out afterwards:
// its context must end with the Hold's.
func TestHoldTransportAbandonsRequestsOnLoss(t *testing.T) {
	ctx := context.Background()
	clock, h := holdRenewalsFail(t)
	defer func() { _ = h.Release(ctx) }()

	entered, lost := make(chan struct{}), make(chan struct{})
	var sent atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		close(entered)
		<-lost // waiting for a connection meanwhile, which comes later
		select {
		case <-r.Context().Done():
			return nil, r.Context().Err() // as http.Transport does: the request is not sent
		case <-time.After(5 * time.Second):
		}
		sent.Add(1)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	tr, err := fence.NewHoldTransport(h, base)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPut, "http://resource.example/job", strings.NewReader("x"))
		req.RequestURI = ""
		resp, err := tr.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	clock.Advance(reviewTTL) // renewals fail: lost at the safe deadline
	if h.Err() == nil {
		t.Fatal("hold not lost")
	}
	close(lost)
	if err := <-errc; !errors.Is(err, lease.ErrLost) {
		t.Errorf("RoundTrip of a request still unsent at the loss = %v, want an error matching ErrLost", err)
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("%d requests sent after the lease was lost", n)
	}
}

// TestHoldTransportResponseReadableAfterLoss: a response received while the
// lease was held stays readable after a later loss.
func TestHoldTransportResponseReadableAfterLoss(t *testing.T) {
	ctx := context.Background()
	clock, h := holdRenewalsFail(t)
	defer func() { _ = h.Release(ctx) }()
	srv, _ := echoServer(t)
	tr, err := fence.NewHoldTransport(h, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(mustRequest(t, http.MethodPut, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(reviewTTL)
	if h.Err() == nil {
		t.Fatal("hold not lost")
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != `["1"]` {
		t.Errorf("body of a response received before the loss = %q, %v", b, err)
	}
}
