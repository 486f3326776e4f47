package leasehttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// Every server the tests of this package start is made by newServer, whose
// handler checks each request it serves and each answer it gives against
// openapi.json (the spec below): the document cannot drift from the server
// without some test failing.
//
// A request the document refuses must be answered 4xx. A request on a
// documented path is checked with openapi3filter, its answer must be one of
// the operation's documented responses (status, required headers, body
// schema); a path the document lacks must be answered 404 or 400, a method
// it lacks 405 with an Allow header naming exactly the documented methods,
// each with the error body. Every header an answer carries must be one the
// document declares for it (those of the Invalid response, and Allow on a
// 405, for an answer no operation documents), but for its framing. The
// document may be looser than the server (it cannot say "512 bytes" or "no
// repeated member"), never stricter.

// spec is openapi.json, loaded and validated once.
var spec = sync.OnceValues(func() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(leasehttp.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("loading openapi.json: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
	}
	return doc, nil
})

// An event stream is text: the document says it is a string, and the
// stream's own format is checked by the watch tests.
func init() {
	openapi3filter.RegisterBodyDecoder("text/event-stream", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(r)
		return string(b), err
	})
}

func mustSpec(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// checkedServer is a Server whose ServeHTTP checks requests and answers
// against the document; the rest of the Server's methods are its own.
type checkedServer struct {
	*leasehttp.Server
	handler http.Handler
}

func (s *checkedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// newServer is leasehttp.NewServer for the tests: quiet unless opts give a
// logger, closed when the test ends, and checked against the document.
func newServer(t testing.TB, b lease.Backend, opts ...leasehttp.ServerOption) *checkedServer {
	t.Helper()
	srv, err := leasehttp.NewServer(b, append([]leasehttp.ServerOption{leasehttp.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return &checkedServer{Server: srv, handler: checkAPI(t, srv)}
}

// checkAPI wraps h so that every request it serves and every answer it
// gives is checked against the document; a mismatch fails t.
func checkAPI(t testing.TB, h http.Handler) http.Handler {
	doc := mustSpec(t)
	return &apiChecker{doc: doc, next: h, report: func(err error) { t.Errorf("openapi.json: %v", err) }}
}

type apiChecker struct {
	doc    *openapi3.T
	next   http.Handler
	report func(error)
}

func (c *apiChecker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := &teeBody{}
	if r.Body != nil && r.Body != http.NoBody {
		body.ReadCloser = r.Body
		r.Body = body
	} else {
		body.eof = true
	}
	rec := &recordingWriter{ResponseWriter: w}
	c.next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status == 499 && r.Context().Err() != nil {
		return // the client hung up: nothing was answered
	}
	if err := c.check(r, body, rec); err != nil {
		c.report(fmt.Errorf("%s %s → %d %s: %w", r.Method, r.URL.RequestURI(), rec.status, truncate(rec.body.String()), err))
	}
}

func truncate(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// check judges one exchange.
func (c *apiChecker) check(r *http.Request, body *teeBody, rec *recordingWriter) error {
	ctx := context.Background()
	path, item, params, ok := c.findPath(r.URL.EscapedPath())
	if !ok {
		if rec.status != http.StatusNotFound && rec.status != http.StatusBadRequest {
			return errors.New("the document has no such path, so the server must answer 404 or 400")
		}
		return errors.Join(c.checkErrorBody(rec, "invalid"), c.undocumentedHeaders(rec.header, c.invalidHeaders()))
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet // every GET route answers HEAD, without the body
	}
	op := item.GetOperation(method)
	if op == nil {
		if rec.status != http.StatusMethodNotAllowed {
			return fmt.Errorf("the document has no %s on %s, so the server must answer 405", r.Method, path)
		}
		var want []string
		for m := range item.Operations() {
			want = append(want, m)
			if m == http.MethodGet {
				want = append(want, http.MethodHead)
			}
		}
		got := strings.Split(rec.header.Get("Allow"), ", ")
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("Allow: %q, but the document has methods %q", rec.header.Get("Allow"), want)
		}
		return errors.Join(c.checkErrorBody(rec, "invalid"), c.undocumentedHeaders(rec.header, c.invalidHeaders(), "Allow"))
	}

	req := r.Clone(ctx)
	req.Method = method
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
		// The server reads the body only after the route, the credentials
		// and the Content-Type pass; a body it did not read to its end
		// (answered 401, 413, 408, …) is not checked.
		ExcludeRequestBody:  !body.eof,
		ExcludeResponseBody: r.Method == http.MethodHead,
	}
	opts.WithCustomSchemaErrorFunc(func(e *openapi3.SchemaError) string {
		return fmt.Sprintf("at /%s: %s", strings.Join(e.JSONPointer(), "/"), e.Reason)
	})
	req.Body = io.NopCloser(bytes.NewReader(body.buf.Bytes()))
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      &routers.Route{Spec: c.doc, Path: path, PathItem: item, Method: method, Operation: op},
		Options:    opts,
	}
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && (rec.status < 400 || rec.status >= 500) {
		return fmt.Errorf("the document refuses the request (%v), but the server answered %d", reqErr, rec.status)
	}
	err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 rec.status,
		Header:                 rec.header,
		Body:                   io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Options:                opts,
	})
	if err != nil {
		return fmt.Errorf("the answer is not one the document gives: %w", err)
	}
	if resp := op.Responses.Status(rec.status); resp != nil && resp.Value != nil {
		return c.undocumentedHeaders(rec.header, resp.Value.Headers)
	}
	return nil
}

// framingHeaders are the answer headers the document does not declare:
// the body's type, which the response's content says (OpenAPI ignores a
// Content-Type header), and its length and the connection's fate, which
// net/http manages below the API.
var framingHeaders = []string{"Content-Type", "Content-Length", "Transfer-Encoding", "Connection"}

// undocumentedHeaders returns an error naming each header of h that is
// neither declared nor framing nor among also.
func (c *apiChecker) undocumentedHeaders(h http.Header, declared openapi3.Headers, also ...string) error {
	var extra []string
	for name := range h {
		ok := slices.Contains(framingHeaders, name) || slices.ContainsFunc(also, func(a string) bool { return http.CanonicalHeaderKey(a) == name })
		for d := range declared {
			ok = ok || http.CanonicalHeaderKey(d) == name
		}
		if !ok {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	slices.Sort(extra)
	return fmt.Errorf("the answer carries headers the document does not declare for it: %q", extra)
}

// invalidHeaders are the headers the document declares for an invalid
// answer: what an answer no operation documents (no route, a method the
// path lacks) may carry.
func (c *apiChecker) invalidHeaders() openapi3.Headers {
	if r := c.doc.Components.Responses["Invalid"]; r != nil && r.Value != nil {
		return r.Value.Headers
	}
	return nil
}

// findPath matches the escaped request path against the document's path
// templates segment by segment, as the server's router does: a template
// parameter is exactly one segment, percent-decoded (so a key "a/b" sent as
// a%2Fb is one segment), and never an empty one or a dot segment
// ("/v1/leases/" and "/v1/leases/." name no key: the server answers them
// 400 whatever the method; a key "." travels as %2E).
func (c *apiChecker) findPath(escaped string) (string, *openapi3.PathItem, map[string]string, bool) {
	segs := strings.Split(escaped, "/")
	for path, item := range c.doc.Paths.Map() {
		tmpl := strings.Split(path, "/")
		if len(tmpl) != len(segs) {
			continue
		}
		params := map[string]string{}
		match := true
		for i, ts := range tmpl {
			if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") {
				v, err := url.PathUnescape(segs[i])
				if err != nil || segs[i] == "" || segs[i] == "." || segs[i] == ".." {
					match = false
					break
				}
				params[ts[1:len(ts)-1]] = v
				continue
			}
			if ts != segs[i] {
				match = false
				break
			}
		}
		if match {
			return path, item, params, true
		}
	}
	return "", nil, nil, false
}

// checkErrorBody checks an answer no operation documents (no route, wrong
// method) against the error schema, with the given code.
func (c *apiChecker) checkErrorBody(rec *recordingWriter, code string) error {
	if ct := rec.header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("error answer with Content-Type %q, want application/json", ct)
	}
	var v any
	if err := json.Unmarshal(rec.body.Bytes(), &v); err != nil {
		return fmt.Errorf("error answer is not JSON: %w", err)
	}
	schema := c.doc.Components.Schemas["Error"].Value
	if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("error answer does not match the Error schema: %w", err)
	}
	if got := v.(map[string]any)["error"].(map[string]any)["code"]; got != code {
		return fmt.Errorf("error code %q, want %q", got, code)
	}
	return nil
}

