package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// kv is the protected resource of these tests: named values, each with the
// token that wrote it.
type kv struct {
	mu     sync.Mutex
	vals   map[string]string
	tokens map[string]lease.Token
	runs   int // handler runs, accepted or not
}

func newKV() *kv {
	return &kv{vals: map[string]string{}, tokens: map[string]lease.Token{}}
}

func (s *kv) read(name string) (string, lease.Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[name], s.tokens[name]
}

// put is the guarded handler: it stores the body under the path's name,
// unless the body is "fail", which it answers 422 without writing.
func (s *kv) put(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs++
	if string(body) == "fail" {
		http.Error(w, "refusing to write fail", http.StatusUnprocessableEntity)
		return
	}
	token, ok := fence.TokenFromContext(r.Context())
	if !ok {
		http.Error(w, "no token in context", http.StatusInternalServerError)
		return
	}
	name := r.PathValue("name")
	s.vals[name], s.tokens[name] = string(body), token
	w.Header().Set("X-Written", name)
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "stored %s with token %d\n", name, token)
}

func (s *kv) get(w http.ResponseWriter, r *http.Request) {
	v, t := s.read(r.PathValue("name"))
	w.Header().Set(fence.TokenHeader, fence.FormatToken(t))
	_, _ = io.WriteString(w, v)
}

func pathName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if name == "" {
		return "", errors.New("no name in path")
	}
	return name, nil
}

// newServer starts a test server whose PUT /r/{name} is guarded by g and
// whose GET /r/{name} reads without a token.
func newServer(t *testing.T, g fence.Guard, s *kv) *httptest.Server {
	t.Helper()
	mw, err := fence.Middleware(g, pathName)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /r/{name}", mw(http.HandlerFunc(s.put)))
	mux.HandleFunc("GET /r/{name}", s.get)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status int
	header http.Header
	body   string
}

// put sends a PUT with the given Fencing-Token header values (none if
// tokens is nil).
func put(t *testing.T, c *http.Client, url, body string, tokens ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		req.Header.Add(fence.TokenHeader, tok)
	}
	return do(t, c, req)
}

func do(t *testing.T, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// apiError is the error body of the lease HTTP API.
type apiError struct {
	Error struct {
		Code     string       `json:"code"`
		Message  string       `json:"message"`
		Resource *string      `json:"resource"`
		Token    *lease.Token `json:"token"`
		Highest  *lease.Token `json:"highest"`
	} `json:"error"`
}

func decodeError(t *testing.T, r response) apiError {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	dec := json.NewDecoder(strings.NewReader(r.body))
	dec.DisallowUnknownFields()
	var e apiError
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e
}

func TestParseToken(t *testing.T) {
	valid := []struct {
		in   string
		want lease.Token
	}{
		{"1", 1},
		{"42", 42},
		{"9007199254740991", lease.MaxToken - 1},
		{"9007199254740992", lease.MaxToken},
	}
	for _, tc := range valid {
		got, err := fence.ParseToken(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d, nil", tc.in, got, err, tc.want)
		}
	}
	for _, in := range badTokens {
		got, err := fence.ParseToken(in)
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("ParseToken(%q) = %d, %v; want an error matching ErrInvalid", in, got, err)
		}
	}
}

// badTokens are Fencing-Token values that must be refused.
var badTokens = []string{
	"",
	"abc",
	"-1",
	"0",
	"00",
	"01",
	"1.5",
	"1e3",
	"0x10",
	"+1",
	" 1",
	"\t1",
	"1 ",
	"1 2",
	"١",                // an Arabic-Indic digit one
	"9007199254740993", // 2^53 + 1
	"18446744073709551615",
	"18446744073709551616",
	"99999999999999999999999999",
}

