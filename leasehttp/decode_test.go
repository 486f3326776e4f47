package leasehttp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// errorCodes are the codes the API may answer.
var errorCodes = map[string]bool{
	"held": true, "not_held": true, "stale_token": true, "not_found": true, "invalid": true,
	"unauthorized": true, "forbidden": true, "unavailable": true,
}

// checkAnswer fails unless the answer is below 500 and, if an error, the
// JSON error body with a known code.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s: HTTP %d: %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: HTTP %d with Content-Type %q: %s", what, rec.Code, ct, rec.Body)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || !errorCodes[body.Error.Code] || body.Error.Message == "" {
		t.Fatalf("%s: HTTP %d with a body that is not an API error (%v): %s", what, rec.Code, err, rec.Body)
	}
}

// heldLease sets up a server over memstore with one lease held on "k".
func heldLease(t *testing.T) (http.Handler, lease.Lease) {
	t.Helper()
	store := memtest.New(t)
	srv := newServer(t, store, leasehttp.WithMaxWait(0))
	l, err := store.Acquire(ctxFor(t), "k", "holder", lease.MaxTTL)
	if err != nil {
		t.Fatal(err)
	}
	return srv, l
}

// loopbackHost is the Host of the requests made here: the servers have no
// credentials, so they answer only requests addressed to loopback (rather
// than httptest's example.com).
const loopbackHost = "localhost"

func serve(h http.Handler, method, target, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	req.Host = loopbackHost
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return serveRequest(h, req)
}

// httptestRequest is an acquire of "gone" under ctx.
func httptestRequest(ctx context.Context, body string) *http.Request {
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/leases/gone/acquire", strings.NewReader(body))
	req.Host = loopbackHost
	req.Header.Set("Content-Type", "application/json")
	return req
}

