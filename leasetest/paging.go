package leasetest

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasehq/lease"
)

// Paged List: limits, cursors, page boundaries and walks under churn.

// maxWalkPages bounds a walk, so that a backend whose cursor does not move
// on fails the test instead of hanging it.
const maxWalkPages = 10000

// walk lists every page under prefix with limit, checking each page's shape:
// no more than limit leases, zero IDs, keys under prefix and after the keys
// before, and a Next only on a full page. It returns the pages' leases in
// order, which the caller checks against what it expects.
func walk(t *testing.T, b lease.Backend, prefix string, limit int) (all []lease.Lease, pages int) {
	t.Helper()
	p := lease.Page{Limit: limit}
	want := limit
	if want == 0 {
		want = lease.DefaultPageLimit
	}
	for {
		page, err := b.List(ctxFor(t), prefix, p)
		if err != nil {
			t.Fatalf("List(%q, %+v) on page %d: %v", prefix, p, pages+1, err)
		}
		pages++
		if len(page.Leases) > want {
			t.Fatalf("List(%q, %+v) returned %d leases, more than the limit %d", prefix, p, len(page.Leases), want)
		}
		if page.Next != "" && len(page.Leases) < want {
			t.Fatalf("List(%q, %+v) returned %d leases, fewer than the limit %d, and a Next %q: a page is short only at the end",
				prefix, p, len(page.Leases), want, page.Next)
		}
		for _, l := range page.Leases {
			if len(all) > 0 && l.Key <= all[len(all)-1].Key {
				t.Fatalf("List(%q, limit %d) gave %q after %q: a walk goes in byte order and shows each key once",
					prefix, limit, brief([]string{l.Key}), brief([]string{all[len(all)-1].Key}))
			}
			all = append(all, l)
			if !l.ID.IsZero() {
				t.Fatalf("List(%q) returned the secret ID of %q", prefix, l.Key)
			}
			if !strings.HasPrefix(l.Key, prefix) {
				t.Fatalf("List(%q) returned %q, which does not start with the prefix", prefix, l.Key)
			}
		}
		if page.Next == "" {
			return all, pages
		}
		if pages == maxWalkPages {
			t.Fatalf("List(%q, limit %d) still had a Next after %d pages", prefix, limit, pages)
		}
		p.After = page.Next
	}
}

// listAll is every lease under prefix, walking all pages.
func listAll(t *testing.T, b lease.Backend, prefix string) []lease.Lease {
	t.Helper()
	all, _ := walk(t, b, prefix, 0)
	return all
}

// brief shortens long keys for messages: the long ones differ at the end.
func brief(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		if len(k) > 80 {
			k = fmt.Sprintf("%s…(%d bytes)…%s", k[:40], len(k), k[len(k)-16:])
		}
		out[i] = k
	}
	return out
}

func keysOf(ls []lease.Lease) []string {
	keys := make([]string, 0, len(ls))
	for _, l := range ls {
		keys = append(keys, l.Key)
	}
	return keys
}

// oddNames are key suffixes whose byte order differs from other orders a
// store might use: case, UTF-16 (U+FF61 sorts before an emoji in bytes and
// after it in UTF-16), bytes above 0x7f, the characters escaping and hash
// tags use, a key that is a prefix of the next, and long keys that share
// all but their last byte.
func oddNames(room int) []string {
	long := strings.Repeat("L", room-1)
	return []string{
		"A", "a", "a b", "a%b", "a*", "a\\b", "a{b}", "a}", "ab", "ab/",
		"~", "é", "\u00a0", "\uff61", "🔒", "日本", "'\"",
		long + "1", long + "2",
	}
}

// bulkTTL is the TTL of leases a test takes by the thousand and must find
// all held afterwards: the longest a lease may have. Taking them costs a
// time that grows with the machine's load, not with anything the suite
// controls: 1,001 acquisitions through leasehttp's Client, under the race
// detector on a loaded 2-core machine, took 52 s of longTTL's minute, and
// past the minute the first of them had expired before the List that
// counts them.
const bulkTTL = lease.MaxTTL