func TestMiddlewareRejectsBadTokenHeader(t *testing.T) {
	s := newKV()
	g := fence.NewMemory(fence.AtLeast)
	srv := newServer(t, g, s)
	cases := []struct {
		name   string
		tokens []string
	}{{name: "missing"}, {name: "twice", tokens: []string{"1", "1"}}}
	for _, b := range badTokens {
		cases = append(cases, struct {
			name   string
			tokens []string
		}{name: strconv.Quote(b), tokens: []string{b}})
	}
	mw, err := fence.Middleware(g, pathName)
	if err != nil {
		t.Fatal(err)
	}
	direct := http.NewServeMux()
	direct.Handle("PUT /r/{name}", mw(http.HandlerFunc(s.put)))
	check := func(t *testing.T, r response) {
		t.Helper()
		if r.status != http.StatusBadRequest {
			t.Fatalf("status %d, want 400; body %q", r.status, r.body)
		}
		e := decodeError(t, r)
		if e.Error.Code != "invalid" || !strings.HasPrefix(e.Error.Message, "lease: invalid argument: fence: ") {
			t.Errorf("error = %+v, want code invalid and a fence message", e.Error)
		}
		if e.Error.Resource != nil || e.Error.Token != nil || e.Error.Highest != nil {
			t.Errorf("invalid error carries stale-token fields: %q", r.body)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Straight into the handler: the middleware sees the value as given.
			req := httptest.NewRequest(http.MethodPut, "/r/job", strings.NewReader("v"))
			for _, tok := range tc.tokens {
				req.Header.Add(fence.TokenHeader, tok)
			}
			rec := httptest.NewRecorder()
			direct.ServeHTTP(rec, req)
			check(t, response{status: rec.Code, header: rec.Header(), body: rec.Body.String()})

			// Over the wire, HTTP itself strips spaces around a header value
			// (RFC 9110 section 5.5), so " 1" arrives as "1"; only values
			// without such padding can be tried end to end.
			if len(tc.tokens) == 1 && strings.TrimSpace(tc.tokens[0]) != tc.tokens[0] {
				return
			}
			check(t, put(t, srv.Client(), srv.URL+"/r/job", "v", tc.tokens...))
		})
	}
	if s.runs != 0 {
		t.Errorf("handler ran %d times for malformed tokens, want 0", s.runs)
	}
	if h := g.Highest("job"); h != 0 {
		t.Errorf("highest = %d after malformed tokens, want 0", h)
	}
}

// TestMiddlewareAnswers: the client gets the handler's own answer for an
// admitted write, whether it succeeded or failed, and for a stale token an
// error body in the shape of the lease HTTP API naming the resource, the
// token and the highest accepted. (guardtest checks what is admitted and
// recorded, through HTTP too.)
func TestMiddlewareAnswers(t *testing.T) {
	s := newKV()
	srv := newServer(t, fence.NewMemory(fence.Strict), s)
	c := srv.Client()

	r := put(t, c, srv.URL+"/r/job", "five", "5")
	if r.status != http.StatusCreated || r.body != "stored job with token 5\n" || r.header.Get("X-Written") != "job" {
		t.Fatalf("first write: %d %q %v, want the handler's 201 and its header", r.status, r.body, r.header)
	}
	r = put(t, c, srv.URL+"/r/job", "fail", "7")
	if r.status != http.StatusUnprocessableEntity || r.body != "refusing to write fail\n" {
		t.Fatalf("failing handler: %d %q, want its own 422 answer", r.status, r.body)
	}
	r = put(t, c, srv.URL+"/r/job", "three", "3")
	if r.status != http.StatusConflict {
		t.Fatalf("stale write: status %d, want 409; body %q", r.status, r.body)
	}
	want := `{"error":{"code":"stale_token","message":"fence: stale token 3 for \"job\": highest accepted is 5 (mode strict)","resource":"job","token":3,"highest":5}}` + "\n"
	if r.body != want {
		t.Errorf("stale body\n got %s\nwant %s", r.body, want)
	}
	if r.header.Get("X-Written") != "" {
		t.Errorf("stale answer carries the handler's header")
	}
	decodeError(t, r) // the shape parses with no unknown fields
	if v, tok := s.read("job"); v != "five" || tok != 5 || s.runs != 2 {
		t.Errorf("job = %q with token %d after %d handler runs, want five, 5, 2", v, tok, s.runs)
	}
}

