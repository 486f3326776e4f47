package memstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestListMatchesModel acquires and releases random keys, more than fit in
// the runs' first sizes so that fresh, small and big all fill and merge,
// with sweeps between, and checks every walk, at random limits and from
// random cursors, against the set of keys held; and that the runs hold
// each entry of the index once, so that swept entries do not pile up.
func TestListMatchesModel(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	held := map[string]lease.Lease{}
	key := func() string { return fmt.Sprintf("k/%05d", rng.IntN(6000)) }
	for round := range 40 {
		for range 300 {
			k := key()
			if l, ok := held[k]; ok {
				if err := s.Release(ctx, l); err != nil {
					t.Fatal(err)
				}
				delete(held, k)
				continue
			}
			l, err := s.Acquire(ctx, k, "o", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			held[k] = l
		}
		if round%7 == 6 {
			s.idx.mu.Lock()
			s.idx.rebuild(s.now(), true)
			s.idx.mu.Unlock()
		}
		want := slices.Sorted(maps.Keys(held))
		limit := 1 + rng.IntN(700)
		start := rng.IntN(len(want) + 1)
		var p lease.Page
		if start > 0 {
			p.After = lease.Cursor(want[start-1])
		}
		var got []string
		for {
			page, err := s.List(ctx, "k/", lease.Page{Limit: limit, After: p.After})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range page.Leases {
				got = append(got, l.Key)
			}
			if page.Next == "" {
				break
			}
			p.After = page.Next
		}
		if !slices.Equal(got, want[start:]) {
			t.Fatalf("round %d: walk from %d with limit %d saw %d keys, want %d", round, start, limit, len(got), len(want)-start)
		}
		s.idx.mu.Lock()
		o := &s.idx.ord
		if runs := len(o.big) + len(o.small) + len(o.fresh); runs != s.idx.n {
			t.Fatalf("round %d: the runs hold %d entries, the index %d", round, runs, s.idx.n)
		}
		s.idx.mu.Unlock()
	}
}

// TestMergeKeepsOrder checks merge on runs that interleave, touch and
// are empty.
func TestMergeKeepsOrder(t *testing.T) {
	run := func(keys ...string) []*entry {
		var out []*entry
		for _, k := range keys {
			out = append(out, &entry{entryState: entryState{key: k}})
		}
		return out
	}
	keys := func(es []*entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.key)
		}
		return out
	}
	for _, tc := range []struct{ a, b, want []string }{
		{nil, nil, nil},
		{[]string{"a", "c"}, nil, []string{"a", "c"}},
		{nil, []string{"b"}, []string{"b"}},
		{[]string{"b", "d", "f"}, []string{"a", "c", "g"}, []string{"a", "b", "c", "d", "f", "g"}},
		{[]string{"a", "b"}, []string{"c", "d"}, []string{"a", "b", "c", "d"}},
		{[]string{"c", "d"}, []string{"a", "b"}, []string{"a", "b", "c", "d"}},
	} {
		if got := keys(merge(run(tc.a...), run(tc.b...))); !slices.Equal(got, tc.want) {
			t.Errorf("merge(%q, %q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}
