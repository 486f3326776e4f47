package ui_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehq/lease/leasehttp/ui"
)

func get(t *testing.T, h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestHandlerServesFiles: the page, its script and its style sheet, each
// with its type, the Content-Security-Policy and no caching without
// revalidation; nothing else.
func TestHandlerServesFiles(t *testing.T) {
	h := ui.Handler()
	for target, ctype := range map[string]string{
		"/ui/":        "text/html; charset=utf-8",
		"/ui/app.js":  "text/javascript; charset=utf-8",
		"/ui/app.css": "text/css; charset=utf-8",
	} {
		rec := get(t, h, "GET", target)
		if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			t.Errorf("GET %s: HTTP %d, %d bytes", target, rec.Code, rec.Body.Len())
			continue
		}
		for name, want := range map[string]string{
			"Content-Type":            ctype,
			"Content-Security-Policy": ui.ContentSecurityPolicy,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "no-referrer",
			"Cache-Control":           "no-cache",
		} {
			if got := rec.Header().Get(name); got != want {
				t.Errorf("GET %s: %s: %q, want %q", target, name, got, want)
			}
		}
		etag := rec.Header().Get("ETag")
		if etag == "" {
			t.Errorf("GET %s: no ETag", target)
		} else if again := get(t, h, "GET", target, "If-None-Match", etag); again.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: HTTP %d, want 304", target, again.Code)
		}
		if head := get(t, h, "HEAD", target); head.Code != http.StatusOK || head.Body.Len() != 0 {
			t.Errorf("HEAD %s: HTTP %d with %d bytes", target, head.Code, head.Body.Len())
		}
	}
	if rec := get(t, h, "GET", "/ui"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: HTTP %d to %q, want a redirect to /ui/", rec.Code, rec.Header().Get("Location"))
	}
	for _, target := range []string{"/ui/index.html", "/ui/static/app.js", "/ui/nope", "/", "/uix", "/ui/../ui/app.js"} {
		if rec := get(t, h, "GET", target); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: HTTP %d, want 404", target, rec.Code)
		}
	}
	if rec := get(t, h, "POST", "/ui/"); rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /ui/: HTTP %d, Allow %q; want 405 with GET, HEAD", rec.Code, rec.Header().Get("Allow"))
	}
}

// TestPageNeedsNoInlineCode: the policy allows no inline script or style,
// so the page must have none (it would not run), and the script must never
// parse text from the server as markup.
func TestPageNeedsNoInlineCode(t *testing.T) {
	for _, directive := range []string{"script-src 'self'", "style-src 'self'", "connect-src 'self'", "default-src 'none'"} {
		if !strings.Contains(ui.ContentSecurityPolicy, directive) {
			t.Errorf("the policy lacks %s", directive)
		}
	}
	if strings.Contains(ui.ContentSecurityPolicy, "unsafe") {
		t.Errorf("the policy allows something unsafe: %s", ui.ContentSecurityPolicy)
	}
	h := ui.Handler()
	page := get(t, h, "GET", "/ui/").Body.String()
	for _, tag := range regexp.MustCompile(`<script[^>]*>[^<]*`).FindAllString(page, -1) {
		if !strings.Contains(tag, " src=") || !strings.HasSuffix(tag, ">") {
			t.Errorf("the page has an inline script: %q", tag)
		}
	}
	for _, re := range []string{`<style`, `\sstyle=`, `\son[a-z]+=`, `https?://`} {
		if m := regexp.MustCompile(re).FindString(page); m != "" {
			t.Errorf("the page has %q (%s): inline code, or a resource from elsewhere", m, re)
		}
	}
	if !strings.Contains(page, `<script src="app.js" defer></script>`) {
		t.Error("the page does not load app.js")
	}
	js := get(t, h, "GET", "/ui/app.js").Body.String()
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage", "EventSource", "http://", "https://"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}
