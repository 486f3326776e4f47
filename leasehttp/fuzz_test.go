package leasehttp_test

import (
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// The fuzz targets feed arbitrary bodies and keys to the whole handler over
// memstore (waiting off, so no input can make a target sleep) and fail on
// any 5xx, any panic, any error answer that is not the API's JSON error
// body, and any exchange openapi.json does not allow (checkAPI). Seed
// corpora are in testdata/fuzz.

func fuzzServer(f *testing.F) (http.Handler, lease.Lease) {
	store := memtest.New(f)
	srv, err := leasehttp.NewServer(store, leasehttp.WithLogger(quiet), leasehttp.WithMaxWait(0))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	l, err := store.Acquire(f.Context(), "held", "holder", lease.MaxTTL)
	if err != nil {
		f.Fatal(err)
	}
	return srv, l
}

func FuzzAcquireBody(f *testing.F) {
	h, _ := fuzzServer(f)
	f.Add([]byte(`{"owner":"a","ttl_ms":100}`))
	f.Add([]byte(`{"owner":"a","ttl_ms":100,"wait_ms":5}`))
	f.Add([]byte(`{"owner":"a","ttl_ms":1e2}`))
	f.Add([]byte(`{"owner":"a","ttl_ms":100,"wait_ms":0,"ticket":"0123456789abcdef0123456789abcdef","last":true}`))
	f.Add([]byte(`{"owner":"a","ttl_ms":100,"ticket":"","last":false}`))
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, body []byte) {
		h := checkAPI(t, h)
		// A key of its own each time, free: on a key an earlier input took,
		// every acquire is 409, and a body the server took that the
		// document refuses would not show.
		free := "free" + strconv.FormatInt(n.Add(1), 10)
		for _, key := range []string{free, "held"} {
			rec := serve(h, "POST", "/v1/leases/"+key+"/acquire", "application/json", body)
			checkAnswer(t, "acquire", rec)
		}
	})
}