func serveRequest(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestDecodersRefuseBadBodies(t *testing.T) {
	h, held := heldLease(t)
	id := held.ID.Reveal()
	big := `{"owner":"` + strings.Repeat("a", leasehttp.MaxBodyBytes) + `","ttl_ms":100}`
	padded := `{"owner":"a","ttl_ms":100}` + strings.Repeat(" ", leasehttp.MaxBodyBytes)
	cases := []struct {
		name, route, body string
		status            int
	}{
		{"empty", "acquire", ``, 400},
		{"whitespace only", "acquire", "  \n", 400},
		{"truncated", "acquire", `{"owner":"a",`, 400},
		{"open brace", "acquire", `{`, 400},
		{"not JSON", "acquire", `owner=a&ttl_ms=100`, 400},
		{"array", "acquire", `[]`, 400},
		{"string", "acquire", `"x"`, 400},
		{"null", "acquire", `null`, 400},
		{"missing ttl", "acquire", `{"owner":"a"}`, 400},
		{"missing owner", "acquire", `{"ttl_ms":100}`, 400},
		{"owner number", "acquire", `{"owner":1,"ttl_ms":100}`, 400},
		{"owner null", "acquire", `{"owner":null,"ttl_ms":100}`, 400},
		{"owner object", "acquire", `{"owner":{},"ttl_ms":100}`, 400},
		{"ttl string", "acquire", `{"owner":"a","ttl_ms":"100"}`, 400},
		{"ttl null", "acquire", `{"owner":"a","ttl_ms":null}`, 400},
		{"ttl bool", "acquire", `{"owner":"a","ttl_ms":true}`, 400},
		{"ttl fraction", "acquire", `{"owner":"a","ttl_ms":100.5}`, 400},
		{"ttl point zero", "acquire", `{"owner":"a","ttl_ms":100.0}`, 400},
		{"ttl exponent", "acquire", `{"owner":"a","ttl_ms":1e3}`, 400},
		{"ttl negative", "acquire", `{"owner":"a","ttl_ms":-100}`, 400},
		{"ttl minus zero", "acquire", `{"owner":"a","ttl_ms":-0}`, 400},
		{"ttl zero", "acquire", `{"owner":"a","ttl_ms":0}`, 400},
		{"ttl below minimum", "acquire", `{"owner":"a","ttl_ms":9}`, 400},
		{"ttl above maximum", "acquire", `{"owner":"a","ttl_ms":86400001}`, 400},
		{"ttl 2^64", "acquire", `{"owner":"a","ttl_ms":18446744073709551616}`, 400},
		{"ttl huge", "acquire", `{"owner":"a","ttl_ms":` + strings.Repeat("9", 400) + `}`, 400},
		{"unknown field", "acquire", `{"owner":"a","ttl_ms":100,"priority":1}`, 400},
		{"wrong case", "acquire", `{"OWNER":"a","ttl_ms":100}`, 400},
		{"repeated field", "acquire", `{"owner":"a","owner":"b","ttl_ms":100}`, 400},
		{"empty owner", "acquire", `{"owner":"","ttl_ms":100}`, 400},
		{"owner NUL", "acquire", `{"owner":"a\u0000b","ttl_ms":100}`, 400},
		{"owner newline", "acquire", `{"owner":"a\nb","ttl_ms":100}`, 400},
		{"owner too long", "acquire", `{"owner":"` + strings.Repeat("o", lease.MaxKeyLen+1) + `","ttl_ms":100}`, 400},
		{"trailing garbage", "acquire", `{"owner":"a","ttl_ms":100} x`, 400},
		{"second object", "acquire", `{"owner":"a","ttl_ms":100}{}`, 400},
		{"trailing brace", "acquire", `{"owner":"a","ttl_ms":100}}`, 400},
		{"wait negative", "acquire", `{"owner":"a","ttl_ms":100,"wait_ms":-5}`, 400},
		{"wait bool", "acquire", `{"owner":"a","ttl_ms":100,"wait_ms":true}`, 400},
		{"wait fraction", "acquire", `{"owner":"a","ttl_ms":100,"wait_ms":0.5}`, 400},
		{"wait above maximum", "acquire", `{"owner":"a","ttl_ms":100,"wait_ms":3600001}`, 400},
		{"wait 2^64-1", "acquire", `{"owner":"a","ttl_ms":100,"wait_ms":18446744073709551615}`, 400},
		{"owner invalid UTF-8", "acquire", "{\"owner\":\"a\xffb\",\"ttl_ms\":100}", 400},
		{"owner truncated UTF-8", "acquire", "{\"owner\":\"a\xc3\",\"ttl_ms\":100}", 400},
		{"owner lone high surrogate", "acquire", `{"owner":"a\ud83db","ttl_ms":100}`, 400},
		{"owner lone low surrogate", "acquire", `{"owner":"a\ude00","ttl_ms":100}`, 400},
		{"owner surrogates reversed", "acquire", `{"owner":"\ude00\ud83d","ttl_ms":100}`, 400},
		{"owner high surrogate twice", "acquire", `{"owner":"\ud83d\ud83d\ude00","ttl_ms":100}`, 400},
		{"owner surrogate at end", "acquire", `{"owner":"a\ud83d","ttl_ms":100}`, 400},
		{"body over 64 KiB", "acquire", big, 413},
		{"padding over 64 KiB", "acquire", padded, 413},

		{"renew token zero", "renew", `{"id":"` + id + `","token":0,"ttl_ms":100}`, 400},
		{"renew token above 2^53", "renew", `{"id":"` + id + `","token":9007199254740993,"ttl_ms":100}`, 400},
		{"renew token 2^64", "renew", `{"id":"` + id + `","token":18446744073709551616,"ttl_ms":100}`, 400},
		{"renew token negative", "renew", `{"id":"` + id + `","token":-1,"ttl_ms":100}`, 400},
		{"renew token fraction", "renew", `{"id":"` + id + `","token":1.5,"ttl_ms":100}`, 400},
		{"renew token string", "renew", `{"id":"` + id + `","token":"1","ttl_ms":100}`, 400},
		{"renew id not hex", "renew", `{"id":"` + strings.Repeat("z", 32) + `","token":1,"ttl_ms":100}`, 400},
		{"renew id short", "renew", `{"id":"abc","token":1,"ttl_ms":100}`, 400},
		{"renew id zero", "renew", `{"id":"` + strings.Repeat("0", 32) + `","token":1,"ttl_ms":100}`, 400},
		{"renew id number", "renew", `{"id":1,"token":1,"ttl_ms":100}`, 400},
		{"renew missing id", "renew", `{"token":1,"ttl_ms":100}`, 400},
		{"renew missing token", "renew", `{"id":"` + id + `","ttl_ms":100}`, 400},
		{"renew missing ttl", "renew", `{"id":"` + id + `","token":1}`, 400},
		{"renew ttl zero", "renew", `{"id":"` + id + `","token":1,"ttl_ms":0}`, 400},
		{"renew ttl negative", "renew", `{"id":"` + id + `","token":1,"ttl_ms":-1}`, 400},
		{"renew unknown field", "renew", `{"id":"` + id + `","token":1,"ttl_ms":100,"owner":"a"}`, 400},
		{"renew over 64 KiB", "renew", `{"id":"` + strings.Repeat("a", 70000) + `"}`, 413},

		{"release token zero", "release", `{"id":"` + id + `","token":0}`, 400},
		{"release token above 2^53", "release", `{"id":"` + id + `","token":9007199254740993}`, 400},
		{"release token huge", "release", `{"id":"` + id + `","token":1e400}`, 400},
		{"release id zero", "release", `{"id":"` + strings.Repeat("0", 32) + `","token":1}`, 400},
		{"release missing id", "release", `{"token":1}`, 400},
		{"release unknown field", "release", `{"id":"` + id + `","token":1,"ttl_ms":100}`, 400},
		{"release malformed", "release", `{"id":"` + id + `","token":1`, 400},
		{"release over 64 KiB", "release", strings.Repeat(" ", 70000) + `{}`, 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := serve(h, "POST", "/v1/leases/k/"+tc.route, "application/json", []byte(tc.body))
			checkAnswer(t, tc.name, rec)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), `"code":"invalid"`) {
				t.Errorf("HTTP %d %s, want %d with code invalid", rec.Code, rec.Body, tc.status)
			}
		})
	}
	// None of it touched the held lease: it renews with its real ID.
	rec := serve(h, "POST", "/v1/leases/k/renew", "application/json",
		[]byte(`{"id":"`+id+`","token":`+strings.TrimSpace(jsonNumber(held.Token))+`,"ttl_ms":60000}`))
	if rec.Code != 200 {
		t.Fatalf("renewing the held lease after the bad requests: HTTP %d %s", rec.Code, rec.Body)
	}
}

