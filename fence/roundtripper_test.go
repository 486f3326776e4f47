package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
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

// holdTTL is the TTL of holdRenewalsFail's lease.
const holdTTL = 100 * time.Millisecond

// holdRenewalsFail returns a hold on "job" on a fake clock whose renewals
// all fail, so that advancing the clock by holdTTL loses it.
func holdRenewalsFail(t *testing.T) (*fakeclock.Clock, *lease.Hold) {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, err := lease.NewClient(renewalsFail{memtest.New(t)}, lease.WithOwner("worker"), lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.TryAcquire(context.Background(), "job", holdTTL)
	if err != nil {
		t.Fatal(err)
	}
	return clock, h
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
	c, err := lease.NewClient(memtest.New(t), lease.WithOwner("worker"))
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
	clock, h := holdRenewalsFail(t)
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
	clock.Advance(holdTTL)
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

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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
	clock.Advance(holdTTL) // renewals fail: lost at the safe deadline
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
	clock.Advance(holdTTL)
	if h.Err() == nil {
		t.Fatal("hold not lost")
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != `["1"]` {
		t.Errorf("body of a response received before the loss = %q, %v", b, err)
	}
}

// TestTransportStampsRequestWithoutHeader: a request built by hand may have
// a nil Header (http.Client fills one in, a RoundTripper called directly or
// by another RoundTripper gets it as is). Stamping the token on the clone
// must not panic with "assignment to entry in nil map".
func TestTransportStampsRequestWithoutHeader(t *testing.T) {
	ctx := context.Background()
	srv, _ := echoServer(t)
	_, h := holdRenewalsFail(t)
	defer func() { _ = h.Release(ctx) }()
	hold, err := fence.NewHoldTransport(h, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	plain := &fence.Transport{Base: srv.Client().Transport, Token: func() (lease.Token, error) { return h.Token(), nil }}
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for name, tr := range map[string]http.RoundTripper{"Transport": plain, "NewHoldTransport": hold} {
		t.Run(name, func(t *testing.T) {
			req := (&http.Request{Method: http.MethodPut, URL: u, Host: u.Host}).WithContext(ctx)
			var resp *http.Response
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("RoundTrip of a request with a nil Header panicked: %v", p)
					}
				}()
				resp, err = tr.RoundTrip(req)
			}()
			if err != nil {
				t.Fatal(err)
			}
			got := readBody(t, resp)
			if want := `["` + fence.FormatToken(h.Token()) + `"]`; got != want {
				t.Errorf("server saw Fencing-Token %s, want %s", got, want)
			}
			if req.Header != nil {
				t.Errorf("caller's request changed: Header = %v", req.Header)
			}
		})
	}
}

// TestTransportReplacesNonCanonicalHeader: a Fencing-Token the caller put
// in the header map under a non-canonical key ("fencing-token") is still
// the caller's Fencing-Token: it goes on the wire beside the stamped one,
// and a server that reads the first value uses the caller's (possibly
// stale) token. It must be replaced like a canonical one.
func TestTransportReplacesNonCanonicalHeader(t *testing.T) {
	srv, _ := echoServer(t)
	tr := &fence.Transport{Base: srv.Client().Transport, Token: func() (lease.Token, error) { return 42, nil }}
	req := mustRequest(t, http.MethodPut, srv.URL)
	req.Header["fencing-token"] = []string{"7"}
	req.Header["FENCING-TOKEN"] = []string{"8"}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != `["42"]` {
		t.Errorf("server saw Fencing-Token %s, want [\"42\"]", got)
	}
	//lint:ignore SA1008 the non-canonical keys are what is tested
	if len(req.Header) != 2 || req.Header["fencing-token"][0] != "7" || req.Header["FENCING-TOKEN"][0] != "8" {
		t.Errorf("caller's request headers changed to %v", req.Header)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