// teeBody keeps what the server reads of a request body, and whether it
// read it to the end.
type teeBody struct {
	io.ReadCloser
	buf bytes.Buffer
	eof bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// recordingWriter passes an answer on and keeps a copy of it.
type recordingWriter struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.body.Write(p)
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (the server sets
// deadlines through it).
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestOpenAPIDocument: the document is a valid OpenAPI 3.1 document and
// lists every route the server has; the server serves it, byte for byte,
// to any Host and without credentials. A server given a store id names it
// in every answer, each of which the document declares with its headers
// (newServer's check).
func TestOpenAPIDocument(t *testing.T) {
	doc := mustSpec(t)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
	const store = "etcd:lease%2F:0123456789abcdef"
	srv := newServer(t, newMem(t), leasehttp.WithStoreID(store),
		leasehttp.WithCredentials([]leasehttp.Credential{{Token: "a-token-long-enough-for-tests", Prefixes: []string{"*"}}}))
	open := newServer(t, newMem(t))
	for _, s := range []*checkedServer{srv, open} {
		for _, host := range []string{"127.0.0.1", "lease.example"} {
			req, err := http.NewRequest("GET", "http://"+host+"/v1/openapi.json", nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := serveRequest(s, req)
			if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), leasehttp.OpenAPI()) {
				t.Errorf("GET /v1/openapi.json with Host %s: HTTP %d, %d bytes; want 200 and the document", host, rec.Code, rec.Body.Len())
			}
		}
	}
	// Every documented operation has a route: a request for it is not
	// answered as a path or method the server does not know.
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			target := strings.ReplaceAll(path, "{key}", "k")
			// A stream (the watch) ends when its request does: soon.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, "http://"+loopbackHost+target, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer a-token-long-enough-for-tests")
			rec := serveRequest(srv, req)
			var body struct{ Error struct{ Message string } }
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code == http.StatusMethodNotAllowed || rec.Code == http.StatusNotFound && strings.Contains(body.Error.Message, "no route") {
				t.Errorf("documented %s %s: HTTP %d %s", method, path, rec.Code, rec.Body)
			}
			if got := rec.Header().Get(leasehttp.StoreHeader); got != store {
				t.Errorf("%s %s: HTTP %d with %s %q, want %q", method, path, rec.Code, leasehttp.StoreHeader, got, store)
			}
		}
	}
	// And the answers no operation documents, and the errors: no route, a
	// method the path lacks, no token, a body too large or not JSON, a
	// server shutting down.
	for _, x := range []struct{ method, target, auth, contentType, body string }{
		{"GET", "/v1/nothing", "Bearer a-token-long-enough-for-tests", "", ""},
		{"DELETE", "/v1/leases/k", "Bearer a-token-long-enough-for-tests", "", ""},
		{"GET", "/v1/leases/k", "", "", ""},
		{"POST", "/v1/leases/k/acquire", "Bearer a-token-long-enough-for-tests", "text/plain", "{}"},
		{"POST", "/v1/leases/k/acquire", "Bearer a-token-long-enough-for-tests", "application/json", strings.Repeat(" ", leasehttp.MaxBodyBytes+1)},
	} {
		req := httptest.NewRequest(x.method, x.target, strings.NewReader(x.body))
		req.Host = loopbackHost
		if x.auth != "" {
			req.Header.Set("Authorization", x.auth)
		}
		if x.contentType != "" {
			req.Header.Set("Content-Type", x.contentType)
		}
		rec := serveRequest(srv, req)
		if rec.Code < 400 || rec.Header().Get(leasehttp.StoreHeader) != store {
			t.Errorf("%s %s: HTTP %d with %s %q; want an error with %q", x.method, x.target, rec.Code, leasehttp.StoreHeader, rec.Header().Get(leasehttp.StoreHeader), store)
		}
	}
	srv.Close()
	if rec := serve(srv, "GET", "/readyz", "", nil); rec.Code != http.StatusServiceUnavailable || rec.Header().Get(leasehttp.StoreHeader) != store {
		t.Errorf("GET /readyz of a closed server: HTTP %d with %s %q; want 503 with %q", rec.Code, leasehttp.StoreHeader, rec.Header().Get(leasehttp.StoreHeader), store)
	}
}

