package leasehttp_test

import (
	"context"
	"encoding/json"
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
	"github.com/leasehq/lease/internal/testkit/memtest"
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

// TestSetCredentialsEndsWaitsOfARotatedToken: a token rotated out (the old
// one replaced by a new one) ends the waits it let in, at the swap, with
// 401, and they take nothing. Until session 22 such a wait stayed in line
// and got its lease with the old token, which could then neither renew nor
// release it: the key was held by nobody able to use it until its TTL (see
// TestWaitEndsWhenItsCredentialLosesTheKey).
func TestSetCredentialsEndsWaitsOfARotatedToken(t *testing.T) {
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
	if a := <-waiter; a.err != nil || a.status != http.StatusUnauthorized {
		t.Errorf("the waiter authorised by the old token got HTTP %d %s (%v) at the swap; want 401", a.status, a.body, a.err)
	}
	if err := newClient(t, hs.URL, leasehttp.WithAuthToken(old)).Release(ctxFor(t), holder); !errors.Is(err, leasehttp.ErrUnauthorized) {
		t.Fatalf("release with the old token after the swap: %v, want ErrUnauthorized", err)
	}
	fc := newClient(t, hs.URL, leasehttp.WithAuthToken(fresh))
	if err := fc.Release(ctxFor(t), holder); err != nil {
		t.Fatalf("release with the new token: %v", err)
	}
	if l, err := fc.Get(ctxFor(t), "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("the key after the release: %+v, %v; want ErrNotFound (the ended wait took nothing)", l, err)
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

// TestWaitEndsWhenItsCredentialLosesTheKey: a waiting acquire is checked
// against the credentials when it arrives, and a wait lasts up to the
// server's max wait. A reload (SetCredentials, SIGHUP in lease serve) that
// took the key from the waiter's credential left the wait in line, and it
// was granted the key when the holder let go: a revoked client got a lease
// (and a fencing token) after its revocation. The wait now ends at the
// reload, 403 when the key left the credential's prefixes, 401 when the
// token was withdrawn; a reload that leaves the key covered leaves the wait
// alone. Both ways the server waits, with and without a ticket.
func TestWaitEndsWhenItsCredentialLosesTheKey(t *testing.T) {
	const holder, waiter = "holder-token-0123456789", "waiter-token-0123456789"
	all := leasehttp.Credential{Token: holder, Prefixes: []string{"*"}}
	before := []leasehttp.Credential{all, {Token: waiter, Prefixes: []string{"jobs/"}}}
	for _, be := range backends {
		for _, tc := range []struct {
			name   string
			after  []leasehttp.Credential
			status int // 200: the wait goes on and gets the key once the holder releases it
		}{
			{"narrowed", []leasehttp.Credential{all, {Token: waiter, Prefixes: []string{"other/"}}}, http.StatusForbidden},
			{"withdrawn", []leasehttp.Credential{all}, http.StatusUnauthorized},
			{"still covered", []leasehttp.Credential{all, {Token: waiter, Prefixes: []string{"jobs/x", "other/"}}}, http.StatusOK},
		} {
			for _, ticket := range []string{"", `,"ticket":"0123456789abcdef0123456789abcdef"`} {
				t.Run(fmt.Sprintf("%s/%s/ticket=%t", be.name, tc.name, ticket != ""), func(t *testing.T) {
					t.Parallel()
					srv, hs := startServer(t, be.new(t), leasehttp.WithCredentials(before))
					status, body := call(t, "POST", hs.URL+"/v1/leases/jobs%2Fx/acquire", holder, `{"owner":"holder","ttl_ms":60000}`)
					if status != http.StatusOK {
						t.Fatalf("holder: HTTP %d %s", status, body)
					}
					var held struct {
						Token uint64 `json:"token"`
						ID    string `json:"id"`
					}
					if err := json.Unmarshal([]byte(body), &held); err != nil {
						t.Fatal(err)
					}
					got := make(chan authReply, 1)
					go func() {
						got <- sendAuth("POST", hs.URL+"/v1/leases/jobs%2Fx/acquire", waiter,
							`{"owner":"waiter","ttl_ms":60000,"wait_ms":20000`+ticket+`}`)
					}()
					eventually(t, "the waiter in line", func() bool { return metric(t, hs.URL, "lease_waiters") == 1 })
					if err := srv.SetCredentials(tc.after); err != nil {
						t.Fatal(err)
					}
					if tc.status != http.StatusOK {
						select {
						case a := <-got:
							if a.err != nil || a.status != tc.status {
								t.Fatalf("the wait after the reload: HTTP %d %s (%v), want %d", a.status, a.body, a.err, tc.status)
							}
						case <-time.After(10 * time.Second):
							t.Fatal("the wait went on for 10 s after the reload took the key from its credential")
						}
					}
					release := fmt.Sprintf(`{"token":%d,"id":%q}`, held.Token, held.ID)
					if status, body := call(t, "POST", hs.URL+"/v1/leases/jobs%2Fx/release", holder, release); status != http.StatusOK {
						t.Fatalf("holder's release: HTTP %d %s", status, body)
					}
					if tc.status == http.StatusOK {
						if a := <-got; a.err != nil || a.status != http.StatusOK {
							t.Fatalf("the wait of a credential still covering the key: HTTP %d %s (%v), want 200", a.status, a.body, a.err)
						}
						return
					}
					// A wait ended without the lease, not a failure of the backend.
					if n := metric(t, hs.URL, `lease_acquisitions_total{result="error"}`); n != 0 {
						t.Errorf("the ended wait counted as %v backend failures, want 0", n)
					}
					// Nobody holds the key: the ended wait took nothing.
					if status, body := call(t, "GET", hs.URL+"/v1/leases/jobs%2Fx", holder, ""); status != http.StatusNotFound {
						t.Fatalf("the key after the holder's release: HTTP %d %s, want 404", status, body)
					}
				})
			}
		}
	}
}

// grantThenSwap is a backend whose waiting acquire calls swap as it is
// granted: a reload that lands between the grant and the answer.
type grantThenSwap struct {
	lease.Backend
	wa   lease.WaitAcquirer
	swap func()
}

func (g grantThenSwap) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := g.wa.AcquireWait(ctx, key, owner, ttl)
	if err == nil {
		g.swap()
	}
	return l, err
}

// TestWaitGrantedAsItsCredentialLosesTheKeyIsGivenBack: a wait granted as a
// reload takes the key from its credential is refused, and the lease given
// back, not handed to a client the server no longer lets near the key.
func TestWaitGrantedAsItsCredentialLosesTheKeyIsGivenBack(t *testing.T) {
	const holder, waiter = "holder-token-0123456789", "waiter-token-0123456789"
	all := leasehttp.Credential{Token: holder, Prefixes: []string{"*"}}
	var srv *checkedServer
	mem := memtest.New(t)
	b := grantThenSwap{Backend: mem, wa: mem, swap: func() {
		if err := srv.SetCredentials([]leasehttp.Credential{all, {Token: waiter, Prefixes: []string{"other/"}}}); err != nil {
			t.Error(err)
		}
	}}
	srv, hs := startServer(t, b, leasehttp.WithCredentials([]leasehttp.Credential{all, {Token: waiter, Prefixes: []string{"jobs/"}}}))
	status, body := call(t, "POST", hs.URL+"/v1/leases/jobs%2Fy/acquire", waiter, `{"owner":"waiter","ttl_ms":60000,"wait_ms":5000}`)
	if status != http.StatusForbidden {
		t.Fatalf("a wait granted as the reload took the key: HTTP %d %s, want 403", status, body)
	}
	if status, body := call(t, "GET", hs.URL+"/v1/leases/jobs%2Fy", holder, ""); status != http.StatusNotFound {
		t.Fatalf("the key after the refused grant: HTTP %d %s, want 404 (given back)", status, body)
	}
}
