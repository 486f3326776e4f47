package leasehttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// metric returns the value of one series in /metrics, e.g.
// `lease_acquisitions_total{result="held"}`, and 0 if it is absent.
func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	status, body := call(t, "GET", url+"/metrics", "", "")
	if status != 200 {
		t.Fatalf("/metrics: HTTP %d", status)
	}
	return metricIn(t, body, series)
}

// metricsOf returns h's /metrics, asked in process.
func metricsOf(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", rec.Code)
	}
	return rec.Body.String()
}

// metricIn returns series's value in the /metrics page body, 0 if absent.
func metricIn(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q: %v", series, v, err)
			}
			return f
		}
	}
	return 0
}

// eventually waits until cond holds, failing t after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.True(t, 10*time.Second, what, cond)
}

// backends are the two ways the server waits: the backend's own FIFO wait,
// or the server's queue.
var backends = []struct {
	name string
	new  func(testing.TB, ...memstore.Option) lease.Backend
}{
	{"BackendWaits", func(t testing.TB, opts ...memstore.Option) lease.Backend { return memtest.New(t, opts...) }},
	{"ServerQueues", func(t testing.TB, opts ...memstore.Option) lease.Backend { return backendOnly{memtest.New(t, opts...)} }},
}

func TestSecretIDNeverShown(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	c := newClient(t, hs.URL)
	l, err := c.Acquire(ctxFor(t), "secret/one", "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	secret := l.ID.Reveal()
	status, body := call(t, "POST", hs.URL+"/v1/leases/secret%2Fone/acquire", "", `{"owner":"thief","ttl_ms":1000}`)
	if status != 409 || !strings.Contains(body, `"owner":"owner"`) {
		t.Fatalf("acquire of a held key: HTTP %d %s, want 409 naming the holder", status, body)
	}
	for _, path := range []string{"/v1/leases/secret%2Fone", "/v1/leases", "/v1/leases?prefix=secret%2F", "/metrics"} {
		status, body := call(t, "GET", hs.URL+path, "", "")
		if status != 200 {
			t.Fatalf("GET %s: HTTP %d %s", path, status, body)
		}
		if strings.Contains(body, secret) || strings.Contains(body, `"id"`) {
			t.Errorf("GET %s shows the secret id: %s", path, body)
		}
	}
	if strings.Contains(body, secret) {
		t.Errorf("the held answer shows the secret id: %s", body)
	}
}

func TestLeaseJSONShape(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	status, body := call(t, "POST", hs.URL+"/v1/leases/shape/acquire", "", `{"owner":"o","ttl_ms":1500}`)
	if status != 200 {
		t.Fatalf("HTTP %d %s", status, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"key", "owner", "token", "id", "ttl_ms", "expires_at"} {
		if _, ok := m[f]; !ok {
			t.Errorf("lease answer lacks %q: %s", f, body)
		}
	}
	if len(m) != 6 {
		t.Errorf("lease answer has %d members, want 6: %s", len(m), body)
	}
	exp, _ := m["expires_at"].(string)
	if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", exp); err != nil || !strings.HasSuffix(exp, "Z") {
		t.Errorf("expires_at %q is not RFC 3339 UTC with milliseconds: %v", exp, err)
	}
	if m["ttl_ms"] != 1500.0 || m["key"] != "shape" || m["owner"] != "o" {
		t.Errorf("lease answer %s, want key shape, owner o, ttl_ms 1500", body)
	}
}

func TestWaitCappedAtMaxWait(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			_, hs := startServer(t, b, leasehttp.WithMaxWait(50*time.Millisecond))
			held, err := b.Acquire(ctxFor(t), "capped", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// The longest wait_ms any server accepts (an hour) must be
			// capped at this server's max wait. (Beyond it, wait_ms is
			// refused: TestWaitOutOfRange.)
			status, body := call(t, "POST", hs.URL+"/v1/leases/capped/acquire", "", `{"owner":"w","ttl_ms":1000,"wait_ms":3600000}`)
			if status != 409 || !strings.Contains(body, `"code":"held"`) || !strings.Contains(body, `"owner":"holder"`) ||
				!strings.Contains(body, `"token":`+strconv.FormatUint(uint64(held.Token), 10)) {
				t.Fatalf("HTTP %d %s, want 409 held naming holder and its token", status, body)
			}
		})
	}
}

