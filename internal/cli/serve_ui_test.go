package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehq/lease/leasehttp/ui"
)

// TestServeDashboard: lease serve answers the dashboard under /ui, with its
// security headers, leads GET / there, and leaves every other path to the API as before, even
// one a ServeMux in front would have cleaned and redirected.
func TestServeDashboard(t *testing.T) {
	base := "http://" + startServe(t, serveConfig(t, io.Discard)).Addr()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := noRedirect.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	resp, body := get("/ui/")
	if resp.StatusCode != 200 || !strings.Contains(body, `<script src="app.js"`) {
		t.Fatalf("GET /ui/: HTTP %d %.200s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != ui.ContentSecurityPolicy {
		t.Errorf("GET /ui/: Content-Security-Policy %q", csp)
	}
	if resp, _ := get("/ui/app.js"); resp.StatusCode != 200 {
		t.Errorf("GET /ui/app.js: HTTP %d", resp.StatusCode)
	}
	if resp, _ := get("/ui"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: HTTP %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := get("/"); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: HTTP %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The API's own answers, unchanged.
	if resp, body := get("/v1/leases//acquire"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"invalid"`) {
		t.Errorf("GET /v1/leases//acquire: HTTP %d %s, want the API's 400", resp.StatusCode, body)
	}
	if resp, body := get("/v1/stats"); resp.StatusCode != 200 || !strings.Contains(body, `"watchers"`) {
		t.Errorf("GET /v1/stats: HTTP %d %s", resp.StatusCode, body)
	}
	if resp, body := get("/nothing"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Errorf("GET /nothing: HTTP %d %s, want the API's 404", resp.StatusCode, body)
	}
}