// TestOpenAPIMetricsMediaTypes: /metrics answers each media type the
// document declares for it when Accept asks for that one.
func TestOpenAPIMetricsMediaTypes(t *testing.T) {
	srv := newServer(t, newMem(t))
	op := mustSpec(t).Paths.Value("/metrics").Get
	content := op.Responses.Status(http.StatusOK).Value.Content
	if len(content) == 0 {
		t.Fatal("the document declares no media type for /metrics")
	}
	for mt := range content {
		accept := mt
		if mt == "application/vnd.google.protobuf" {
			// Prometheus's protobuf is asked for with its message and encoding.
			accept += ";proto=io.prometheus.client.MetricFamily;encoding=delimited"
		}
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", accept)
		rec := serveRequest(srv, req)
		got, _, _ := strings.Cut(rec.Header().Get("Content-Type"), ";")
		if rec.Code != http.StatusOK || strings.TrimSpace(got) != mt {
			t.Errorf("GET /metrics with Accept: %s: HTTP %d, Content-Type %q; want 200 and %s, as the document says", accept, rec.Code, rec.Header().Get("Content-Type"), mt)
		}
	}
}

// TestOpenAPICheckCatchesDrift is the check's negative control: answers and
// requests that the document does not allow are reported.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	doc := mustSpec(t)
	leaseBody := `{"key":"k","owner":"o","token":1,"ttl_ms":1000,"expires_at":"2026-12-02T10:00:00.000Z"}`
	cases := []struct {
		name, method, target, reqBody string
		status                        int
		answer                        string
	}{
		{"get answers an id", "GET", "/v1/leases/k", "", 200,
			`{"key":"k","owner":"o","token":1,"id":"0123456789abcdef0123456789abcdef","ttl_ms":1000,"expires_at":"2026-12-02T10:00:00.000Z"}`},
		{"token as a string", "GET", "/v1/leases/k", "", 200, strings.Replace(leaseBody, `"token":1`, `"token":"1"`, 1)},
		{"expiry without milliseconds", "GET", "/v1/leases/k", "", 200, strings.Replace(leaseBody, ".000Z", "Z", 1)},
		{"undocumented status", "GET", "/v1/leases/k", "", 409, `{"error":{"code":"held","message":"leasehttp: held"}}`},
		{"wrong code for the status", "GET", "/v1/leases/k", "", 404, `{"error":{"code":"invalid","message":"leasehttp: x"}}`},
		{"held without a message", "POST", "/v1/leases/k/acquire", `{"owner":"o","ttl_ms":1000}`, 409, `{"error":{"code":"held"}}`},
		{"refused request granted", "POST", "/v1/leases/k/acquire", `{"owner":"o","ttl_ms":5}`, 200,
			`{"key":"k","owner":"o","token":1,"id":"0123456789abcdef0123456789abcdef","ttl_ms":5,"expires_at":"2026-12-02T10:00:00.000Z"}`},
		{"unknown path answered 200", "GET", "/v1/nothing", "", 200, `{}`},
		{"405 without the error body", "DELETE", "/v1/leases/k", "", 405, `method not allowed`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var reported []error
			h := &apiChecker{doc: doc, report: func(err error) { reported = append(reported, err) },
				next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.ReadAll(r.Body)
					setJSONHeaders(w.Header())
					if tc.status == http.StatusMethodNotAllowed {
						w.Header().Set("Allow", "GET, HEAD")
					}
					w.WriteHeader(tc.status)
					_, _ = io.WriteString(w, tc.answer)
				})}
			serve(h, tc.method, tc.target, "application/json", []byte(tc.reqBody))
			if len(reported) == 0 {
				t.Errorf("%s %s answered %d %s: no mismatch reported", tc.method, tc.target, tc.status, tc.answer)
			}
		})
	}
	// A header the document does not declare for the answer, or declares
	// otherwise, is reported: on a lease, on an answer with no route, on
	// a 405.
	for _, tc := range []struct{ name, method, target, header, value string }{
		{"undeclared header", "GET", "/v1/leases/k", "X-Powered-By", "lease"},
		{"Allow on a 200", "GET", "/v1/leases/k", "Allow", "GET, HEAD"},
		{"store id with a space", "GET", "/v1/leases/k", leasehttp.StoreHeader, "a store"},
		{"undeclared header without a route", "GET", "/v1/nothing", "X-Powered-By", "lease"},
		{"undeclared header on a 405", "DELETE", "/v1/leases/k", "X-Powered-By", "lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reported []error
			h := &apiChecker{doc: doc, report: func(err error) { reported = append(reported, err) }, next: answerRight(leaseBody, tc.header, tc.value)}
			serve(h, tc.method, tc.target, "", nil)
			if len(reported) == 0 {
				t.Errorf("%s %s answered with %s: %s: no mismatch reported", tc.method, tc.target, tc.header, tc.value)
			}
		})
	}
	// The same exchanges done right pass, with the store's id or without.
	for _, store := range []string{"", "etcd:lease%2F:0123456789abcdef"} {
		for _, x := range [][2]string{{"GET", "/v1/leases/k"}, {"GET", "/v1/nothing"}, {"DELETE", "/v1/leases/k"}} {
			var reported []error
			h := &apiChecker{doc: doc, report: func(err error) { reported = append(reported, err) }, next: answerRight(leaseBody, leasehttp.StoreHeader, store)}
			serve(h, x[0], x[1], "", nil)
			if len(reported) > 0 {
				t.Errorf("a documented answer to %s %s (store %q) was reported: %v", x[0], x[1], store, reported)
			}
		}
	}
}

