package redisstore_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// TestKeysBinarySafe acquires keys full of SCAN glob characters, braces (the
// Cluster hash tag), the store's escape character and its escapes, quotes,
// unicode and the maximum length, and checks that each is kept intact and
// that List with each as a prefix returns exactly the keys starting with it.
func TestKeysBinarySafe(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv)
	keys := []string{
		"p/a", "p/ab", "p/a*", "p/a*b", "p/a?", "p/a[b]", "p/a[", "p/a]", `p/a\`, `p/a\*`,
		"p/{", "p/}", "p/{x}", "p/}{", "p/a}b", "p/a%7Db", "p/a%", "p/%25", "p/%7D",
		`p/"q"`, "p/'q'", "p/ünï/日本/🔒",
	}
	keys = append(keys, "p/"+strings.Repeat("}", lease.MaxKeyLen-2))
	ctx := ctxFor(t)
	held := map[string]lease.Lease{}
	for _, k := range keys {
		l, err := s.Acquire(ctx, k, owner(k), time.Minute)
		if err != nil {
			t.Fatalf("Acquire(%q): %v", k, err)
		}
		if l.Token != 1 {
			t.Errorf("Acquire(%q): token %d, want 1 on a fresh key (escapes collide?)", k, l.Token)
		}
		held[k] = l
	}
	for _, k := range keys {
		got, err := s.Get(ctx, k)
		if err != nil || got.Key != k || got.Owner != owner(k) || got.Token != held[k].Token {
			t.Errorf("Get(%q) = %+v, %v", k, got, err)
		}
	}
	prefixes := append([]string{"", "p/", "p/a", "q"}, keys...)
	for _, p := range prefixes {
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		list, err := s.List(ctx, p, lease.Page{})
		if err != nil {
			t.Fatalf("List(%q): %v", p, err)
		}
		var got []string
		for _, l := range list.Leases {
			got = append(got, l.Key)
			if l.Token != held[l.Key].Token || l.Owner != owner(l.Key) || !l.ID.IsZero() {
				t.Errorf("List(%q) entry %+v, want the lease on %q without its ID", p, l, l.Key)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", shorten(p), shortenAll(got), shortenAll(want))
		}
	}
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:20] + "…(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return s
}

func shortenAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = shorten(s)
	}
	return out
}

// TestNamespacesAreSeparate checks that two stores on one server with
// different namespaces neither see nor block each other's keys.
func TestNamespacesAreSeparate(t *testing.T) {
	srv := redistest.Start(t)
	ns := testNamespace()
	a := open(t, srv, redisstore.WithNamespace(ns+"a"))
	b := open(t, srv, redisstore.WithNamespace(ns+"b"))
	ctx := ctxFor(t)
	if _, err := a.Acquire(ctx, "k", "in-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "k", "in-b", time.Minute); err != nil {
		t.Fatalf("namespace b blocked by a: %v", err)
	}
	if list, err := b.List(ctx, "", lease.Page{}); err != nil || len(list.Leases) != 1 || list.Leases[0].Owner != "in-b" {
		t.Fatalf("List in b = %+v, %v; want only b's lease", list, err)
	}
}

// TestHeldAcquireWritesNothing checks the trap from ANCHORS: an Acquire that
// finds the key held must not write (each write costs an fsync with
// appendfsync always). The server's count of changes since the last save
// must not move across many failed tries.
func TestHeldAcquireWritesNothing(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "a server no one else writes to")
	s := open(t, srv)
	c := srv.Client(t)
	ctx := ctxFor(t)
	const k = "contended"
	held, err := s.Acquire(ctx, k, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dirty := func() int64 {
		t.Helper()
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "rdb_changes_since_last_save:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("no rdb_changes_since_last_save in INFO persistence:\n%s", info)
		return 0
	}
	before := dirty()
	for range 50 {
		_, err := s.Acquire(ctx, k, "loser", time.Minute)
		var he *lease.HeldError
		if !errors.As(err, &he) || he.Token != held.Token || he.Owner != "holder" {
			t.Fatalf("Acquire of a held key: err = %v, want a HeldError naming the holder", err)
		}
	}
	if after := dirty(); after != before {
		t.Fatalf("50 failed acquires made %d writes, want 0", after-before)
	}
	// The counter proves it too: the next grant is the next token.
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	next, err := s.Acquire(ctx, k, "next", time.Minute)
	if err != nil || next.Token != held.Token+1 {
		t.Fatalf("next grant %+v, %v; want token %d", next, err, held.Token+1)
	}
}

// TestExpiresFromServerClock checks that Expires is the server's TIME plus
// the TTL, not the client's clock: it must agree with the server's own TIME
// read right after.
func TestExpiresFromServerClock(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv)
	c := srv.Client(t)
	ctx := ctxFor(t)
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "clock", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if l.Expires.Before(before.Add(time.Minute)) || l.Expires.After(after.Add(time.Minute)) {
		t.Fatalf("Expires %v outside server TIME + TTL [%v, %v]", l.Expires, before.Add(time.Minute), after.Add(time.Minute))
	}
	_, err = s.Acquire(ctx, "clock", "other", time.Minute)
	var he *lease.HeldError
	if !errors.As(err, &he) || he.Expires.Sub(l.Expires).Abs() > time.Millisecond {
		t.Fatalf("HeldError %+v: Expires should be the holder's %v (±1 ms)", err, l.Expires)
	}
}

// owner derives a valid owner name from a test key.
func owner(k string) string { return shorten("o-" + k) }