// listPageLimits checks the limit: 0 means DefaultPageLimit, MaxPageLimit
// is allowed, a negative limit or more than MaxPageLimit is ErrInvalid, and
// a page holds exactly the limit when there are more leases.
func (s *suite) listPageLimits(t *testing.T, b lease.Backend) {
	base := key(t, "limits") + "/"
	n := lease.DefaultPageLimit + 1
	var (
		wg   sync.WaitGroup
		errs = make(chan error, n)
		keys = make(chan string, n)
	)
	for i := range n {
		keys <- fmt.Sprintf("%s%05d", base, i)
	}
	close(keys)
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				if _, err := b.Acquire(ctxFor(t), k, "o", bulkTTL); err != nil {
					errs <- fmt.Errorf("Acquire(%q): %w", k, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	first, err := b.List(ctxFor(t), base, lease.Page{})
	if err != nil {
		t.Fatalf("List with the zero Page: %v", err)
	}
	if len(first.Leases) != lease.DefaultPageLimit || first.Next == "" {
		t.Fatalf("List of %d leases with the zero Page = %d leases, Next %q; want DefaultPageLimit (%d) and a Next",
			n, len(first.Leases), first.Next, lease.DefaultPageLimit)
	}
	rest, err := b.List(ctxFor(t), base, lease.Page{After: first.Next})
	if err != nil {
		t.Fatalf("List of the second page: %v", err)
	}
	if got := keysOf(rest.Leases); len(got) != 1 || got[0] != fmt.Sprintf("%s%05d", base, n-1) || rest.Next != "" {
		t.Errorf("second page = %q, Next %q; want only the last key and no Next", got, rest.Next)
	}
	whole, err := b.List(ctxFor(t), base, lease.Page{Limit: lease.MaxPageLimit})
	if err != nil {
		t.Fatalf("List with limit MaxPageLimit: %v", err)
	}
	if len(whole.Leases) != n || whole.Next != "" {
		t.Errorf("List with limit MaxPageLimit = %d leases, Next %q; want all %d and no Next", len(whole.Leases), whole.Next, n)
	}
	for _, limit := range []int{-1, -lease.DefaultPageLimit, lease.MaxPageLimit + 1, 1 << 40} {
		if page, err := b.List(ctxFor(t), base, lease.Page{Limit: limit}); !errIs(err, lease.ErrInvalid) {
			t.Errorf("List with limit %d = %d leases, err %v; want ErrInvalid", limit, len(page.Leases), err)
		}
	}
}

// listPageBadInput checks that cursors List did not make, and bad prefixes,
// are ErrInvalid rather than a guess at where to start.
func (s *suite) listPageBadInput(t *testing.T, b lease.Backend) {
	base := key(t, "cursor") + "/"
	mustAcquire(t, b, base+"a", "o", longTTL)
	mustAcquire(t, b, base+"b", "o", longTTL)
	raw := base64.RawURLEncoding.EncodeToString
	bad := map[string]string{
		"not base64":               "!!!",
		"padded":                   raw([]byte(base+"a")) + "=",
		"standard alphabet":        base64.RawStdEncoding.EncodeToString([]byte("k\xfb\xff")),
		"non-canonical last digit": "YR", // "a" is YQ; YR has stray low bits
		"only padding":             "==",
		"key with NUL":             raw([]byte(base + "\x00")),
		"key with newline":         raw([]byte(base + "a\n")),
		"key not UTF-8":            raw([]byte(base + "\xff")),
		"key too long":             raw([]byte(strings.Repeat("k", lease.MaxKeyLen+1))),
		"with spaces":              " " + raw([]byte(base+"a")),
		"with a newline":           raw([]byte(base+"a")) + "\n",
	}
	for name, c := range bad {
		page, err := b.List(ctxFor(t), base, lease.Page{After: c})
		if !errIs(err, lease.ErrInvalid) {
			t.Errorf("List with cursor %s (%q) = %d leases, err %v; want ErrInvalid", name, c, len(page.Leases), err)
		}
	}
	for name, prefix := range map[string]string{
		"NUL": "a\x00", "newline": "a\n", "invalid UTF-8": "a\xff", "too long": strings.Repeat("p", lease.MaxKeyLen+1),
	} {
		if page, err := b.List(ctxFor(t), prefix, lease.Page{}); !errIs(err, lease.ErrInvalid) {
			t.Errorf("List with prefix %s = %d leases, err %v; want ErrInvalid", name, len(page.Leases), err)
		}
	}
	// A good cursor from one prefix positions a walk under another: it is
	// a key, not a handle on a walk.
	first, err := b.List(ctxFor(t), base, lease.Page{Limit: 1})
	if err != nil || len(first.Leases) != 1 || first.Next == "" {
		t.Fatalf("List(%q, limit 1) = %+v, %v; want one lease and a Next", base, first, err)
	}
	if page, err := b.List(ctxFor(t), base+"b", lease.Page{After: first.Next}); err != nil || !slices.Equal(keysOf(page.Leases), []string{base + "b"}) {
		t.Errorf("List(%q) after %q's cursor = %+v, %v; want %q", base+"b", base+"a", page, err, base+"b")
	}
}

// listPageBoundaries walks keys with odd bytes at every page size from 1 to
// one more than there are: the pages together must be the keys in byte
// order, each once, with no empty page at the end.
func (s *suite) listPageBoundaries(t *testing.T, b lease.Backend) {
	base := key(t, "pages") + "/"
	var want []string
	for _, name := range oddNames(lease.MaxKeyLen - len(base)) {
		k := base + name
		mustAcquire(t, b, k, "owner of "+name, longTTL)
		want = append(want, k)
	}
	// Held and free keys around the prefix, which no page may show.
	mustAcquire(t, b, strings.TrimSuffix(base, "/"), "o", longTTL)
	mustAcquire(t, b, strings.TrimSuffix(base, "/")+"0", "o", longTTL)
	freed := mustAcquire(t, b, base+"aa", "o", longTTL)
	if err := b.Release(ctxFor(t), freed); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	for limit := 1; limit <= len(want)+1; limit++ {
		got, pages := walk(t, b, base, limit)
		if !slices.Equal(keysOf(got), want) {
			t.Fatalf("walk with limit %d: keys %q, want %q (byte order, each once)", limit, brief(keysOf(got)), brief(want))
		}
		if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
			t.Errorf("walk of %d keys with limit %d took %d pages, want %d: Next must be empty on the last page",
				len(want), limit, pages, wantPages)
		}
		for _, l := range got {
			if name := strings.TrimPrefix(l.Key, base); l.Owner != "owner of "+name || l.Token == 0 {
				t.Fatalf("walk with limit %d: %q has owner %q, token %d", limit, l.Key, l.Owner, l.Token)
			}
		}
	}
	// Starting after each key gives exactly the keys after it.
	for i, k := range want {
		page, err := b.List(ctxFor(t), base, lease.Page{After: lease.Cursor(k)})
		if err != nil {
			t.Fatalf("List after %q: %v", k, err)
		}
		if got := keysOf(page.Leases); !slices.Equal(got, want[i+1:]) || page.Next != "" {
			t.Fatalf("List after %q = %q, Next %q; want %q and no Next", brief([]string{k}), brief(got), page.Next, brief(want[i+1:]))
		}
	}
}

// listWalkUnderChurn walks pages while other keys come and go: before each
// page the test itself takes or frees keys before and after the cursor, and
// goroutines churn keys between the held ones while the page is read. Every
// lease held for the whole walk must be seen exactly once, and no key twice.
func (s *suite) listWalkUnderChurn(t *testing.T, b lease.Backend) {
	base := key(t, "churn") + "/"
	const held = 12
	var heldKeys []string
	for i := range held {
		k := fmt.Sprintf("%sk%03d", base, i)
		mustAcquire(t, b, k, "o", longTTL)
		heldKeys = append(heldKeys, k)
	}
	// Each churner takes and frees one key, at random among the gaps
	// between held keys, for each page: as many changes as pages, at the
	// same time as the pages are read, however fast the backend is.
	var (
		wg    sync.WaitGroup
		ticks []chan struct{}
	)
	for w := range 2 {
		tick := make(chan struct{}, 1)
		ticks = append(ticks, tick)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range tick {
				k := fmt.Sprintf("%sk%03d-r%d", base, rng.IntN(held+1)-1, w)
				l, err := b.Acquire(ctxFor(t), k, "churn", longTTL)
				if err != nil {
					t.Errorf("churn: Acquire(%q): %v", k, err)
					continue
				}
				if err := b.Release(ctxFor(t), l); err != nil {
					t.Errorf("churn: Release(%q): %v", k, err)
				}
			}
		})
	}
	defer func() {
		for _, tick := range ticks {
			close(tick)
		}
		wg.Wait()
	}()

	// toggle frees the keys the test holds between pages, or takes keys
	// beside every other held one (so before and after the cursor) when it
	// holds none: a store that counts its way to the cursor skips or
	// repeats.
	var mine []lease.Lease
	round := 0
	toggle := func() {
		if len(mine) > 0 {
			for _, l := range mine {
				if err := b.Release(ctxFor(t), l); err != nil {
					t.Fatalf("Release(%q): %v", l.Key, err)
				}
			}
			mine = mine[:0]
			return
		}
		round++
		for i := -1; i < held; i += 2 {
			mine = append(mine, mustAcquire(t, b, fmt.Sprintf("%sk%03d-t%d", base, i, round), "toggle", longTTL))
		}
	}
	for _, limit := range []int{1, 3, 8} {
		seen := map[string]int{}
		var last string
		p := lease.Page{Limit: limit}
		for pages := 0; ; pages++ {
			if pages == maxWalkPages {
				t.Fatalf("walk with limit %d still had a Next after %d pages", limit, pages)
			}
			toggle()
			for _, tick := range ticks {
				select {
				case tick <- struct{}{}:
				default: // still busy with the last one
				}
			}
			page, err := b.List(ctxFor(t), base, p)
			if err != nil {
				t.Fatalf("List(%q, %+v): %v", base, p, err)
			}
			if len(page.Leases) > limit || page.Next != "" && len(page.Leases) < limit {
				t.Fatalf("List(%q, %+v) = %d leases with Next %q", base, p, len(page.Leases), page.Next)
			}
			for _, l := range page.Leases {
				if l.Key <= last {
					t.Fatalf("walk with limit %d: %q came after %q: a page repeats or goes back", limit, l.Key, last)
				}
				last = l.Key
				seen[l.Key]++
			}
			if page.Next == "" {
				break
			}
			p.After = page.Next
		}
		for _, k := range heldKeys {
			if seen[k] != 1 {
				t.Errorf("walk with limit %d saw %q, held throughout, %d times; want once", limit, k, seen[k])
			}
		}
	}
}
