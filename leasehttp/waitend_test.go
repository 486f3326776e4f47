package leasehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
)

// unreachableGet is a memstore whose Get fails as a backend cut off from
// its engine does, while its waits go on.
type unreachableGet struct{ *memstore.Store }

func (unreachableGet) Get(context.Context, string) (lease.Lease, error) {
	return lease.Lease{}, fmt.Errorf("%w: teststore: the engine does not answer", lease.ErrUnavailable)
}

// TestWaitRunOutOverAnUnreachableBackendIs503: a wait that runs out is
// answered 409 naming the holder, which the server asks the backend for.
// When the backend cannot say, the answer is that failure, 503, not held:
// a replica cut off from etcd answered "held" at the end of every wait, so
// its clients waited on there (a 503 moves a client listing several
// replicas on to the next) for a key that was free through the others.
func TestWaitRunOutOverAnUnreachableBackendIs503(t *testing.T) {
	for _, tc := range []struct{ name, ticket string }{
		{"without a ticket", ""},
		{"with a ticket", `,"ticket":"` + lease.NewID().Reveal() + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memtest.New(t)
			if _, err := store.Acquire(ctxFor(t), "busy", "holder", time.Hour); err != nil {
				t.Fatal(err)
			}
			srv, hs := startServer(t, unreachableGet{store}, leasehttp.WithWaitGrace(leasehttp.MaxWaitGrace))
			status, body := call(t, "POST", hs.URL+"/v1/leases/busy/acquire", "",
				`{"owner":"waiter","ttl_ms":60000,"wait_ms":20`+tc.ticket+`}`)
			if status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
				t.Errorf("a wait run out over a backend that cannot say who holds the key: HTTP %d %s; want 503 unavailable", status, body)
			}
			// Told 503, the client does not come back: its wait leaves the
			// line now, not at the end of the grace (a minute here), where
			// it would stand ahead of the client's next wait.
			poll.True(t, 10*time.Second, "the wait answered 503 leaves the line", func() bool {
				n, err := waitingAt(srv, "busy")
				if err != nil {
					t.Fatal(err)
				}
				return n == 0
			})
		})
	}
}

// slowGet is a memstore whose Get answers only after delay, as a backend
// that is slow to reach does.
type slowGet struct {
	*memstore.Store
	delay time.Duration
}

func (s slowGet) Get(ctx context.Context, key string) (lease.Lease, error) {
	// real time: what the test is about is net/http's read deadline, which
	// runs on the OS's clock, passing while the answer is made.
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return lease.Lease{}, ctx.Err()
	}
	return s.Store.Get(ctx, key)
}

// TestWaitAnsweredLateKeepsTheConnection: a wait whose answer is made
// after its wait plus the server's read timeout (the backend slow to say
// who holds the key) leaves its keep-alive connection fit for the next
// request. The read deadline the server set for the wait used to pass
// during net/http's background read, which then cancelled the context of
// the connection it kept open: every later request on it began cancelled,
// and an acquire was granted, released again and answered 499.
func TestWaitAnsweredLateKeepsTheConnection(t *testing.T) {
	const readTimeout = 100 * time.Millisecond
	store := memtest.New(t)
	if _, err := store.Acquire(ctxFor(t), "busy", "holder", time.Hour); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, slowGet{store, 3 * readTimeout})
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ReadTimeout = readTimeout
	hs.Start()
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	send := func(path, body string) (int, string, bool) {
		t.Helper()
		reused := false
		ctx := httptrace.WithClientTrace(ctxFor(t), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("POST %s: reading the answer: %v", path, err)
		}
		return resp.StatusCode, string(b), reused
	}
	status, body, _ := send("/v1/leases/busy/acquire", `{"owner":"waiter","ttl_ms":60000,"wait_ms":20}`)
	if status != http.StatusConflict {
		t.Fatalf("the wait that ran out: HTTP %d %s, want 409", status, body)
	}
	status, body, reused := send("/v1/leases/free/acquire", `{"owner":"next","ttl_ms":60000}`)
	if !reused {
		t.Log("the second request came on a new connection")
	}
	if status != http.StatusOK {
		t.Errorf("an acquire of a free key on the connection of a wait answered late: HTTP %d %s, want 200", status, body)
	}
	if l, err := store.Get(ctxFor(t), "free"); err != nil || l.Owner != "next" {
		t.Errorf("the free key after its acquire: %+v, %v; want it held by next", l, err)
	}
}