func TestMiddlewareGuardMethods(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, guarded := fence.TokenFromContext(r.Context())
		fmt.Fprintf(w, "%s guarded=%v", r.Method, guarded)
	})
	all, err := fence.Middleware(g, func(*http.Request) (string, error) { return "job", nil })
	if err != nil {
		t.Fatal(err)
	}
	writes, err := fence.Middleware(g, func(*http.Request) (string, error) { return "job", nil }, fence.GuardMethods("PUT", "DELETE"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		mw     func(http.Handler) http.Handler
		method string
		token  string
		status int
		body   string
	}{
		{all, "GET", "", 400, ""},
		{all, "GET", "1", 200, "GET guarded=true"},
		{all, "POST", "1", 200, "POST guarded=true"},
		{writes, "GET", "", 200, "GET guarded=false"},
		{writes, "GET", "abc", 200, "GET guarded=false"},
		{writes, "POST", "", 200, "POST guarded=false"},
		{writes, "PUT", "", 400, ""},
		{writes, "DELETE", "1", 200, "DELETE guarded=true"},
	}
	for _, tc := range cases {
		req := httptest.NewRequest(tc.method, "/job", nil)
		if tc.token != "" {
			req.Header.Set(fence.TokenHeader, tc.token)
		}
		rec := httptest.NewRecorder()
		tc.mw(h).ServeHTTP(rec, req)
		if rec.Code != tc.status || (tc.body != "" && rec.Body.String() != tc.body) {
			t.Errorf("%s with token %q: %d %q, want %d %q", tc.method, tc.token, rec.Code, rec.Body.String(), tc.status, tc.body)
		}
	}
}

func TestMiddlewareResourceError(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	mw, err := fence.Middleware(g, func(*http.Request) (string, error) { return "", errors.New("path names no report") })
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	req := httptest.NewRequest("PUT", "/x", nil)
	req.Header.Set(fence.TokenHeader, "1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	want := `{"error":{"code":"invalid","message":"fence: request names no resource: path names no report"}}` + "\n"
	if rec.Code != http.StatusBadRequest || rec.Body.String() != want || ran {
		t.Errorf("got %d %q (handler ran: %v), want 400 %q", rec.Code, rec.Body.String(), ran, want)
	}
}

// commitFails is a guard whose write runs but whose recording then fails,
// as a guard in a database does when its commit fails.
type commitFails struct{ *fence.Memory }

func (g commitFails) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	if err := g.Memory.Check(ctx, resource, token, write); err != nil {
		return err
	}
	return fmt.Errorf("%w: commit failed", lease.ErrUnavailable)
}

func TestMiddlewareGuardFailureHidesHandlerSuccess(t *testing.T) {
	mw, err := fence.Middleware(commitFails{fence.NewMemory(fence.AtLeast)}, func(*http.Request) (string, error) { return "job", nil })
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Written", "yes")
		_, _ = io.WriteString(w, "stored")
	}))
	req := httptest.NewRequest("PUT", "/job", nil)
	req.Header.Set(fence.TokenHeader, "4")
	rec := httptest.NewRecorder()
	rec.Header().Set("X-Outer", "kept")
	h.ServeHTTP(rec, req)
	want := `{"error":{"code":"unavailable","message":"fence: guard for \"job\" failed: lease: backend unavailable: commit failed"}}` + "\n"
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != want {
		t.Errorf("got %d %q, want 503 %q", rec.Code, rec.Body.String(), want)
	}
	if rec.Header().Get("X-Written") != "" || rec.Header().Get("X-Outer") != "kept" {
		t.Errorf("headers %v: want the outer header kept and the handler's dropped", rec.Header())
	}
}

func TestMiddlewareBuffersHandlerResponse(t *testing.T) {
	mw, err := fence.Middleware(fence.NewMemory(fence.AtLeast), func(*http.Request) (string, error) { return "job", nil })
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		h          http.HandlerFunc
		wantStatus int
		wantBody   string
	}{
		{"nothing written", func(http.ResponseWriter, *http.Request) {}, 200, ""},
		{"write without header", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "a")
			_, _ = io.WriteString(w, "b")
		}, 200, "ab"},
		{"second WriteHeader ignored", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202); w.WriteHeader(500) }, 202, ""},
		{"informational dropped", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(103); w.WriteHeader(204) }, 204, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("PUT", "/job", nil)
			req.Header.Set(fence.TokenHeader, "1")
			rec := httptest.NewRecorder()
			mw(tc.h).ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus || rec.Body.String() != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", rec.Code, rec.Body.String(), tc.wantStatus, tc.wantBody)
			}
		})
	}
}

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

