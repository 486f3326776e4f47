package fence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

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

// TestMemoryCheckHonoursContextWhileWaiting: a Check waiting for another
// write to the same resource must give up when its context ends, not sit
// until that write finishes (a slow or stuck handler would otherwise hold
// every later request for the resource, whatever their deadlines).
func TestMemoryCheckHonoursContextWhileWaiting(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- g.Check(context.Background(), "job", 1, func() error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	second := make(chan error, 1)
	go func() { second <- g.Check(ctx, "job", 2, func() error { ran = true; return nil }) }()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting Check whose context ended: err = %v, want DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a Check whose context ended 5 s ago is still waiting for another write")
		close(release)
		<-second
		<-first
		return
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the write of a Check that gave up ran")
	}
	if got := g.Highest("job"); got != 1 {
		t.Errorf("highest = %d, want 1", got)
	}
	// The resource is free again.
	if err := g.Check(context.Background(), "job", 2, func() error { return nil }); err != nil || g.Highest("job") != 2 {
		t.Errorf("Check after the wait: %v, highest %d", err, g.Highest("job"))
	}
}
