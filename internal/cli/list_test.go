package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
