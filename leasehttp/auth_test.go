package leasehttp_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

func TestParseCredentials(t *testing.T) {
	good := "# admin\nTOKEN-ALL *\n\n  \tTOKEN-JOBS   jobs/ cron/  \n"
	creds, err := leasehttp.ParseCredentials(strings.NewReader(good))
	if err != nil {
		t.Fatalf("ParseCredentials: %v", err)
	}
	want := []leasehttp.Credential{
		{Token: "TOKEN-ALL", Prefixes: []string{"*"}},
		{Token: "TOKEN-JOBS", Prefixes: []string{"jobs/", "cron/"}},
	}
	if len(creds) != len(want) {
		t.Fatalf("got %d credentials %+v, want %+v", len(creds), creds, want)
	}
	for i := range want {
		if creds[i].Token != want[i].Token || !slices.Equal(creds[i].Prefixes, want[i].Prefixes) {
			t.Errorf("credential %d = %+v, want %+v", i, creds[i], want[i])
		}
	}

	for _, tc := range []struct{ name, file, want string }{
		{"no prefix", "A *\nB\n", "line 2"},
		{"trailing comment", "A jobs/ # ci runner\n", "line 1"},
		{"empty file", "", "no credentials"},
		{"only comments", "# nothing\n\n", "no credentials"},
		{"duplicate token", "A *\n# x\nA jobs/\n", "line 3: the token of line 1"},
		{"glob prefix", "A jobs/*\n", "line 1"},
		{"control in token", "A\x01B *\n", "line 1"},
		{"non-ASCII token", "Äbc *\n", "line 1"},
		{"control in prefix", "A jobs/\x7f\n", "line 1"},
		{"prefix too long", "A " + strings.Repeat("p", lease.MaxKeyLen+1) + "\n", "line 1"},
		{"line too long", "A " + strings.Repeat("p", 2<<20) + "\n", "reading credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := leasehttp.ParseCredentials(strings.NewReader(tc.file))
			if err == nil || !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestLoadCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("T1 *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := leasehttp.LoadCredentials(path)
	if err != nil || len(creds) != 1 || creds[0].Token != "T1" {
		t.Fatalf("LoadCredentials = %+v, %v", creds, err)
	}
	if _, err := leasehttp.LoadCredentials(path + ".missing"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadCredentials of a missing file: err = %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte("T1 *\nT2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := leasehttp.LoadCredentials(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("LoadCredentials of a bad file: err = %v, want the path and line 2", err)
	}
}

func TestWithCredentialsValidates(t *testing.T) {
	for name, creds := range map[string][]leasehttp.Credential{
		"none":         nil,
		"empty token":  {{Token: "", Prefixes: []string{"*"}}},
		"no prefixes":  {{Token: "t"}},
		"empty prefix": {{Token: "t", Prefixes: []string{""}}},
		"duplicate":    {{Token: "t", Prefixes: []string{"*"}}, {Token: "t", Prefixes: []string{"a/"}}},
	} {
		if _, err := leasehttp.NewServer(newMem(t), leasehttp.WithCredentials(creds)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: NewServer err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestAuth(t *testing.T) {
	const all, jobs = "tok-all-0123456789", "tok-jobs-0123456789"
	_, hs := startServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: all, Prefixes: []string{"*"}},
		{Token: jobs, Prefixes: []string{"jobs/", "cron/", "jobs/deep/"}},
	}))
	admin := newClient(t, hs.URL, leasehttp.WithAuthToken(all))
	for _, k := range []string{"jobs/a", "jobs/deep/b", "cron/c", "other/d", "cronx"} {
		if _, err := admin.Acquire(ctxFor(t), k, "admin", time.Minute); err != nil {
			t.Fatalf("admin Acquire(%q): %v", k, err)
		}
	}
	acquire := `{"owner":"o","ttl_ms":60000}`
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		code                           string
	}{
		{"no header", "POST", "/v1/leases/jobs%2Fx/acquire", "", acquire, 401, "unauthorized"},
		{"wrong token", "POST", "/v1/leases/jobs%2Fx/acquire", "Bearer nope", acquire, 401, "unauthorized"},
		{"token prefix of a real one", "POST", "/v1/leases/jobs%2Fx/acquire", "Bearer tok-all", acquire, 401, "unauthorized"},
		{"real token plus more", "POST", "/v1/leases/jobs%2Fx/acquire", "Bearer " + all + "x", acquire, 401, "unauthorized"},
		{"basic scheme", "POST", "/v1/leases/jobs%2Fx/acquire", "Basic " + all, acquire, 401, "unauthorized"},
		{"scheme only", "POST", "/v1/leases/jobs%2Fx/acquire", "Bearer", acquire, 401, "unauthorized"},
		{"no auth on get", "GET", "/v1/leases/jobs%2Fa", "", "", 401, "unauthorized"},
		{"no auth on list", "GET", "/v1/leases", "", "", 401, "unauthorized"},
		{"no auth before bad key", "GET", "/v1/leases/%00", "", "", 401, "unauthorized"},
		{"lower-case scheme", "POST", "/v1/leases/jobs%2Fx/acquire", "bearer " + all, acquire, 200, ""},
		{"scoped in prefix", "POST", "/v1/leases/jobs%2Fy/acquire", "Bearer " + jobs, acquire, 200, ""},
		{"scoped outside", "POST", "/v1/leases/other%2Fy/acquire", "Bearer " + jobs, acquire, 403, "forbidden"},
		{"scoped prefix without slash", "POST", "/v1/leases/jobsy/acquire", "Bearer " + jobs, acquire, 403, "forbidden"},
		{"scoped get outside", "GET", "/v1/leases/other%2Fd", "Bearer " + jobs, "", 403, "forbidden"},
		{"scoped renew outside", "POST", "/v1/leases/other%2Fd/renew", "Bearer " + jobs, `{"id":"` + strings.Repeat("ab", 16) + `","token":1,"ttl_ms":100}`, 403, "forbidden"},
		{"scoped release outside", "POST", "/v1/leases/other%2Fd/release", "Bearer " + jobs, `{"id":"` + strings.Repeat("ab", 16) + `","token":1}`, 403, "forbidden"},
		{"scoped get inside", "GET", "/v1/leases/jobs%2Fa", "Bearer " + jobs, "", 200, ""},
		{"scoped list outside", "GET", "/v1/leases?prefix=other%2F", "Bearer " + jobs, "", 403, "forbidden"},
		{"healthz open", "GET", "/healthz", "", "", 200, ""},
		{"readyz open", "GET", "/readyz", "", "", 200, ""},
		{"metrics open", "GET", "/metrics", "", "", 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := callAuth(t, tc.method, hs.URL+tc.path, tc.auth, tc.body)
			if status != tc.status || (tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`)) {
				t.Fatalf("HTTP %d %s, want %d %s", status, body, tc.status, tc.code)
			}
		})
	}

	// Lists show only what the credential covers.
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"cron/c", "jobs/a", "jobs/deep/b", "jobs/x", "jobs/y"}},
		{"jobs/", []string{"jobs/a", "jobs/deep/b", "jobs/x", "jobs/y"}},
		{"jobs/d", []string{"jobs/deep/b"}},
		{"c", []string{"cron/c"}},
		{"j", []string{"jobs/a", "jobs/deep/b", "jobs/x", "jobs/y"}},
	} {
		status, body := callAuth(t, "GET", hs.URL+"/v1/leases?prefix="+tc.prefix, "Bearer "+jobs, "")
		if status != 200 {
			t.Fatalf("list %q: HTTP %d %s", tc.prefix, status, body)
		}
		var got struct{ Leases []struct{ Key string } }
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, l := range got.Leases {
			keys = append(keys, l.Key)
		}
		if !slices.Equal(keys, tc.want) {
			t.Errorf("list %q with the scoped token = %q, want %q", tc.prefix, keys, tc.want)
		}
	}

	// The Client maps the answers to errors.
	scoped := newClient(t, hs.URL, leasehttp.WithAuthToken(jobs))
	if _, err := scoped.Acquire(ctxFor(t), "other/z", "o", time.Minute); !errors.Is(err, leasehttp.ErrForbidden) {
		t.Errorf("scoped Acquire outside its prefixes: err = %v, want ErrForbidden", err)
	}
	if _, err := scoped.List(ctxFor(t), "other/", lease.Page{}); !errors.Is(err, leasehttp.ErrForbidden) {
		t.Errorf("scoped List outside its prefixes: err = %v, want ErrForbidden", err)
	}
	anon := newClient(t, hs.URL)
	if _, err := anon.Get(ctxFor(t), "jobs/a"); !errors.Is(err, leasehttp.ErrUnauthorized) {
		t.Errorf("Get without a token: err = %v, want ErrUnauthorized", err)
	}
	wrong := newClient(t, hs.URL, leasehttp.WithAuthToken("wrong"))
	if _, err := wrong.Acquire(ctxFor(t), "jobs/q", "o", time.Minute); !errors.Is(err, leasehttp.ErrUnauthorized) {
		t.Errorf("Acquire with a wrong token: err = %v, want ErrUnauthorized", err)
	}
}

// callAuth is call with a raw Authorization header.
func callAuth(t *testing.T, method, url, auth, body string) (int, string) {
	t.Helper()
	if auth == "" {
		return call(t, method, url, "", body)
	}
	scheme, tok, _ := strings.Cut(auth, " ")
	if scheme == "Bearer" && tok != "" {
		return call(t, method, url, tok, body)
	}
	return callHeader(t, method, url, auth, body)
}

// TestAuthorizationTwiceRefused: a request with two Authorization headers
// is 401, whichever comes first: the first was taken and the second
// dropped, so a token for all keys followed by a narrower one (a proxy
// adding its own, say) acted with the wider, and the answer depended on
// the headers' order.
func TestAuthorizationTwiceRefused(t *testing.T) {
	const all, jobs = "tok-all-0123456789", "tok-jobs-0123456789"
	h := newServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: all, Prefixes: []string{"*"}},
		{Token: jobs, Prefixes: []string{"jobs/"}},
	}))
	for _, auths := range [][]string{
		{"Bearer " + all, "Bearer " + jobs},
		{"Bearer " + jobs, "Bearer " + all},
		{"Bearer " + all, "Bearer " + all},
		{"Bearer " + all, ""},
		{"", "Bearer " + all},
	} {
		for _, target := range []string{"/v1/leases/other", "/v1/leases", "/v1/stats"} {
			req := httptest.NewRequest("GET", target, nil)
			req.Header["Authorization"] = auths
			rec := serveRequest(h, req)
			checkAnswer(t, target, rec)
			if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "more than one Authorization") {
				t.Errorf("GET %s with Authorization %q: HTTP %d %s, want 401 saying there is more than one", target, auths, rec.Code, rec.Body)
			}
		}
	}
	// A watch too, answered before it starts (HEAD: what GET would answer).
	req := httptest.NewRequest("HEAD", "/v1/watch?prefix=jobs/", nil)
	req.Header["Authorization"] = []string{"Bearer " + jobs, "Bearer " + all}
	if rec := serveRequest(h, req); rec.Code != http.StatusUnauthorized {
		t.Errorf("HEAD /v1/watch with two Authorization headers: HTTP %d, want 401", rec.Code)
	}
}