func TestMiddlewareValidatesArguments(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	res := func(*http.Request) (string, error) { return "r", nil }
	cases := []struct {
		name string
		g    fence.Guard
		res  func(*http.Request) (string, error)
		opts []fence.MiddlewareOption
	}{
		{"nil guard", nil, res, nil},
		{"nil resource", g, nil, nil},
		{"nil option", g, res, []fence.MiddlewareOption{nil}},
		{"no methods", g, res, []fence.MiddlewareOption{fence.GuardMethods()}},
		{"empty method", g, res, []fence.MiddlewareOption{fence.GuardMethods("PUT", "")}},
	}
	for _, tc := range cases {
		mw, err := fence.Middleware(tc.g, tc.res, tc.opts...)
		if !errors.Is(err, lease.ErrInvalid) || mw != nil {
			t.Errorf("%s: got %v, %v; want nil and an error matching ErrInvalid", tc.name, mw != nil, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	for _, s := range append([]string{"1", "42", "9007199254740992"}, badTokens...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fence.ParseToken(s)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("ParseToken(%q): error %v does not match ErrInvalid", s, err)
			}
			return
		}
		if tok < 1 || tok > lease.MaxToken {
			t.Fatalf("ParseToken(%q) = %d, outside [1, 2^53]", s, tok)
		}
		if fence.FormatToken(tok) != s {
			t.Fatalf("ParseToken(%q) = %d, which formats as %q: two spellings of one token", s, tok, fence.FormatToken(tok))
		}
	})
}

// TestSeedScenarioOverHTTP replays the seed's scenario against a guarded
// HTTP service: worker A's lease expires while it is paused, worker B takes
// the lease and writes, and A's late write is rejected by the guard.
func TestSeedScenarioOverHTTP(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memtest.New(t, memstore.WithClock(clock))
	s := newKV()
	srv := newServer(t, fence.NewMemory(fence.AtLeast), s)
	const ttl = 100 * time.Millisecond

	// Worker A acquires and then pauses: it never renews, and its process
	// does not notice the lease expiring, so it still sends token 1.
	a, err := store.Acquire(ctx, "job", "worker-a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != 1 {
		t.Fatalf("worker A's token = %d, want 1", a.Token)
	}
	if _, err := store.Acquire(ctx, "job", "worker-b", ttl); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("worker B acquiring before A's expiry: %v, want ErrHeld", err)
	}
	clock.Advance(ttl + time.Millisecond)

	// Worker B acquires through a Client and writes through a transport
	// stamping its hold's token.
	cb, err := lease.NewClient(store, lease.WithOwner("worker-b"), lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := cb.TryAcquire(ctx, "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := hb.Release(ctx); err != nil {
			t.Errorf("release B: %v", err)
		}
	}()
	if hb.Token() != 2 {
		t.Fatalf("worker B's token = %d, want 2", hb.Token())
	}
	tb, err := fence.NewHoldTransport(hb, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}
	r := put(t, &http.Client{Transport: tb}, srv.URL+"/r/job", "written-by-b")
	if r.status != http.StatusCreated {
		t.Fatalf("B's write: %d %q", r.status, r.body)
	}

	clock.Advance(time.Millisecond)
	ta := &fence.Transport{Base: srv.Client().Transport, Token: func() (lease.Token, error) { return a.Token, nil }}
	r = put(t, &http.Client{Transport: ta}, srv.URL+"/r/job", "late-write-by-a")
	if r.status != http.StatusConflict {
		t.Fatalf("A's late write: %d %q, want 409", r.status, r.body)
	}
	if e := decodeError(t, r); e.Error.Code != "stale_token" || *e.Error.Token != 1 || *e.Error.Highest != 2 || *e.Error.Resource != "job" {
		t.Errorf("A's late write: error %q, want stale_token naming job, 1 and 2", r.body)
	}
	if err := store.Release(ctx, a); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("A's release of its expired lease: %v, want ErrNotHeld", err)
	}

	got := do(t, srv.Client(), mustRequest(t, http.MethodGet, srv.URL+"/r/job"))
	if got.body != "written-by-b" || got.header.Get(fence.TokenHeader) != "2" {
		t.Errorf("final state %q with token %s, want written-by-b with token 2", got.body, got.header.Get(fence.TokenHeader))
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
