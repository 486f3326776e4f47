package leasehttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// callHost sends a request to url with the Host header set to host, as a
// browser tricked by DNS rebinding would: to this server's address, under
// another name.
func callHost(t *testing.T, method, url, host, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHostCheckedWithoutCredentials: a server without credentials answers
// /v1 only for loopback names and addresses and for allowed hosts; a
// request under any other name, such as a web page's after DNS rebinding,
// is 403 forbidden and takes no lease.
func TestHostCheckedWithoutCredentials(t *testing.T) {
	store := newMem(t)
	_, hs := startServer(t, store, leasehttp.WithAllowedHosts([]string{"lease.internal", "10.0.0.7", "[FD00::1]", "Other.Example."}))
	port := hs.URL[strings.LastIndex(hs.URL, ":"):]
	acquire := `{"owner":"page","ttl_ms":60000}`
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"attacker.example" + port, false},
		{"attacker.example", false},
		{"localhost.attacker.example", false},
		{"127.0.0.1.attacker.example", false},
		{"localhostx", false},
		{"192.168.1.10" + port, false},
		{"[fd00::2]" + port, false},
		{"lease.internal.attacker.example", false},
		{"127.0.0.1" + port, true},
		{"127.9.8.7", true},
		{"localhost" + port, true},
		{"LocalHost.", true},
		{"app.localhost" + port, true},
		{"[::1]" + port, true},
		{"[::1]", true},
		{"[::ffff:127.0.0.1]" + port, true},
		{"lease.internal" + port, true},
		{"LEASE.INTERNAL", true},
		{"10.0.0.7" + port, true},
		{"[fd00:0::1]" + port, true},
		{"other.example" + port, true},
	} {
		t.Run(tc.host, func(t *testing.T) {
			key := "k-" + strings.NewReplacer("[", "", "]", "", ":", "-").Replace(tc.host)
			status, body := callHost(t, "POST", hs.URL+"/v1/leases/"+key+"/acquire", tc.host, "", acquire)
			_, gerr := store.Get(ctxFor(t), key)
			switch {
			case tc.ok && (status != 200 || gerr != nil):
				t.Fatalf("HTTP %d %s (lease: %v), want 200 and the lease", status, body, gerr)
			case !tc.ok && (status != 403 || !strings.Contains(body, `"code":"forbidden"`) || !strings.Contains(body, "DNS rebinding")):
				t.Fatalf("HTTP %d %s, want 403 forbidden naming DNS rebinding", status, body)
			case !tc.ok && !errors.Is(gerr, lease.ErrNotFound):
				t.Fatalf("a refused request took the lease: Get = %v", gerr)
			}
			if tc.ok {
				return
			}
			status, body = callHost(t, "GET", hs.URL+"/v1/leases", tc.host, "", "")
			if status != 403 {
				t.Errorf("list: HTTP %d %s, want 403", status, body)
			}
			// Probes reveal no lease and need no check, as they need no token.
			if status, body := callHost(t, "GET", hs.URL+"/healthz", tc.host, "", ""); status != 200 {
				t.Errorf("healthz: HTTP %d %s, want 200", status, body)
			}
		})
	}
}

// TestHostNotCheckedWithCredentials: a bearer token already keeps a web page
// out, so a server with credentials answers any Host.
func TestHostNotCheckedWithCredentials(t *testing.T) {
	const tok = "tok-0123456789abcdef"
	_, hs := startServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{{Token: tok, Prefixes: []string{"*"}}}))
	status, body := callHost(t, "POST", hs.URL+"/v1/leases/k/acquire", "leases.example.com:7420", tok, `{"owner":"o","ttl_ms":60000}`)
	if status != 200 {
		t.Fatalf("HTTP %d %s, want 200", status, body)
	}
}

// TestHostRefusalMapsToErrForbidden: the Client reads the refusal as
// ErrForbidden, as it reads a credential's.
func TestHostRefusalMapsToErrForbidden(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	tr := &http.Transport{
		// lease.test resolves nowhere; dial the test server instead.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, hs.Listener.Addr().String())
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := newClient(t, strings.Replace(hs.URL, "127.0.0.1", "lease.test", 1), leasehttp.WithHTTPClient(&http.Client{Transport: tr}))
	if _, err := c.Acquire(ctxFor(t), "k", "o", time.Minute); !errors.Is(err, leasehttp.ErrForbidden) {
		t.Fatalf("Acquire under a foreign Host: err = %v, want ErrForbidden", err)
	}
}

func TestWithAllowedHostsValidates(t *testing.T) {
	for _, h := range []string{"", " ", "lease.internal:7420", "[::1]:7420", "http://lease.internal", "lease.internal/x",
		"*.example.com", "[lease.internal]", "[10.0.0.1]", "user@host", "."} {
		if _, err := leasehttp.NewServer(newMem(t), leasehttp.WithAllowedHosts([]string{h})); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("WithAllowedHosts(%q): err = %v, want ErrInvalid", h, err)
		}
	}
}
