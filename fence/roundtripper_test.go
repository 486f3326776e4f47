package fence_test

import (
	"context"
	"errors"
	"fmt"
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

// echoServer answers every request with the Fencing-Token header it got,
// and counts the requests.
func echoServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		fmt.Fprintf(w, "%q", r.Header.Values(fence.TokenHeader))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// closeBody is a request body that records whether it was closed.
type closeBody struct {
	io.Reader
	closed bool
}

func (b *closeBody) Close() error { b.closed = true; return nil }

// renewalsFail is a backend whose renewals fail as if the network to it were
// cut, so that a Hold on it is lost at its safe deadline.
type renewalsFail struct{ lease.Backend }

func (renewalsFail) Renew(context.Context, lease.Lease, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, fmt.Errorf("%w: renewals cut off by the test", lease.ErrUnavailable)
}

func TestTransportStampsToken(t *testing.T) {
	srv, _ := echoServer(t)
	tr := &fence.Transport{Base: srv.Client().Transport, Token: func() (lease.Token, error) { return 42, nil }}
	c := &http.Client{Transport: tr}

	req := mustRequest(t, http.MethodPut, srv.URL)
	req.Header.Set(fence.TokenHeader, "7") // replaced, on the clone only
	req.Header.Set("X-Other", "kept")
	got := do(t, c, req)
	if got.body != `["42"]` {
		t.Errorf("server saw Fencing-Token %s, want [\"42\"]", got.body)
	}
	if v := req.Header.Values(fence.TokenHeader); len(v) != 1 || v[0] != "7" || req.Header.Get("X-Other") != "kept" {
		t.Errorf("caller's request headers changed to %v", req.Header)
	}
}

func TestTransportRefuses(t *testing.T) {
	srv, n := echoServer(t)
	boom := errors.New("no token today")
	cases := []struct {
		name  string
		token func() (lease.Token, error)
		want  error
	}{
		{"nil func", nil, lease.ErrInvalid},
		{"func fails", func() (lease.Token, error) { return 0, boom }, boom},
		{"zero token", func() (lease.Token, error) { return 0, nil }, lease.ErrInvalid},
		{"token above 2^53", func() (lease.Token, error) { return lease.MaxToken + 1, nil }, lease.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &fence.Transport{Base: srv.Client().Transport, Token: tc.token}
			body := &closeBody{Reader: strings.NewReader("x")}
			req, err := http.NewRequest(http.MethodPut, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if !errors.Is(err, tc.want) || resp != nil {
				t.Errorf("RoundTrip = %v, %v; want nil and an error matching %v", resp, err, tc.want)
			}
			if !body.closed {
				t.Errorf("request body not closed after a refusal")
			}
		})
	}
	if n.Load() != 0 {
		t.Errorf("server got %d requests, want 0", n.Load())
	}
	if _, err := fence.NewHoldTransport(nil, nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("NewHoldTransport(nil): %v, want ErrInvalid", err)
	}
}

func TestHoldTransportRefusesAfterRelease(t *testing.T) {
	ctx := context.Background()
	srv, n := echoServer(t)
	c, err := lease.NewClient(memstore.New(), lease.WithOwner("worker"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := fence.NewHoldTransport(h, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: tr}
	if got := do(t, hc, mustRequest(t, http.MethodPost, srv.URL)); got.body != fmt.Sprintf("[%q]", fence.FormatToken(h.Token())) {
		t.Errorf("server saw %s, want the hold's token %d", got.body, h.Token())
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = hc.Post(srv.URL, "text/plain", strings.NewReader("late"))
	if !errors.Is(err, lease.ErrReleased) {
		t.Errorf("request after release: %v, want an error matching ErrReleased", err)
	}
	if n.Load() != 1 {
		t.Errorf("server got %d requests, want only the one before release", n.Load())
	}
}

func TestHoldTransportRefusesAfterLoss(t *testing.T) {
	ctx := context.Background()
	srv, n := echoServer(t)
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const ttl = 100 * time.Millisecond
	c, err := lease.NewClient(renewalsFail{memstore.New()}, lease.WithOwner("worker"), lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Release(ctx) }() // ends the renewal goroutine; the loss is already known
	tr, err := fence.NewHoldTransport(h, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: tr}
	if got := do(t, hc, mustRequest(t, http.MethodPut, srv.URL)); got.body != `["1"]` {
		t.Fatalf("server saw %s while the lease was held, want [\"1\"]", got.body)
	}

	// Renewals fail, so the client gives the lease up at its safe deadline;
	// the deadline timer fires inside Advance.
	clock.Advance(ttl)
	if h.Err() == nil {
		t.Fatal("hold still held after its safe deadline passed without renewal")
	}
	body := &closeBody{Reader: strings.NewReader("stale write")}
	req, err := http.NewRequest(http.MethodPut, srv.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if !errors.Is(err, lease.ErrLost) {
		t.Errorf("request after loss: %v, %v; want an error matching ErrLost", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	if !body.closed {
		t.Errorf("request body not closed after the refusal")
	}
	if n.Load() != 1 {
		t.Errorf("server got %d requests, want only the one before the loss", n.Load())
	}
}
