package leasehttp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// TestListQuery checks GET /v1/leases's query: a page answers leases and
// next, and a limit or cursor the server cannot use is 400 with code
// invalid (the document's checker also sees each exchange).
func TestListQuery(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	c := newClient(t, hs.URL)
	for _, k := range []string{"q/a", "q/b", "q/c"} {
		if _, err := c.Acquire(ctxFor(t), k, "o", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	status, body := call(t, "GET", hs.URL+"/v1/leases?prefix=q%2F&limit=2", "", "")
	var page struct {
		Leases []struct{ Key string }
		Next   *string
	}
	if err := json.Unmarshal([]byte(body), &page); status != 200 || err != nil {
		t.Fatalf("limit 2: HTTP %d %s (%v)", status, body, err)
	}
	if len(page.Leases) != 2 || page.Next == nil || *page.Next != lease.Cursor("q/b") {
		t.Fatalf("limit 2: %s; want q/a, q/b and next after q/b", body)
	}
	status, body = call(t, "GET", hs.URL+"/v1/leases?prefix=q%2F&limit=2&after="+*page.Next, "", "")
	if status != 200 || !strings.Contains(body, `"key":"q/c"`) || !strings.Contains(body, `"next":""`) {
		t.Fatalf("second page: HTTP %d %s; want q/c and next \"\"", status, body)
	}
	for _, q := range []string{
		"limit=-1", "limit=10001", "limit=abc", "limit=", "limit=%2B5", "limit=1e3", "limit=99999999999999999999",
		"limit=1&limit=2", "after=%21", "after=YR", "after=" + lease.Cursor("a\n"), "after=a&after=b",
		"prefix=a&prefix=b", "page=2", "cursor=" + lease.Cursor("q/a"),
	} {
		status, body := call(t, "GET", hs.URL+"/v1/leases?"+q, "", "")
		if status != 400 || !strings.Contains(body, `"code":"invalid"`) {
			t.Errorf("?%s: HTTP %d %s; want 400 invalid", q, status, body)
		}
	}
	if status, body := call(t, "GET", hs.URL+"/v1/leases?limit=0&after=", "", ""); status != 200 {
		t.Errorf("?limit=0&after=: HTTP %d %s; want 200 (the defaults)", status, body)
	}
}

// TestListScopedPages walks the pages of a credential whose prefixes split
// a list into several backend lists, at every limit: each key it covers
// once, in order, nothing else, and no empty page at the end.
func TestListScopedPages(t *testing.T) {
	const all, some = "tok-all-0123456789", "tok-some-0123456789"
	_, hs := startServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: all, Prefixes: []string{"*"}},
		{Token: some, Prefixes: []string{"s/b/", "s/d/", "s/a/", "s/d/x/", "s/f/"}}, // s/f/ holds nothing
	}))
	admin := newClient(t, hs.URL, leasehttp.WithAuthToken(all))
	var want []string
	for _, k := range []string{"s/a/1", "s/a/2", "s/b/1", "s/c/1", "s/d/1", "s/d/x/1", "s/d/y", "s/e"} {
		if _, err := admin.Acquire(ctxFor(t), k, "o", time.Minute); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(k, "s/a/") || strings.HasPrefix(k, "s/b/") || strings.HasPrefix(k, "s/d/") {
			want = append(want, k)
		}
	}
	scoped := newClient(t, hs.URL, leasehttp.WithAuthToken(some))
	for limit := 1; limit <= len(want)+1; limit++ {
		var got []string
		pages := 0
		p := lease.Page{Limit: limit}
		for {
			page, err := scoped.List(ctxFor(t), "s/", p)
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			pages++
			if len(page.Leases) > limit || page.Next != "" && len(page.Leases) != limit {
				t.Fatalf("limit %d: page of %d with next %q", limit, len(page.Leases), page.Next)
			}
			for _, l := range page.Leases {
				got = append(got, l.Key)
			}
			if page.Next == "" {
				break
			}
			p.After = page.Next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: walk saw %q, want %q", limit, got, want)
		}
		if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}
}

// TestClientListRefusesBadAnswers: a page longer than the limit or with a
// next that is no cursor is a malformed answer, not a page.
func TestClientListRefusesBadAnswers(t *testing.T) {
	for name, answer := range map[string]string{
		"too many":   `{"leases":[` + strings.Repeat(`{"key":"k","owner":"o","token":1,"ttl_ms":1000,"expires_at":"2030-01-01T00:00:00Z"},`, 2) + `{"key":"k","owner":"o","token":1,"ttl_ms":1000,"expires_at":"2030-01-01T00:00:00Z"}],"next":""}`,
		"bad next":   `{"leases":[],"next":"!!"}`,
		"not a page": `[]`,
	} {
		t.Run(name, func(t *testing.T) {
			hs := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, answer)
			}))
			t.Cleanup(hs.Close)
			c := newClient(t, hs.URL)
			if page, err := c.List(ctxFor(t), "", lease.Page{Limit: 2}); !errors.Is(err, lease.ErrUnavailable) {
				t.Errorf("List of %s = %+v, %v; want ErrUnavailable", answer, page, err)
			}
		})
	}
}
