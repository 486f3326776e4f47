// Package ui is the dashboard of lease serve: a page, its script and its
// style sheet, embedded in the binary, that show the leases under a prefix
// live, each key's recent tokens and holders, a timeline of changes with
// expirations highlighted, and the server's own figures.
//
// The files hold no data. The page reads the HTTP API of the server that
// serves it (GET /v1/watch through fetch, GET /v1/stats, relative to the
// page) with the bearer token the user types in, which it keeps in the
// tab's session storage only and sends in the Authorization header, never
// in a URL; so it sees exactly what the credential may list. The API never
// sends a lease's secret ID to a watch or a list, and the page drops any
// member of a lease it does not show.
//
// Handler serves the files under Prefix with a Content-Security-Policy that
// allows only the page's own script, style and API (no inline script, no
// other origin), so the dashboard works offline and a key or owner name
// that looks like markup stays text.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under; Handler redirects
// Prefix without its trailing slash to it.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every file: the page may load only its
// own script and style sheet and talk only to its own origin.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// file is one embedded file with what its answer needs.
type file struct {
	body  []byte
	ctype string
	etag  string
}

// files are the embedded files by their path under Prefix ("" for the page).
var files = func() map[string]file {
	types := map[string]string{
		".html": "text/html; charset=utf-8",
		".js":   "text/javascript; charset=utf-8",
		".css":  "text/css; charset=utf-8",
	}
	out := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		name := strings.TrimPrefix(p, "static/")
		if name == "index.html" {
			name = ""
		}
		out[name] = file{body: b, ctype: types[path.Ext(p)], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("ui: reading the embedded files: " + err.Error()) // they are compiled in
	}
	return out
}()

// Handler returns the handler of the dashboard's files. It answers paths
// under Prefix (GET and HEAD; other methods 405), redirects the bare
// "/ui" to Prefix, and answers 404 to anything else, so mount it at
// Prefix and at "/ui", or route every path starting with "/ui" to it.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed; the dashboard answers GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	f, found := files[name]
	if !ok || !found {
		http.Error(w, "no such file in the dashboard", http.StatusNotFound)
		return
	}
	h.Set("Content-Type", f.ctype)
	// Revalidated on each load, so a new binary's files are used at once.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
