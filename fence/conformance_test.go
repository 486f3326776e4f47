package fence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/guardtest"
)

func TestMemoryConformance(t *testing.T) {
	guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard { return fence.NewMemory(mode) })
}

// TestMiddlewareConformance runs the suite through HTTP: a client stamping
// tokens with fence.Transport, and a server whose handler is fenced by
// fence.Middleware over an in-memory guard.
func TestMiddlewareConformance(t *testing.T) {
	guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard { return newHTTPGuard(t, mode) })
}

// httpGuard is a fence.Guard seen from an HTTP client: Check sends a PUT
// through a fence.Transport stamping the token, and the server's guarded
// handler runs Check's write — found by the request's writeIDHeader, since
// client and server share this process. A write that fails is answered 422,
// which the middleware must not record, and Check returns the write's error.
type httpGuard struct {
	mode fence.Mode // for the StaleTokenError: the wire carries no mode
	srv  *httptest.Server

	mu     sync.Mutex
	next   int
	writes map[string]func() error
	errs   map[string]error // the errors of writes that failed
}

const writeIDHeader = "Guardtest-Write"

func newHTTPGuard(t *testing.T, mode fence.Mode) *httpGuard {
	g := &httpGuard{mode: mode, writes: map[string]func() error{}, errs: map[string]error{}}
	mw, err := fence.Middleware(fence.NewMemory(mode), func(r *http.Request) (string, error) { return r.PathValue("name"), nil })
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /r/{name}", mw(http.HandlerFunc(g.serve)))
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *httpGuard) serve(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(writeIDHeader)
	g.mu.Lock()
	write := g.writes[id]
	g.mu.Unlock()
	if write == nil {
		http.Error(w, "no write "+id, http.StatusBadRequest)
		return
	}
	if err := write(); err != nil {
		g.mu.Lock()
		g.errs[id] = err
		g.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *httpGuard) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	g.mu.Lock()
	g.next++
	id := strconv.Itoa(g.next)
	g.writes[id] = write
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.writes, id)
		delete(g.errs, id)
		g.mu.Unlock()
	}()

	req, err := http.NewRequestWithContext(ctx, http.MethodPut, g.srv.URL+"/r/"+url.PathEscape(resource), nil)
	if err != nil {
		return err
	}
	req.Header.Set(writeIDHeader, id)
	tr := &fence.Transport{Base: g.srv.Client().Transport, Token: func() (lease.Token, error) { return token, nil }}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusUnprocessableEntity:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.errs[id]
	}
	var e struct {
		Error struct {
			Code     string       `json:"code"`
			Message  string       `json:"message"`
			Resource *string      `json:"resource"`
			Token    *lease.Token `json:"token"`
			Highest  *lease.Token `json:"highest"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return fmt.Errorf("http guard: %d %q: %w", resp.StatusCode, body, err)
	}
	switch {
	case resp.StatusCode == http.StatusConflict && e.Error.Code == "stale_token" &&
		e.Error.Resource != nil && e.Error.Token != nil && e.Error.Highest != nil:
		return &fence.StaleTokenError{Resource: *e.Error.Resource, Token: *e.Error.Token, Highest: *e.Error.Highest, Mode: g.mode}
	case resp.StatusCode == http.StatusBadRequest && e.Error.Code == "invalid":
		return fmt.Errorf("http guard: %w: %s", lease.ErrInvalid, e.Error.Message)
	}
	return fmt.Errorf("http guard: %w: %d %q", lease.ErrUnavailable, resp.StatusCode, body)
}

// TestResourceConformance runs the suite on fence.Resource, one per
// resource name, with Update as the guarded write.
func TestResourceConformance(t *testing.T) {
	guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard { return &resources{mode: mode} })
}

// resources is a fence.Guard made of one fence.Resource per name. A
// Resource takes no context: Check looks at it first, as a caller would.
type resources struct {
	mode fence.Mode
	mu   sync.Mutex
	m    map[string]*fence.Resource[struct{}]
}

func (g *resources) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	if g.m == nil {
		g.m = make(map[string]*fence.Resource[struct{}])
	}
	r := g.m[resource]
	if r == nil {
		r = fence.NewResource(resource, struct{}{}, g.mode)
		g.m[resource] = r
	}
	g.mu.Unlock()
	return r.Update(token, func(struct{}) (struct{}, error) { return struct{}{}, write() })
}