func TestCloseEndsWaits(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			srv, hs := startServer(t, b)
			if _, err := b.Acquire(ctxFor(t), "closing", "holder", time.Minute); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				status int
				body   string
			}
			answers := make(chan answer, 3)
			for range 3 {
				go func() {
					s, b := call(t, "POST", hs.URL+"/v1/leases/closing/acquire", "", `{"owner":"w","ttl_ms":1000,"wait_ms":60000}`)
					answers <- answer{s, b}
				}()
			}
			eventually(t, "3 waiters", func() bool { return metric(t, hs.URL, "lease_waiters") == 3 })
			if err := srv.Close(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				a := <-answers
				if a.status != 503 || !strings.Contains(a.body, `"code":"unavailable"`) || !strings.Contains(a.body, "shutting down") {
					t.Errorf("waiter after Close: HTTP %d %s, want 503 unavailable, shutting down", a.status, a.body)
				}
			}
			// After Close acquires try once, and readiness is withdrawn.
			if status, body := call(t, "POST", hs.URL+"/v1/leases/closing/acquire", "", `{"owner":"w","ttl_ms":1000,"wait_ms":60000}`); status != 409 {
				t.Errorf("acquire with wait after Close: HTTP %d %s, want an immediate 409", status, body)
			}
			if status, _ := call(t, "GET", hs.URL+"/readyz", "", ""); status != 503 {
				t.Errorf("/readyz after Close: HTTP %d, want 503", status)
			}
			if status, _ := call(t, "GET", hs.URL+"/healthz", "", ""); status != 200 {
				t.Errorf("/healthz after Close: HTTP %d, want 200", status)
			}
		})
	}
}

// TestWaiterThatLeavesHoldsNothing checks that a waiter whose client hangs
// up leaves the queue: the next release frees the key instead of handing it
// to nobody.
func TestWaiterThatLeavesHoldsNothing(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			_, hs := startServer(t, b)
			c := newClient(t, hs.URL)
			holder, err := c.Acquire(ctxFor(t), "leaver", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.AcquireWait(ctx, "leaver", "impatient", time.Minute)
				done <- err
			}()
			eventually(t, "a waiter", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled AcquireWait: err = %v, want context.Canceled", err)
			}
			eventually(t, "the waiter gone", func() bool { return metric(t, hs.URL, "lease_waiters") == 0 })
			if err := c.Release(ctxFor(t), holder); err != nil {
				t.Fatal(err)
			}
			if l, err := b.Get(ctxFor(t), "leaver"); !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("after the holder's release the key is held by %+v (%v); the waiter had left", l, err)
			}
		})
	}
}

// TestServerQueueIsFIFO checks the server's own queue with more waiters
// than the conformance suite, woken by releases and, for one waiter, by the
// expiry of the lease before it.
func TestServerQueueIsFIFO(t *testing.T) {
	_, hs := startServer(t, backendOnly{memtest.New(t)})
	c := newClient(t, hs.URL)
	prev, err := c.Acquire(ctxFor(t), "fifo", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const n, expires = 6, 2 // waiter 2 lets its lease expire
	type result struct {
		i int
		l lease.Lease
		e error
	}
	results := make(chan result, n)
	for i := range n {
		ttl := time.Minute
		if i == expires {
			ttl = 100 * time.Millisecond
		}
		go func() {
			l, err := c.AcquireWait(ctxFor(t), "fifo", "w"+strconv.Itoa(i), ttl)
			results <- result{i, l, err}
		}()
		eventually(t, "waiter queued", func() bool { return metric(t, hs.URL, "lease_waiters") == float64(i+1) })
	}
	for want := range n {
		if want != expires+1 {
			if err := c.Release(ctxFor(t), prev); err != nil {
				t.Fatal(err)
			}
		}
		r := <-results
		if r.e != nil {
			t.Fatalf("waiter %d: %v", r.i, r.e)
		}
		if r.i != want {
			t.Fatalf("waiter %d served in place %d (not FIFO)", r.i, want)
		}
		if r.l.Token <= prev.Token {
			t.Fatalf("waiter %d got token %d, not above %d", r.i, r.l.Token, prev.Token)
		}
		prev = r.l
	}
}

func TestReadyz(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	if status, body := call(t, "GET", hs.URL+"/readyz", "", ""); status != 200 || !strings.Contains(body, "ready") {
		t.Fatalf("/readyz: HTTP %d %s", status, body)
	}
	broken := brokenBackend{backendOnly{memtest.New(t)}}
	_, hs2 := startServer(t, broken)
	status, body := call(t, "GET", hs2.URL+"/readyz", "", "")
	if status != 503 || !strings.Contains(body, `"code":"unavailable"`) || strings.Contains(body, "disk on fire") {
		t.Fatalf("/readyz over a failing backend: HTTP %d %s, want 503 without the backend's message", status, body)
	}
}

// brokenBackend fails every Get, as a backend that lost its engine does.
type brokenBackend struct{ backendOnly }

func (brokenBackend) Get(context.Context, string) (lease.Lease, error) {
	return lease.Lease{}, errors.New("teststore: disk on fire")
}

// TestMetrics runs in a synctest bubble, its client talking to the server
// through handlerTransport: the expiry tracker's grace and timer run on the
// bubble's clock, as the memstore's TTLs do.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { testMetrics(t) })
}

func testMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := newMem(t)
	srv := newServer(t, b, leasehttp.WithRegisterer(reg))
	c := newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(&http.Client{Transport: handlerTransport{srv}}))
	const secretKey = "metrics/key-name-that-must-not-leak"
	m := func(s string) float64 { return metricIn(t, metricsOf(t, srv), s) }

	l, err := c.Acquire(ctxFor(t), secretKey, "owner-name-that-must-not-leak", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctxFor(t), secretKey, "other", time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("second Acquire: %v", err)
	}
	if got := m(`lease_acquisitions_total{result="acquired"}`); got != 1 {
		t.Errorf("acquired = %v, want 1", got)
	}
	if got := m(`lease_acquisitions_total{result="held"}`); got != 1 {
		t.Errorf("held = %v, want 1", got)
	}
	if got := m(`lease_active_leases`); got != 1 {
		t.Errorf("active = %v, want 1", got)
	}
	// Anyone can send the token; a release refused for a wrong ID says
	// nothing of the lease, which its holder still has.
	forged := l
	forged.ID = lease.NewID()
	if err := c.Release(ctxFor(t), forged); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release with a wrong ID: %v", err)
	}
	if got, want := [2]float64{m(`lease_active_leases`), m(`lease_expirations_total`)}, [2]float64{1, 0}; got != want {
		t.Errorf("after a release with a wrong ID: active, expirations = %v, want %v", got, want)
	}
	if _, err := c.Renew(ctxFor(t), l, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctxFor(t), l, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Renew after Release: %v", err)
	}
	if err := c.Release(ctxFor(t), l); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release twice: %v", err)
	}
	for series, want := range map[string]float64{
		`lease_renewals_total{result="renewed"}`:  1,
		`lease_renewals_total{result="not_held"}`: 1,
		`lease_releases_total{result="released"}`: 1,
		`lease_releases_total{result="not_held"}`: 2,
		`lease_active_leases`:                     0,
		`lease_expirations_total`:                 0,
		`lease_http_request_duration_seconds_count{code="200",route="POST /v1/leases/{key}/acquire"}`: 1,
		`lease_http_request_duration_seconds_count{code="409",route="POST /v1/leases/{key}/acquire"}`: 1,
	} {
		if got := m(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// A holder that stops renewing: counted once its TTL has passed.
	if _, err := c.Acquire(ctxFor(t), "metrics/abandoned", "gone", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the expiration counted", func() bool { return m(`lease_expirations_total`) == 1 })
	if got := m(`lease_active_leases`); got != 0 {
		t.Errorf("active after the expiry = %v, want 0", got)
	}
	// A holder that comes back too late is counted once, not twice.
	late, err := c.Acquire(ctxFor(t), "metrics/late", "late", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Past the TTL, within the tracker's grace.
	eventually(t, "the late lease past its TTL", func() bool {
		_, err := b.Get(ctxFor(t), "metrics/late")
		return errors.Is(err, lease.ErrNotFound)
	})
	if _, err := c.Renew(ctxFor(t), late, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("late Renew: %v", err)
	}
	eventually(t, "the late holder counted", func() bool { return m(`lease_expirations_total`) == 2 })
	// Past the grace of the server's tracker: it must not count the late
	// holder again.
	time.Sleep(300 * time.Millisecond)
	if got := m(`lease_expirations_total`); got != 2 {
		t.Errorf("expirations = %v, want 2", got)
	}
	// The held answer and the request log's route never put a key in a label.
	body := metricsOf(t, srv)
	if strings.Contains(body, "must-not-leak") || strings.Contains(body, "metrics/") {
		t.Errorf("/metrics names a key or owner:\n%s", body)
	}
	// The metrics went to the registry given.
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("the given registry gathered %d families, %v", len(mfs), err)
	}
}

func TestServerOptionsValidate(t *testing.T) {
	for name, opt := range map[string]leasehttp.ServerOption{
		"nil logger":        leasehttp.WithLogger(nil),
		"nil registerer":    leasehttp.WithRegisterer(nil),
		"nil gatherer":      leasehttp.WithGatherer(nil),
		"negative max wait": leasehttp.WithMaxWait(-time.Second),
		"huge max wait":     leasehttp.WithMaxWait(leasehttp.MaxMaxWait + 1),
		"gatherer alone":    leasehttp.WithGatherer(prometheus.NewRegistry()),
	} {
		if _, err := leasehttp.NewServer(newMem(t), opt); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := leasehttp.NewServer(nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("nil backend: err = %v, want ErrInvalid", err)
	}
	// Two servers on one registry collide, and say so.
	reg := prometheus.NewRegistry()
	s1, err := leasehttp.NewServer(newMem(t), leasehttp.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if _, err := leasehttp.NewServer(newMem(t), leasehttp.WithRegisterer(reg)); err == nil {
		t.Error("a second server on the same registry: no error")
	}
	_ = http.StatusOK
}

// TestGrantToGoneClientReleased sends acquires whose client has already
// hung up: whatever the server acquired for them it gives back at once, so
// the key is free for the next taker instead of held until its TTL.
func TestGrantToGoneClientReleased(t *testing.T) {
	for _, be := range backends {
		for _, wait := range []string{"0", "5000"} {
			t.Run(be.name+"/wait_ms="+wait, func(t *testing.T) {
				b := be.new(t)
				srv := newServer(t, b)
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				req := httptestRequest(ctx, `{"owner":"gone","ttl_ms":60000,"wait_ms":`+wait+`}`)
				rec := serveRequest(srv, req)
				if rec.Code != 499 {
					t.Errorf("HTTP %d %s, want 499 (client gone)", rec.Code, rec.Body)
				}
				if l, err := b.Get(ctxFor(t), "gone"); !errors.Is(err, lease.ErrNotFound) {
					t.Fatalf("the key is held by %+v (%v) for a client that had gone", l, err)
				}
			})
		}
	}
}

// skewedBackend is a backend without optional abilities whose clock runs
// behind the server's: the expiry of a HeldError it returns has already
// passed on the server's clock. It counts its Acquire calls.
type skewedBackend struct {
	backendOnly
	acquires atomic.Int64
}

func (b *skewedBackend) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	b.acquires.Add(1)
	l, err := b.backendOnly.Acquire(ctx, key, owner, ttl)
	var he *lease.HeldError
	if errors.As(err, &he) {
		skewed := *he
		skewed.Expires = skewed.Expires.Add(-time.Hour)
		return l, &skewed
	}
	return l, err
}

// TestServerQueueBacksOffWhenExpiryHintHasPassed: a holder's expiry is only
// a hint on the backend's clock. When it has already passed on the server's
// clock (the clocks disagree), the head waiter must keep backing off rather
// than ask the backend every 5 ms for as long as the skew lasts.
func TestServerQueueBacksOffWhenExpiryHintHasPassed(t *testing.T) {
	t.Run("Polling", func(t *testing.T) {
		b := &skewedBackend{backendOnly: backendOnly{memtest.New(t)}}
		testBackoffWhenExpiryHintHasPassed(t, b, b)
	})
	t.Run("Notifier", func(t *testing.T) {
		b := &skewedBackend{backendOnly: backendOnly{memtest.New(t)}}
		testBackoffWhenExpiryHintHasPassed(t, silentNotifier{b}, b)
	})
}

// silentNotifier offers lease.Notifier but never notifies, as a backend
// whose expiry is not announced (its clock decides when, not ours).
type silentNotifier struct{ *skewedBackend }

func (silentNotifier) WaitChange(ctx context.Context, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}

func testBackoffWhenExpiryHintHasPassed(t *testing.T, served lease.Backend, b *skewedBackend) {
	_, hs := startServer(t, served)
	if _, err := b.Acquire(ctxFor(t), "skew", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	start := b.acquires.Load()
	status, body := call(t, "POST", hs.URL+"/v1/leases/skew/acquire", "", `{"owner":"w","ttl_ms":1000,"wait_ms":400}`)
	if status != 409 {
		t.Fatalf("HTTP %d %s, want 409 held", status, body)
	}
	// Backoff doubling from 5 ms to 500 ms tries about 7 times in 400 ms;
	// polling every 5 ms would try about 80 times.
	if n := b.acquires.Load() - start; n > 20 {
		t.Errorf("a 400 ms wait asked the backend %d times: polling, not backing off", n)
	}
}

// TestWaiterThatLeavesIsNotCountedAsError: a client that stops waiting is
// no failure of the server or the backend. lease_acquisitions_total counts
// it as a wait that ended without the lease (held), not as an error, which
// operators alert on.
func TestWaiterThatLeavesIsNotCountedAsError(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.new(t)
			_, hs := startServer(t, b)
			c := newClient(t, hs.URL)
			if _, err := b.Acquire(ctxFor(t), "leaver", "holder", time.Minute); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := c.AcquireWait(ctx, "leaver", "impatient", time.Minute)
				done <- err
			}()
			eventually(t, "a waiter", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled AcquireWait: err = %v, want context.Canceled", err)
			}
			eventually(t, "the wait counted", func() bool {
				return metric(t, hs.URL, `lease_acquisitions_total{result="held"}`)+
					metric(t, hs.URL, `lease_acquisitions_total{result="error"}`) == 1
			})
			if got := metric(t, hs.URL, `lease_acquisitions_total{result="error"}`); got != 0 {
				t.Errorf(`lease_acquisitions_total{result="error"} = %v after a client stopped waiting, want 0`, got)
			}
		})
	}
}

