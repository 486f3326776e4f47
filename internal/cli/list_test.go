package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// TestListWalksEveryPage: without --limit, list prints every lease however
// many pages the server's answers take, as one JSON object or line by line.
func TestListWalksEveryPage(t *testing.T) {
	b := memtest.New(t)
	n := lease.DefaultPageLimit + 2
	for i := range n {
		if _, err := b.Acquire(context.Background(), fmt.Sprintf("p/%05d", i), "o", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, b, nil, nil, "list", "--prefix", "p/")
	if r.code != ExitOK || strings.Count(r.stdout, "\n") != n || r.stderr != "" {
		t.Fatalf("list: exit %d, %d lines, stderr %q; want %d lines", r.code, strings.Count(r.stdout, "\n"), r.stderr, n)
	}
	r = cli(t, b, nil, nil, "list", "--prefix", "p/", "-o", "json")
	var all map[string][]map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all["leases"]) != n || len(all) != 1 {
		t.Fatalf("list -o json: %d leases, keys %d, %v; want %d leases and only them", len(all["leases"]), len(all), err, n)
	}
	if last := all["leases"][n-1]["key"]; last != fmt.Sprintf("p/%05d", n-1) {
		t.Errorf("last lease %v, want the last key", last)
	}
}

// TestListOnePage: --limit prints one page and the cursor that continues
// it, which --after takes.
func TestListOnePage(t *testing.T) {
	b := memtest.New(t)
	for _, k := range []string{"q/a", "q/b", "q/c"} {
		if _, err := b.Acquire(context.Background(), k, "o", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, b, nil, nil, "list", "--prefix", "q/", "--limit", "2")
	next := lease.Cursor("q/b")
	if r.code != ExitOK || strings.Count(r.stdout, "\n") != 2 || r.stderr != "next: --after "+next+"\n" {
		t.Fatalf("list --limit 2: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = cli(t, b, nil, nil, "list", "--prefix", "q/", "--limit", "2", "--after", next, "-o", "json")
	var page struct {
		Leases []struct{ Key string }
		Next   *string
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Leases) != 1 || page.Leases[0].Key != "q/c" || page.Next == nil || *page.Next != "" {
		t.Fatalf("list --after: %q (%v); want q/c and next \"\"", r.stdout, err)
	}
	r = cli(t, b, nil, nil, "list", "--prefix", "q/", "--after", lease.Cursor("q/a"))
	if r.code != ExitOK || !strings.Contains(r.stdout, "key=q/b") || !strings.Contains(r.stdout, "key=q/c") || strings.Contains(r.stdout, "key=q/a") {
		t.Fatalf("list --after without --limit: %q; want q/b and q/c", r.stdout)
	}
}

// TestListRefusesAPageThatDoesNotMoveOn: behind a proxy that drops the
// query (after=…), every page the server answers is the first, with the
// same next cursor; a broken server may answer an empty page whose next
// cursor is the one asked for. list ends with exit 1 and one line that says
// so, having printed each lease once; it used to print the first page again,
// or ask again, for as long as the answers came.
func TestListRefusesAPageThatDoesNotMoveOn(t *testing.T) {
	b := memtest.New(t)
	n := lease.DefaultPageLimit + 2
	for i := range n {
		if _, err := b.Acquire(context.Background(), fmt.Sprintf("p/%05d", i), "o", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	api, err := url.Parse(apiServerOver(t, b).URL)
	if err != nil {
		t.Fatal(err)
	}
	dropAfter := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(api)
		q := r.Out.URL.Query()
		q.Del("after")
		r.Out.URL.RawQuery = q.Encode()
	}}
	sameCursor := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"leases":[],"next":%q}`, lease.Cursor("p/00000"))
	})
	for _, tc := range []struct {
		name   string
		server http.Handler
		want   string
	}{
		{"a proxy that drops the query", dropAfter, "the server answered from"},
		{"empty pages with the same cursor", sameCursor, "does not move past"},
	} {
		// The server ends the walk after a few pages, so that a walk that
		// does not stop by itself ends rather than hang the test.
		const pages = 5
		var lists atomic.Int32
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/leases" && lists.Add(1) > pages {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"leases":[],"next":""}`)
				return
			}
			tc.server.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		for _, output := range []string{"text", "json"} {
			lists.Store(0)
			r := cliHTTP(t, map[string]string{EnvServer: front.URL}, nil, "list", "--prefix", "p/", "-o", output)
			if r.code != ExitFailure {
				t.Errorf("%s: list -o %s: exit %d after %d requests, stdout %d bytes, stderr %q; want %d", tc.name, output, r.code, lists.Load(), len(r.stdout), r.stderr, ExitFailure)
				continue
			}
			oneErrorLine(t, r, tc.want)
			if got := lists.Load(); got != 2 {
				t.Errorf("%s: list -o %s: %d requests; want 2, the second answering the first's cursor again", tc.name, output, got)
			}
			if c := strings.Count(r.stdout, "key=p/00000 "); output == "text" && c > 1 {
				t.Errorf("%s: list printed the first lease %d times", tc.name, c)
			}
		}
	}
}
