package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/memstore"
)

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prefix    string
		page      lease.Page
		wantLimit int
		wantAfter string
		wantErr   bool
	}{
		{name: "zero page", wantLimit: lease.DefaultPageLimit},
		{name: "limit 1", page: lease.Page{Limit: 1}, wantLimit: 1},
		{name: "limit max", page: lease.Page{Limit: lease.MaxPageLimit}, wantLimit: lease.MaxPageLimit},
		{name: "limit above max", page: lease.Page{Limit: lease.MaxPageLimit + 1}, wantErr: true},
		{name: "negative limit", page: lease.Page{Limit: -1}, wantErr: true},
		{name: "cursor", page: lease.Page{After: lease.Cursor("jobs/é 🔒")}, wantLimit: lease.DefaultPageLimit, wantAfter: "jobs/é 🔒"},
		{name: "cursor with padding", page: lease.Page{After: lease.Cursor("ab") + "="}, wantErr: true},
		{name: "cursor with a newline", page: lease.Page{After: lease.Cursor("ab") + "\n"}, wantErr: true},
		{name: "cursor not base64", page: lease.Page{After: "a.b"}, wantErr: true},
		{name: "cursor with stray bits", page: lease.Page{After: "YR"}, wantErr: true},
		{name: "cursor of a control character", page: lease.Page{After: lease.Cursor("a\n")}, wantErr: true},
		{name: "cursor of too long a key", page: lease.Page{After: lease.Cursor(string(make([]byte, lease.MaxKeyLen+1)))}, wantErr: true},
		{name: "bad prefix", prefix: "a\x00", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, after, err := lease.ParseList(tc.prefix, tc.page)
			if tc.wantErr {
				if !errors.Is(err, lease.ErrInvalid) {
					t.Errorf("ParseList(%q, %+v) = %d, %q, %v; want ErrInvalid", tc.prefix, tc.page, limit, after, err)
				}
				return
			}
			if err != nil || limit != tc.wantLimit || after != tc.wantAfter {
				t.Errorf("ParseList(%q, %+v) = %d, %q, %v; want %d, %q", tc.prefix, tc.page, limit, after, err, tc.wantLimit, tc.wantAfter)
			}
		})
	}
}

// FuzzParseList checks that a cursor ParseList accepts names a valid key
// whose Cursor is the cursor itself: one spelling per key.
func FuzzParseList(f *testing.F) {
	f.Add(lease.Cursor("jobs/1"), 0)
	f.Add("YR", 5)
	f.Add("", -1)
	f.Fuzz(func(t *testing.T, after string, limit int) {
		l, key, err := lease.ParseList("", lease.Page{Limit: limit, After: after})
		if err != nil {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if l < 1 || l > lease.MaxPageLimit {
			t.Fatalf("limit %d accepted as %d", limit, l)
		}
		if after == "" {
			return
		}
		if err := lease.ValidateKey(key); err != nil {
			t.Fatalf("cursor %q names an invalid key %q: %v", after, key, err)
		}
		if c := lease.Cursor(key); c != after {
			t.Fatalf("cursor %q names %q, whose cursor is %q", after, key, c)
		}
	})
}

func TestPageOf(t *testing.T) {
	ls := func(keys ...string) []lease.Lease {
		var out []lease.Lease
		for _, k := range keys {
			out = append(out, lease.Lease{Key: k})
		}
		return out
	}
	if p := lease.PageOf(ls("a", "b"), 2); len(p.Leases) != 2 || p.Next != "" {
		t.Errorf("PageOf of as many as the limit = %+v, want both and no Next", p)
	}
	p := lease.PageOf(ls("a", "b", "c"), 2)
	if len(p.Leases) != 2 || p.Next != lease.Cursor("b") {
		t.Errorf("PageOf of one more than the limit = %+v, want two and Next after b", p)
	}
	if p := lease.PageOf(nil, 5); len(p.Leases) != 0 || p.Next != "" {
		t.Errorf("PageOf(nil) = %+v", p)
	}
}

// TestAllWalksPages walks more leases than a page holds, and stops early
// when the loop breaks.
func TestAllWalksPages(t *testing.T) {
	ctx := context.Background()
	s := memtest.New(t)
	var want []string
	for i := range lease.DefaultPageLimit + 5 {
		k := fmt.Sprintf("all/%05d", i)
		if _, err := s.Acquire(ctx, k, "o", time.Minute); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	if _, err := s.Acquire(ctx, "other", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	c, err := lease.NewClient(s)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for l, err := range c.All(ctx, "all/") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.Key)
	}
	if !slices.Equal(got, want) {
		t.Errorf("All saw %d keys, want %d in order", len(got), len(want))
	}
	n := 0
	for range c.All(ctx, "all/") {
		if n++; n == 3 {
			break
		}
	}
}

// stuck is a backend whose List always answers the same full page.
type stuck struct{ lease.Backend }

func (stuck) List(context.Context, string, lease.Page) (lease.ListPage, error) {
	return lease.ListPage{Leases: []lease.Lease{{Key: "a"}}, Next: lease.Cursor("a")}, nil
}

// TestAllStopsOnCursorThatDoesNotMove: a backend that answers the same
// Next again would make the walk endless; All ends it with an error.
func TestAllStopsOnCursorThatDoesNotMove(t *testing.T) {
	pages := 0
	var last error
	for _, err := range lease.All(context.Background(), stuck{memtest.New(t)}, "") {
		if pages++; pages > 10 {
			t.Fatal("All went on past a cursor that does not move")
		}
		last = err
	}
	if !errors.Is(last, lease.ErrUnavailable) {
		t.Errorf("All ended with %v, want ErrUnavailable", last)
	}
}

func ExampleClient_All() {
	ctx := context.Background()
	s, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for _, k := range []string{"jobs/b", "jobs/a", "mail/x"} {
		if _, err := s.Acquire(ctx, k, "worker", time.Minute); err != nil {
			fmt.Println(err)
			return
		}
	}
	c, _ := lease.NewClient(s)
	for l, err := range c.All(ctx, "jobs/") {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(l.Key, l.Token)
	}
	// Output:
	// jobs/a 1
	// jobs/b 1
}