// TestWrongMethodIs405: a method no route serves on a path that has routes
// is 405 with Allow and the API's error body, not ServeMux's plain text nor
// a 404 that would say the path does not exist.
func TestWrongMethodIs405(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	for _, tc := range []struct {
		method, path, allow string
	}{
		{"GET", "/v1/leases/k/acquire", "POST"},
		{"PUT", "/v1/leases/k/renew", "POST"},
		{"OPTIONS", "/v1/leases/k/release", "POST"},
		{"DELETE", "/v1/leases/k", "GET, HEAD"},
		{"POST", "/v1/leases/k", "GET, HEAD"},
		{"DELETE", "/v1/leases/%2F", "GET, HEAD"},
		{"GET", "/v1/leases/%2F/acquire", "POST"},
		{"POST", "/v1/leases", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
		{"PATCH", "/metrics", "GET, HEAD"},
		{"GET", "/nothing", ""},
		{"GET", "/v1/leases/k/steal", ""},
		{"HEAD", "/v1/leases/%2F", ""}, // served: 404, no lease on "/"
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctxFor(t), tc.method, hs.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			allow := resp.Header.Get("Allow")
			switch {
			case tc.allow == "" && (resp.StatusCode != 404 || allow != ""):
				t.Fatalf("HTTP %d, Allow %q, want 404 without Allow", resp.StatusCode, allow)
			case tc.allow == "":
			case resp.StatusCode != 405 || allow != tc.allow:
				t.Fatalf("HTTP %d, Allow %q %s; want 405, Allow %q", resp.StatusCode, allow, body, tc.allow)
			case resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(body), `"code":"invalid"`):
				t.Fatalf("405 answered with %q %s, want the JSON error body with code invalid", resp.Header.Get("Content-Type"), body)
			}
		})
	}
}