// setJSONHeaders sets the headers every JSON answer of the server carries.
func setJSONHeaders(h http.Header) {
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
}

// answerRight answers as the server does: leaseBody to a GET of a lease,
// 405 with Allow to another method on its path, 404 to any other path,
// each with the header name: value too unless value is empty.
func answerRight(leaseBody, name, value string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setJSONHeaders(w.Header())
		if value != "" {
			w.Header().Set(name, value)
		}
		switch {
		case r.URL.Path != "/v1/leases/k":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"invalid","message":"leasehttp: no route"}}`)
		case r.Method != http.MethodGet:
			w.Header().Set("Allow", "GET, HEAD")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = io.WriteString(w, `{"error":{"code":"invalid","message":"leasehttp: method not allowed"}}`)
		default:
			_, _ = io.WriteString(w, leaseBody)
		}
	})
}

// TestOpenAPIIDAgreesWithServer: the document's ID schema accepts exactly
// the strings the server takes for a lease's ID (lease.ParseID): 32 hex
// digits in either case, not all zero.
func TestOpenAPIIDAgreesWithServer(t *testing.T) {
	schema := mustSpec(t).Components.Schemas["ID"].Value
	for _, s := range []string{
		strings.Repeat("0", 32), // the zero ID, which the server refuses
		strings.Repeat("0", 31) + "1",
		"1" + strings.Repeat("0", 31),
		strings.Repeat("F", 32),
		"0123456789abcdefABCDEF0123456789",
		lease.NewID().Reveal(),
		strings.Repeat("0", 31),
		strings.Repeat("a", 33),
		strings.Repeat("0", 31) + "g",
		"",
	} {
		_, perr := lease.ParseID(s)
		verr := schema.VisitJSON(s, openapi3.EnableJSONSchema2020())
		if (perr == nil) != (verr == nil) {
			t.Errorf("ID %q: the server says %v, the document says %v", s, perr, verr)
		}
	}
}

// TestOpenAPITicketAgreesWithServer: the document's schema of an
// acquire's ticket accepts exactly the tickets the server takes: 32 hex
// digits, not all zero, as an ID. It allowed the zero ticket, which the
// server refuses 400.
func TestOpenAPITicketAgreesWithServer(t *testing.T) {
	schema := mustSpec(t).Components.Schemas["AcquireRequest"].Value.Properties["ticket"].Value
	h, _ := heldLease(t)
	for _, s := range []string{
		strings.Repeat("0", 32),
		strings.Repeat("0", 31) + "1",
		strings.Repeat("F", 32),
		lease.NewID().Reveal(),
		strings.Repeat("0", 31),
		strings.Repeat("a", 33),
		strings.Repeat("0", 31) + "g",
		"",
	} {
		rec := serve(h, "POST", "/v1/leases/ticket/acquire", "application/json", []byte(`{"owner":"o","ttl_ms":100,"ticket":"`+s+`"}`))
		verr := schema.VisitJSON(s, openapi3.EnableJSONSchema2020())
		if (rec.Code != http.StatusBadRequest) != (verr == nil) {
			t.Errorf("ticket %q: the server answers %d %s, the document says %v", s, rec.Code, rec.Body, verr)
		}
	}
}

// TestGuardedRoutesAgree: the operations the document gives the API's
// security (all but those with "security": []) are exactly those that a
// server with credentials answers 401 without a token and a server without
// credentials answers 403 under a Host neither loopback nor allowed; and
// the document's description and DESIGN.md, where they name the routes so
// guarded, name exactly those.
func TestGuardedRoutesAgree(t *testing.T) {
	doc := mustSpec(t)
	const token = "a-token-long-enough-for-tests"
	withCreds := newServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{{Token: token, Prefixes: []string{"*"}}}))
	open := newServer(t, newMem(t))
	guarded := map[string]bool{} // by the path's first two segments: "/v1/leases"
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			needs := op.Security == nil // the document's own: a token where the server has credentials
			if needs {
				guarded["/"+strings.Join(strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)[:2], "/")] = true
			}
			for _, tc := range []struct {
				srv    *checkedServer
				host   string
				status int
			}{{withCreds, loopbackHost, http.StatusUnauthorized}, {open, "lease.example", http.StatusForbidden}} {
				// A watch the server wrongly let in would stream until ctx ends.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req := httptest.NewRequestWithContext(ctx, method, strings.ReplaceAll(path, "{key}", "k"), strings.NewReader("{}"))
				req.Host = tc.host
				req.Header.Set("Content-Type", "application/json")
				rec := serveRequest(tc.srv, req)
				cancel()
				if (rec.Code == tc.status) != needs {
					t.Errorf("%s %s with Host %s and no token: HTTP %d, but the document says it needs a token: %v", method, path, tc.host, rec.Code, needs)
				}
			}
		}
	}
	var want []string
	for r := range guarded {
		want = append(want, r)
	}
	slices.Sort(want)
	names := regexp.MustCompile("`(/[^`]*)`")
	routesIn := func(where, text, before, after string) {
		t.Helper()
		text = strings.Join(strings.Fields(text), " ")
		_, rest, ok := strings.Cut(text, before)
		list, _, ok2 := strings.Cut(rest, after)
		if !ok || !ok2 {
			t.Errorf("%s: no %q… %q", where, before, after)
			return
		}
		var got []string
		for _, m := range names.FindAllStringSubmatch(list, -1) {
			got = append(got, m[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s names %q as the routes %s… %s; the routes that need a token are %q", where, got, before, after, want)
		}
	}
	routesIn("openapi.json's description", doc.Info.Description, "Without credentials the server answers", "requests only when their `Host` is loopback")
	routesIn("openapi.json's description", doc.Info.Description, "With credentials every", "request needs `Authorization: Bearer TOKEN`")
	design, err := os.ReadFile("../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	routesIn("DESIGN.md", string(design), "A server without credentials answers", "only for a loopback `Host`")
}