// TestOwnerKeptExactly: an owner is taken as sent, escaped or not, and one
// that is not Unicode text is refused (the table above) rather than read
// with U+FFFD in place of its bad bytes, as encoding/json would.
func TestOwnerKeptExactly(t *testing.T) {
	h, _ := heldLease(t)
	for i, tc := range []struct{ body, want string }{
		{`{"owner":"\ud83d\ude00 \u00e9\"","ttl_ms":100}`, "\U0001F600 é\""},
		{`{"owner":"😀 é","ttl_ms":100}`, "😀 é"},
		{`{"owner":"\\ud800","ttl_ms":100}`, `\ud800`}, // an escaped backslash, not an escape
		{`{"owner":"\ufffd","ttl_ms":100}`, "\ufffd"},
	} {
		rec := serve(h, "POST", "/v1/leases/owner"+strconv.Itoa(i)+"/acquire", "application/json", []byte(tc.body))
		var got struct{ Owner string }
		if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != 200 || err != nil || got.Owner != tc.want {
			t.Errorf("%s: HTTP %d %s, want 200 with owner %q", tc.body, rec.Code, rec.Body, tc.want)
		}
	}
}

func jsonNumber(t lease.Token) string { b, _ := json.Marshal(t); return string(b) }

func TestContentTypeRequired(t *testing.T) {
	h, _ := heldLease(t)
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/jsonx", "application/json; charset"} {
		rec := serve(h, "POST", "/v1/leases/free/acquire", ct, []byte(`{"owner":"a","ttl_ms":100}`))
		checkAnswer(t, "Content-Type "+ct, rec)
		if rec.Code != http.StatusUnsupportedMediaType {
			t.Errorf("Content-Type %q: HTTP %d %s, want 415", ct, rec.Code, rec.Body)
		}
	}
	rec := serve(h, "POST", "/v1/leases/free/acquire", "application/json; charset=utf-8", []byte(`{"owner":"a","ttl_ms":100}`))
	if rec.Code != 200 {
		t.Errorf("Content-Type with charset: HTTP %d %s, want 200", rec.Code, rec.Body)
	}
}

