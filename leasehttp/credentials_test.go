package leasehttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// TestReadCredentialsFileWarns: a file others can read and a short token are
// warned about, naming the line and never the token; a good file is not.
func TestReadCredentialsFileWarns(t *testing.T) {
	const long = "long-token-0123456789abcdef"
	for _, tc := range []struct {
		name string
		body string
		mode os.FileMode
		want []string // one substring per expected warning, in order
	}{
		{"good", "# ops\n" + long + " *\n", 0o600, nil},
		{"owner read only", long + " *\n", 0o400, nil},
		{"world readable", long + " *\n", 0o644, []string{"mode 0644"}},
		{"group readable", long + " *\n", 0o640, []string{"mode 0640"}},
		{"short token", "# ops\n" + long + " *\n\nshort-token jobs/\n", 0o600, []string{"line 4"}},
		{"both", "abc *\n", 0o604, []string{"mode 0604", "line 1"}},
		{"fifteen bytes", strings.Repeat("x", leasehttp.ShortToken-1) + " *\n", 0o600, []string{"line 1"}},
		{"sixteen bytes", strings.Repeat("x", leasehttp.ShortToken) + " *\n", 0o600, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if runtime.GOOS == "windows" && tc.mode&0o077 != 0 {
				t.Skip("no group or other bits on Windows")
			}
			path := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			// Chmod, not WriteFile's mode, which the umask would narrow.
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			f, err := leasehttp.ReadCredentialsFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Warnings) != len(tc.want) {
				t.Fatalf("warnings %q; want %d mentioning %q", f.Warnings, len(tc.want), tc.want)
			}
			for i, w := range f.Warnings {
				if !strings.Contains(w, tc.want[i]) {
					t.Errorf("warning %q does not mention %q", w, tc.want[i])
				}
				for _, c := range f.Credentials {
					if strings.Contains(w, c.Token) {
						t.Errorf("warning %q shows a token", w)
					}
				}
			}
		})
	}
	if _, err := leasehttp.ReadCredentialsFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}
}

// TestSetCredentials swaps the token set: the old token is refused at once,
// the new one accepted; a bad set changes nothing.
func TestSetCredentials(t *testing.T) {
	const old, fresh = "old-token-0123456789", "new-token-0123456789"
	srv, hs := startServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{{Token: old, Prefixes: []string{"*"}}}))
	get := func(token string) int {
		status, _ := call(t, "GET", hs.URL+"/v1/leases", token, "")
		return status
	}
	if got := get(old); got != 200 {
		t.Fatalf("old token before the swap: HTTP %d", got)
	}
	for name, creds := range map[string][]leasehttp.Credential{
		"none":        nil,
		"empty token": {{Token: "", Prefixes: []string{"*"}}},
		"duplicate":   {{Token: fresh, Prefixes: []string{"*"}}, {Token: fresh, Prefixes: []string{"a/"}}},
	} {
		if err := srv.SetCredentials(creds); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("SetCredentials(%s) = %v, want ErrInvalid", name, err)
		}
		if got := get(old); got != 200 {
			t.Errorf("after the refused SetCredentials(%s) the old token gets HTTP %d", name, got)
		}
	}
	if err := srv.SetCredentials([]leasehttp.Credential{{Token: fresh, Prefixes: []string{"jobs/"}}}); err != nil {
		t.Fatal(err)
	}
	if got := get(old); got != 401 {
		t.Errorf("old token after the swap: HTTP %d, want 401", got)
	}
	if status, body := call(t, "GET", hs.URL+"/v1/leases/jobs%2Fa", fresh, ""); status != 404 {
		t.Errorf("new token inside its prefix: HTTP %d %s, want 404", status, body)
	}
	if status, _ := call(t, "GET", hs.URL+"/v1/leases/other", fresh, ""); status != 403 {
		t.Errorf("new token outside its prefix: HTTP %d, want 403", status)
	}
}

// TestSetCredentialsOnOpenServer: a server made without credentials stays
// open; it is not turned into one with auth by accident.
func TestSetCredentialsOnOpenServer(t *testing.T) {
	srv, hs := startServer(t, newMem(t))
	if err := srv.SetCredentials([]leasehttp.Credential{{Token: "tok-0123456789abcdef", Prefixes: []string{"*"}}}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("SetCredentials on a server without credentials = %v, want ErrInvalid", err)
	}
	if status, _ := call(t, "GET", hs.URL+"/v1/leases", "", ""); status != 200 {
		t.Errorf("open server after the refused SetCredentials: HTTP %d", status)
	}
}

// TestSetCredentialsKeepsRequestsInFlight: a request that waits for a held
// key, authorised by a token that a swap then removes, still gets its lease.
func TestSetCredentialsKeepsRequestsInFlight(t *testing.T) {
	const old, fresh = "old-token-0123456789", "new-token-0123456789"
	srv, hs := startServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{{Token: old, Prefixes: []string{"*"}}}))
	holder, err := newClient(t, hs.URL, leasehttp.WithAuthToken(old)).Acquire(ctxFor(t), "job", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan authReply, 1)
	go func() {
		waiter <- sendAuth("POST", hs.URL+"/v1/leases/job/acquire", old, `{"owner":"waiter","ttl_ms":60000,"wait_ms":30000}`)
	}()
	eventually(t, "a waiter", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })

	if err := srv.SetCredentials([]leasehttp.Credential{{Token: fresh, Prefixes: []string{"*"}}}); err != nil {
		t.Fatal(err)
	}
	if err := newClient(t, hs.URL, leasehttp.WithAuthToken(old)).Release(ctxFor(t), holder); !errors.Is(err, leasehttp.ErrUnauthorized) {
		t.Fatalf("release with the old token after the swap: %v, want ErrUnauthorized", err)
	}
	if err := newClient(t, hs.URL, leasehttp.WithAuthToken(fresh)).Release(ctxFor(t), holder); err != nil {
		t.Fatalf("release with the new token: %v", err)
	}
	a := <-waiter
	if a.err != nil || a.status != 200 || !strings.Contains(a.body, `"owner":"waiter"`) {
		t.Errorf("the waiter authorised before the swap got HTTP %d %s (%v); want its lease", a.status, a.body, a.err)
	}
}

// TestSetCredentialsWhileServing swaps sets while requests run, for the race
// detector: every request is answered by one set or the other.
func TestSetCredentialsWhileServing(t *testing.T) {
	tokens := []string{"tok-a-0123456789abcdef", "tok-b-0123456789abcdef"}
	set := func(i int) []leasehttp.Credential {
		return []leasehttp.Credential{{Token: tokens[i%2], Prefixes: []string{"*"}}}
	}
	srv, hs := startServer(t, newMem(t), leasehttp.WithCredentials(set(0)))
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for range 50 {
				a := sendAuth("GET", hs.URL+"/v1/leases", tokens[g%2], "")
				if a.err != nil || (a.status != 200 && a.status != 401) {
					errc <- fmt.Errorf("HTTP %d %s (%v)", a.status, a.body, a.err)
					return
				}
			}
		})
	}
	for i := range 200 {
		if err := srv.SetCredentials(set(i + 1)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// authReply is what sendAuth got.
type authReply struct {
	status int
	body   string
	err    error
}

// sendAuth is call for goroutines other than the test's: it reports failures
// instead of ending the test.
func sendAuth(method, url, token, body string) authReply {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return authReply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return authReply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return authReply{status: resp.StatusCode, body: string(b), err: err}
}