// TestRequestTargetWithoutPathHasErrorBody: a request whose target is not a
// path ("GET *", or CONNECT to an authority) names no route: 404 with the
// API's error body, not ServeMux's empty 400 or plain-text 404.
func TestRequestTargetWithoutPathHasErrorBody(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	for _, target := range []string{"GET *", "POST *", "CONNECT example.com:443", "CONNECT localhost"} {
		t.Run(target, func(t *testing.T) {
			c, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, target+" HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(body), `"code":"invalid"`) {
				t.Fatalf("HTTP %d %q %q; want 404 with the JSON error body, code invalid", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		})
	}
}

// TestRefusalNamesThePathAsSent: a 405 or 404 names the path as the client
// wrote it; it named it unescaped, so the key "/" read as an empty segment
// ("/v1/leases///acquire"), a path the client never sent.
func TestRefusalNamesThePathAsSent(t *testing.T) {
	h := newServer(t, newMem(t))
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/v1/leases/%2F/acquire", `/v1/leases/%2F/acquire`},
		{"DELETE", "/v1/leases/a%2Fb", `/v1/leases/a%2Fb`},
		{"GET", "/v1/leases/a%2Fb/steal", `/v1/leases/a%2Fb/steal`},
	} {
		rec := serve(h, tc.method, tc.path, "", nil)
		checkAnswer(t, tc.method+" "+tc.path, rec)
		if !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s %s: HTTP %d %s, want the path %s in the message", tc.method, tc.path, rec.Code, rec.Body, tc.want)
		}
	}
}