func TestKeysInPathChecked(t *testing.T) {
	h, held := heldLease(t)
	body := map[string]string{
		"acquire": `{"owner":"a","ttl_ms":100}`,
		"renew":   `{"id":"` + held.ID.Reveal() + `","token":1,"ttl_ms":100}`,
		"release": `{"id":"` + held.ID.Reveal() + `","token":1}`,
	}
	keys := map[string]string{
		"empty":            "",
		"NUL":              "%00",
		"newline":          "a%0Ab",
		"tab":              "a%09b",
		"DEL":              "a%7Fb",
		"C1 control":       "a%C2%85b",
		"invalid UTF-8":    "a%FFb",
		"too long":         strings.Repeat("k", lease.MaxKeyLen+1),
		"too long escaped": strings.Repeat("%C3%A9", lease.MaxKeyLen/2+1),
		"dot":              ".",
		"dot dot":          "..",
	}
	for name, k := range keys {
		for _, route := range []string{"acquire", "renew", "release"} {
			rec := serve(h, "POST", "/v1/leases/"+k+"/"+route, "application/json", []byte(body[route]))
			checkAnswer(t, name+" "+route, rec)
			if rec.Code != 400 {
				t.Errorf("key %s, %s: HTTP %d %s, want 400", name, route, rec.Code, rec.Body)
			}
		}
		if k == "" {
			continue // GET /v1/leases/ is not a lease's path
		}
		rec := serve(h, "GET", "/v1/leases/"+k, "", nil)
		checkAnswer(t, name+" get", rec)
		if rec.Code != 400 {
			t.Errorf("key %s, get: HTTP %d %s, want 400", name, rec.Code, rec.Body)
		}
	}
	for _, q := range []string{"prefix=%00", "prefix=a%0A", "prefix=%FF", "prefix=a&prefix=b", "other=1", "prefix=%ZZ",
		"prefix=" + strings.Repeat("p", lease.MaxKeyLen+1)} {
		rec := serve(h, "GET", "/v1/leases?"+q, "", nil)
		checkAnswer(t, "list "+q, rec)
		if rec.Code != 400 {
			t.Errorf("list ?%s: HTTP %d %s, want 400", q, rec.Code, rec.Body)
		}
	}
	for _, path := range []string{"/v1/leases/k/steal", "/v1/other", "/nothing", "/v1/leases/k/acquire/x"} {
		rec := serve(h, "POST", path, "application/json", []byte(body["acquire"]))
		checkAnswer(t, path, rec)
		if rec.Code != 404 {
			t.Errorf("POST %s: HTTP %d %s, want 404", path, rec.Code, rec.Body)
		}
	}
}