func FuzzRenewBody(f *testing.F) {
	h, held := fuzzServer(f)
	f.Add([]byte(`{"id":"` + held.ID.Reveal() + `","token":1,"ttl_ms":100}`))
	f.Add([]byte(`{"id":"` + held.ID.Reveal() + `","token":9007199254740993,"ttl_ms":100}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(checkAPI(t, h), "POST", "/v1/leases/held/renew", "application/json", body)
		checkAnswer(t, "renew", rec)
	})
}

func FuzzRenewBatchBody(f *testing.F) {
	h, held := fuzzServer(f)
	f.Add([]byte(`{"renewals":[{"key":"held","id":"` + held.ID.Reveal() + `","token":1,"ttl_ms":100}]}`))
	f.Add([]byte(`{"renewals":[{"key":"held","id":"` + held.ID.Reveal() + `","token":1,"ttl_ms":100},{"key":"free","id":"` + held.ID.Reveal() + `","token":2,"ttl_ms":100}]}`))
	f.Add([]byte(`{"renewals":[[],{"key":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(checkAPI(t, h), "POST", "/v1/renew", "application/json", body)
		checkAnswer(t, "renew batch", rec)
	})
}

func FuzzReleaseBody(f *testing.F) {
	h, held := fuzzServer(f)
	f.Add([]byte(`{"id":"` + lease.NewID().Reveal() + `","token":1}`))
	f.Add([]byte(`{"id":"` + held.ID.Reveal() + `","token":0}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serve(checkAPI(t, h), "POST", "/v1/leases/held/release", "application/json", body)
		checkAnswer(t, "release", rec)
	})
}

// FuzzKeyPath sends the key both as the client escapes it and raw, as a
// hand-made request might, to every route that takes a key, and as a list
// prefix.
func FuzzKeyPath(f *testing.F) {
	h, _ := fuzzServer(f)
	for _, k := range []string{"jobs/nightly", "a%2Fb", "%00", "..", "%2E", "ü/日本", strings.Repeat("k", 600), "a?b#c", " ", "#", ".#"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		h := checkAPI(t, h)
		for _, seg := range []string{url.PathEscape(key), key} {
			for _, route := range []string{"/acquire", "/renew", "/release", ""} {
				method, body := "POST", `{"owner":"fuzz","ttl_ms":100}`
				switch route {
				case "/renew":
					body = `{"id":"` + strings.Repeat("ab", 16) + `","token":1,"ttl_ms":100}`
				case "/release":
					body = `{"id":"` + strings.Repeat("ab", 16) + `","token":1}`
				case "":
					method, body = "GET", ""
				}
				req, err := http.NewRequest(method, "http://"+loopbackHost+"/v1/leases/"+seg+route, strings.NewReader(body))
				if err != nil {
					continue // net/http's server refuses what its client cannot even form
				}
				req.Header.Set("Content-Type", "application/json")
				rec := serveRequest(h, req)
				checkAnswer(t, method+" "+req.URL.String(), rec)
			}
		}
		req, err := http.NewRequest("GET", "http://"+loopbackHost+"/v1/leases?prefix="+url.QueryEscape(key), nil)
		if err == nil {
			checkAnswer(t, "list", serveRequest(h, req))
		}
	})
}

// FuzzListQuery sends GET /v1/leases with any query string: the answer is
// a page or a 4xx error body the document allows, never a 5xx.
func FuzzListQuery(f *testing.F) {
	h, _ := fuzzServer(f)
	for _, q := range []string{"limit=2", "limit=0&after=", "after=" + lease.Cursor("jobs/a"), "after=YR", "limit=-1",
		"limit=10001", "prefix=j&limit=1&after=" + lease.Cursor("j"), "limit=1&limit=2", "after=%0A", "limit=%2B1"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		req, err := http.NewRequest("GET", "http://"+loopbackHost+"/v1/leases?"+q, nil)
		if err != nil {
			return
		}
		checkAnswer(t, "list ?"+q, serveRequest(checkAPI(t, h), req))
	})
}

// FuzzWatchQuery asks HEAD /v1/watch (what GET would answer, without the
// stream, so that no input makes the target wait) with any query string
// and Accept header, on a server without credentials and on one whose
// token covers jobs/ alone: the answer is the stream's head or a 4xx error
// body, never a 5xx.
func FuzzWatchQuery(f *testing.F) {
	open, _ := fuzzServer(f)
	scoped := fuzzScopedServer(f)
	for _, q := range []string{"prefix=jobs/", "key=jobs/a", "prefix=&key=", "key=a&prefix=b", "prefix=a&prefix=b",
		"key=%00", "key=%FF", "prefix=j", "x=1", "prefix=%ZZ", "key=a;b", "key=" + strings.Repeat("k", 600), "prefix=jobs/&x"} {
		f.Add(q, "text/event-stream")
	}
	for _, a := range []string{"", "application/json", "text/*;q=0.5, */*;q=0", "text/event-stream;q=x", "*/*;q=0.0001", ";;,,", "text/event-stream;q=1.5"} {
		f.Add("prefix=jobs/", a)
	}
	f.Fuzz(func(t *testing.T, q, accept string) {
		for _, h := range []http.Handler{open, scoped} {
			req, err := http.NewRequest("HEAD", "http://"+loopbackHost+"/v1/watch?"+q, nil)
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+fuzzJobsToken)
			req.Header["Accept"] = []string{accept}
			checkAnswer(t, "watch ?"+q+" Accept "+strconv.Quote(accept), serveRequest(checkAPI(t, h), req))
		}
	})
}

// FuzzStatsQuery sends GET /v1/stats with any query string.
func FuzzStatsQuery(f *testing.F) {
	open, _ := fuzzServer(f)
	scoped := fuzzScopedServer(f)
	for _, q := range []string{"prefix=jobs/", "prefix=", "prefix=a&prefix=b", "prefix=%00", "x=1", "prefix=%ZZ", "prefix=a;b"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for _, h := range []http.Handler{open, scoped} {
			req, err := http.NewRequest("GET", "http://"+loopbackHost+"/v1/stats?"+q, nil)
			if err != nil {
				return
			}
			req.Header.Set("Authorization", "Bearer "+fuzzJobsToken)
			checkAnswer(t, "stats ?"+q, serveRequest(checkAPI(t, h), req))
		}
	})
}

// FuzzHeaders sends an acquire with any Authorization and Content-Type
// headers, each once, twice or not at all (a value with a NUL stands for
// no header, one with a newline for two): on a server with credentials it
// is let in only with exactly one "Bearer" and the token, and read only
// with exactly one JSON Content-Type.
func FuzzHeaders(f *testing.F) {
	h := fuzzScopedServer(f)
	for _, seed := range [][2]string{
		{"Bearer " + fuzzJobsToken, "application/json"},
		{"bearer  " + fuzzJobsToken, "application/json; charset=utf-8"},
		{"Bearer " + fuzzJobsToken + "\nBearer x", "application/json"},
		{"Bearer " + fuzzJobsToken, "application/json\ntext/plain"},
		{"\x00", "\x00"},
		{"Basic " + fuzzJobsToken, "text/plain"},
		{"Bearer\t" + fuzzJobsToken, "application/json;"},
		{"Bearer " + fuzzJobsToken + " ", "APPLICATION/JSON"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, auth, ct string) {
		req, err := http.NewRequest("POST", "http://"+loopbackHost+"/v1/leases/jobs%2Ffuzz/acquire", strings.NewReader(`{"owner":"fuzz","ttl_ms":100}`))
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"Authorization": auth, "Content-Type": ct} {
			if strings.Contains(v, "\x00") {
				continue
			}
			req.Header[name] = strings.Split(v, "\n")
		}
		rec := serveRequest(checkAPI(t, h), req)
		checkAnswer(t, "acquire with Authorization "+strconv.Quote(auth)+", Content-Type "+strconv.Quote(ct), rec)
		authOK := len(req.Header.Values("Authorization")) == 1 && bearerIs(req.Header.Get("Authorization"), fuzzJobsToken)
		mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
		jsonOK := len(req.Header.Values("Content-Type")) == 1 && err == nil && mt == "application/json"
		switch {
		case !authOK && rec.Code != http.StatusUnauthorized:
			t.Fatalf("Authorization %q: HTTP %d %s, want 401", auth, rec.Code, rec.Body)
		case authOK && !jsonOK && rec.Code != http.StatusUnsupportedMediaType:
			t.Fatalf("Content-Type %q: HTTP %d %s, want 415", ct, rec.Code, rec.Body)
		case authOK && jsonOK && rec.Code != http.StatusOK && rec.Code != http.StatusConflict:
			t.Fatalf("Authorization %q, Content-Type %q: HTTP %d %s, want the acquire's answer", auth, ct, rec.Code, rec.Body)
		}
	})
}

// fuzzJobsToken is the token of fuzzScopedServer, which covers jobs/.
const fuzzJobsToken = "fuzz-jobs-token-0123456789"

// fuzzScopedServer is fuzzServer's server with one credential, for jobs/.
func fuzzScopedServer(f *testing.F) http.Handler {
	srv, err := leasehttp.NewServer(memtest.New(f), leasehttp.WithLogger(quiet), leasehttp.WithMaxWait(0),
		leasehttp.WithCredentials([]leasehttp.Credential{{Token: fuzzJobsToken, Prefixes: []string{"jobs/"}}}))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	return srv
}

// bearerIs reports whether the Authorization value h names token, as the
// server reads it: the scheme in any case, one space, then spaces allowed.
func bearerIs(h, token string) bool {
	scheme, tok, ok := strings.Cut(h, " ")
	return ok && strings.EqualFold(scheme, "Bearer") && strings.TrimLeft(tok, " ") == token
}