// TestQueryRefusedWhereNoneTaken: the routes whose input is the path and
// the body take no query parameter, and refuse one rather than drop it: a
// client that sends wait_ms in the query (a form's habit) got a try-once
// acquire, answered 409 held at once as if the wait had run out.
func TestQueryRefusedWhereNoneTaken(t *testing.T) {
	h, held := heldLease(t)
	id := held.ID.Reveal()
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/leases/k/acquire", `{"owner":"a","ttl_ms":100}`},
		{"POST", "/v1/leases/k/renew", `{"id":"` + id + `","token":1,"ttl_ms":100}`},
		{"POST", "/v1/leases/k/release", `{"id":"` + id + `","token":1}`},
		{"POST", "/v1/renew", `{"renewals":[{"key":"k","id":"` + id + `","token":1,"ttl_ms":100}]}`},
		{"GET", "/v1/leases/k", ``},
		{"HEAD", "/v1/leases/k", ``},
		{"GET", "/v1/leases/%2F", ``},
	}
	for _, rt := range routes {
		for _, q := range []string{"wait_ms=5000", "ttl_ms=100&owner=a", "x", "%ZZ", "a;b"} {
			rec := serve(h, rt.method, rt.path+"?"+q, "application/json", []byte(rt.body))
			checkAnswer(t, rt.method+" "+rt.path+"?"+q, rec)
			if rec.Code != http.StatusBadRequest || rt.method != "HEAD" && !strings.Contains(rec.Body.String(), "query") {
				t.Errorf("%s %s?%s: HTTP %d %s, want 400 naming the query", rt.method, rt.path, q, rec.Code, rec.Body)
			}
		}
	}
	// None of it touched the held lease.
	if rec := serve(h, "GET", "/v1/leases/k", "", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"token":1,`) {
		t.Fatalf("the held lease after the refused requests: HTTP %d %s", rec.Code, rec.Body)
	}
	// An empty query is no parameter: each route answers as without it
	// (the release lets k go, so the batch renewal after it is not_held).
	for _, rt := range routes {
		rec := serve(h, rt.method, rt.path+"?", "application/json", []byte(rt.body))
		checkAnswer(t, rt.method+" "+rt.path+"?", rec)
		if rec.Code == http.StatusBadRequest {
			t.Errorf("%s %s?: HTTP %d %s, want the route's answer", rt.method, rt.path, rec.Code, rec.Body)
		}
	}
}

// TestContentTypeTwiceRefused: a POST with two Content-Type headers is 415
// whatever their order; the first was read alone, so application/json
// before text/plain was taken as JSON and the same two the other way round
// were not.
func TestContentTypeTwiceRefused(t *testing.T) {
	h, _ := heldLease(t)
	for _, cts := range [][]string{
		{"application/json", "text/plain"},
		{"text/plain", "application/json"},
		{"application/json", "application/json"},
	} {
		req := httptest.NewRequest("POST", "/v1/leases/free/acquire", strings.NewReader(`{"owner":"a","ttl_ms":100}`))
		req.Host = loopbackHost
		req.Header["Content-Type"] = cts
		rec := serveRequest(h, req)
		checkAnswer(t, "two Content-Types", rec)
		if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(rec.Body.String(), "more than one") {
			t.Errorf("Content-Type %q: HTTP %d %s, want 415 saying there is more than one", cts, rec.Code, rec.Body)
		}
	}
}

// TestContentEncodingRefused: a POST body sent compressed (Content-Encoding
// gzip, as some HTTP libraries do when told to) is 415 naming the coding:
// it was read as it came, so a gzipped body was 400 "must be a JSON
// object", and an uncompressed one labelled gzip was taken as JSON.
func TestContentEncodingRefused(t *testing.T) {
	h, _ := heldLease(t)
	body := []byte(`{"owner":"a","ttl_ms":100}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		coding string
		body   []byte
	}{
		{"gzip", gz.Bytes()},
		{"gzip", body},
		{"br", body},
		{"identity, gzip", gz.Bytes()},
	} {
		req := httptest.NewRequest("POST", "/v1/leases/free/acquire", bytes.NewReader(tc.body))
		req.Host = loopbackHost
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", tc.coding)
		rec := serveRequest(h, req)
		checkAnswer(t, "Content-Encoding "+tc.coding, rec)
		if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(rec.Body.String(), "Content-Encoding") {
			t.Errorf("Content-Encoding %q: HTTP %d %s, want 415 naming Content-Encoding", tc.coding, rec.Code, rec.Body)
		}
	}
	// identity is no coding at all.
	req := httptest.NewRequest("POST", "/v1/leases/free/acquire", bytes.NewReader(body))
	req.Host = loopbackHost
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "identity")
	if rec := serveRequest(h, req); rec.Code != http.StatusOK {
		t.Errorf("Content-Encoding identity: HTTP %d %s, want 200", rec.Code, rec.Body)
	}
}

// TestEmptyTicketRefused: "ticket":"" is a malformed ticket, as any other
// string that is not 32 hex digits, not the absence of one: it was taken
// as no ticket, so a client whose ticket came out empty waited without
// keeping its place in line, and "last":true beside it was refused for
// want of a ticket the body named.
func TestEmptyTicketRefused(t *testing.T) {
	h, _ := heldLease(t)
	for _, body := range []string{
		`{"owner":"a","ttl_ms":100,"ticket":""}`,
		`{"owner":"a","ttl_ms":100,"wait_ms":10,"ticket":""}`,
		`{"owner":"a","ttl_ms":100,"wait_ms":10,"ticket":"","last":false}`,
	} {
		rec := serve(h, "POST", "/v1/leases/free/acquire", "application/json", []byte(body))
		checkAnswer(t, body, rec)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `\"ticket\"`) {
			t.Errorf("%s: HTTP %d %s, want 400 naming the ticket", body, rec.Code, rec.Body)
		}
	}
}
