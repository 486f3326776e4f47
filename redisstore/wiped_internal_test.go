package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasetest"
)

// eachLayout runs f on a single server and on a cluster-mode server, whose
// Stores go through a ClusterClient (one token floor per hash slot). open
// makes a Store on namespace ns through a client of its own; admin talks to
// the server (the cluster's one node) directly, as an operator's redis-cli.
func eachLayout(t *testing.T, f func(t *testing.T, ctx context.Context, open func(ns string) *Store, admin *redis.Client)) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			t.Cleanup(cancel)
			var srv *redistest.Server
			if cluster {
				srv = redistest.Start(t, redistest.Cluster())
			} else {
				srv = redistest.Start(t)
			}
			open := func(ns string) *Store {
				t.Helper()
				var client redis.UniversalClient
				if cluster {
					client = srv.ClusterClient(t)
				} else {
					client = srv.Client(t)
				}
				s, err := New(client, WithNamespace(ns))
				if err != nil {
					t.Fatalf("New on namespace %s: %v", ns, err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			f(t, ctx, open, srv.Client(t))
		})
	}
}

func newNamespace() string { return "t-" + lease.NewID().Reveal()[:12] }

// deleteNamespace deletes every key of namespace ns, as an operator
// cleaning up with SCAN and UNLINK would.
func deleteNamespace(t *testing.T, ctx context.Context, admin *redis.Client, ns string) {
	t.Helper()
	var names []string
	iter := admin.Scan(ctx, 0, ns+":*", 1000).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("namespace %s has no keys to delete", ns)
	}
	if _, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, n := range names {
			p.Unlink(ctx, n) // one key a command: on Cluster they span slots
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// wipes are the ways a namespace's data vanishes under a running Store.
var wipes = []struct {
	name string
	wipe func(t *testing.T, ctx context.Context, admin *redis.Client, ns string)
}{
	{"FLUSHALL", func(t *testing.T, ctx context.Context, admin *redis.Client, _ string) {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}},
	{"FLUSHDB", func(t *testing.T, ctx context.Context, admin *redis.Client, _ string) {
		if err := admin.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}},
	{"namespace deleted", deleteNamespace},
}

// refusesWiped fails t unless err is the refusal of a Store whose namespace
// was wiped under it: ErrUnavailable, saying so.
func refusesWiped(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "wiped") {
		t.Fatalf("%s after the namespace was wiped under the Store: %v; want ErrUnavailable saying it was wiped", what, err)
	}
}

// TestWipedUnderARunningStore: the namespace's keys wiped while a Store
// serves it (FLUSHALL, FLUSHDB, an operator's deletion) take every key's
// token counter with them. The Store must not go on granting from 1 again:
// a key it granted at token 3 is refused with ErrUnavailable, saying why,
// and so is every later operation, even once another Store has made the
// namespace anew (I1). A Store made now serves the new, empty data under a
// new store id.
func TestWipedUnderARunningStore(t *testing.T) {
	for _, w := range wipes {
		t.Run(w.name, func(t *testing.T) {
			eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
				ns := newNamespace()
				s := open(ns)
				issued := leasetest.Highest(leasetest.Grants(t, ctx, s, "k", 3, true))
				held := leasetest.Grants(t, ctx, s, "held", 1, false)[0]
				w.wipe(t, ctx, admin, ns)

				for _, k := range []string{"k", "k", "never-seen"} {
					l, err := s.Acquire(ctx, k, "w", time.Minute)
					if err == nil {
						t.Fatalf("Acquire(%q) after the namespace was wiped: granted at token %d; the store had issued up to %d", k, l.Token, issued)
					}
					refusesWiped(t, "Acquire("+k+")", err)
				}
				_, err := s.Renew(ctx, held, time.Minute)
				refusesWiped(t, "Renew", err)
				refusesWiped(t, "Release", s.Release(ctx, held))
				_, err = s.Get(ctx, "k")
				refusesWiped(t, "Get", err)

				fresh := open(ns)
				if fresh.StoreID() == s.StoreID() {
					t.Fatalf("a Store opened on the wiped namespace has the old StoreID %q", s.StoreID())
				}
				if l := leasetest.Grants(t, ctx, fresh, "k", 1, true)[0]; l.Token != 1 {
					t.Fatalf("a Store opened on the wiped namespace granted token %d, want 1 (the new data's first)", l.Token)
				}
				// The namespace is whole again, under another id: the
				// old Store still refuses.
				_, err = s.Acquire(ctx, "k", "w", time.Minute)
				refusesWiped(t, "Acquire once the namespace was made anew", err)
			})
		})
	}
}

// TestWipedAndMadeAnewUnderARunningStore: a namespace wiped and made anew
// by another Store (New sets a new store id) before the running Store's
// next grant: that grant finds a namespace whole again, token floor and
// all, but not the one it served, and must be refused (I1), not granted
// at 1. Also when the new Store has granted the key first, so that its
// counter is there, at 1, and the running Store's grant would come out at
// 2, below the 3 it had issued: a check of the store id made only when a
// key's counter is new missed that one.
func TestWipedAndMadeAnewUnderARunningStore(t *testing.T) {
	for _, usedFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("granted anew first=%t", usedFirst), func(t *testing.T) {
			eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
				ns := newNamespace()
				s := open(ns)
				issued := leasetest.Highest(leasetest.Grants(t, ctx, s, "k", 3, true))
				if err := admin.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				fresh := open(ns)
				var next lease.Token = 1 // the new Store's next token for k
				if usedFirst {
					if l := leasetest.Grants(t, ctx, fresh, "k", 1, true)[0]; l.Token != next {
						t.Fatalf("the new Store granted token %d, want %d", l.Token, next)
					}
					next++
				}
				l, err := s.Acquire(ctx, "k", "w", time.Minute)
				if err == nil {
					t.Fatalf("Acquire after the namespace was wiped and made anew: granted at token %d; the store had issued up to %d", l.Token, issued)
				}
				refusesWiped(t, "Acquire", err)
				if l := leasetest.Grants(t, ctx, fresh, "k", 1, true)[0]; l.Token != next {
					t.Fatalf("the new Store granted token %d, want %d (the refusal wrote nothing)", l.Token, next)
				}
			})
		})
	}
}

// copies returns the hash slots' copies of the store id that exist in s's
// namespace, by name.
func copies(t *testing.T, ctx context.Context, s *Store) map[string]string {
	t.Helper()
	var names []string
	if err := s.scan(ctx, s.ns+":{*}"+storeIDSuffix, func(n string) { names = append(names, n) }); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range names {
		v, err := s.rdb.Get(ctx, n).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", n, err)
		}
		out[n] = v
	}
	return out
}

// TestStoreIDCopies: New writes nothing but the store id; on Cluster the
// first grant in a hash slot writes the slot's copy of it, which the
// grants there check. A namespace without copies (an older version's, or
// copies deleted) keeps serving, its tokens rising: the store id key
// vouches for it.
func TestStoreIDCopies(t *testing.T) {
	eachLayout(t, func(t *testing.T, ctx context.Context, open func(string) *Store, admin *redis.Client) {
		ns := newNamespace()
		s := open(ns)
		if n, err := admin.Keys(ctx, ns+":*").Result(); err != nil || len(n) != 1 {
			t.Fatalf("keys of a namespace New made: %q, %v; want the store id alone", n, err)
		}
		keys := []string{"a", "b", "c"}
		for _, k := range keys {
			leasetest.Grants(t, ctx, s, k, 3, true)
		}
		got := copies(t, ctx, s)
		want := map[string]string{}
		if s.cluster {
			for _, k := range keys {
				want[s.acquireKeys(k)[3]] = s.id
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the slots' copies of the store id after grants of %q: %q; want %q", keys, got, want)
		}

		for n := range got {
			if err := admin.Del(ctx, n).Err(); err != nil {
				t.Fatal(err)
			}
		}
		later := open(ns)
		for i, st := range []*Store{s, later} {
			for _, k := range keys {
				if l := leasetest.Grants(t, ctx, st, k, 1, true)[0]; l.Token != lease.Token(4+i) {
					t.Fatalf("%q after the copies were deleted, Store %d: token %d, want %d", k, i, l.Token, 4+i)
				}
			}
			if l := leasetest.Grants(t, ctx, st, "new", 1, true)[0]; l.Token != lease.Token(1+i) {
				t.Fatalf("a new key after the copies were deleted, Store %d: token %d, want %d", i, l.Token, 1+i)
			}
		}
		want = map[string]string{}
		if s.cluster {
			for _, k := range append(keys, "new") {
				want[s.acquireKeys(k)[3]] = s.id // every grant checks its slot's copy, and mends it
			}
		}
		if got := copies(t, ctx, s); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the slots' copies of the store id after they were deleted and keys granted again: %q; want %q", got, want)
		}
	})
}

// TestWipedWhileTheCopyIsMade: on Cluster, a namespace wiped between the
// Store's finding its store id key whole and its writing a hash slot's copy
// must not leave that copy vouching for the wiped slot: the Store reads the
// store id key again after the write and refuses. Were the copy trusted, a
// key of that slot granted at token 3 before the wipe would be granted at
// 1 after it (I1).
func TestWipedWhileTheCopyIsMade(t *testing.T) {
	srv := redistest.Start(t, redistest.Cluster())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := New(srv.ClusterClient(t), WithNamespace(newNamespace()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin := srv.Client(t)
	// Two keys in one hash slot.
	const a = "a"
	slot := keySlot(s.leaseKey(a))
	b := ""
	for i := 0; b == ""; i++ {
		if k := fmt.Sprintf("b%d", i); keySlot(s.leaseKey(k)) == slot {
			b = k
		}
	}
	issued := leasetest.Highest(leasetest.Grants(t, ctx, s, a, 3, true))
	// The slot without its copy, as an older version left it.
	if err := admin.Del(ctx, s.acquireKeys(a)[3]).Err(); err != nil {
		t.Fatal(err)
	}
	s.beforeCopy = func() {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			t.Error(err)
		}
	}
	l, err := s.Acquire(ctx, b, "w", time.Minute)
	if err == nil {
		t.Logf("%q, the first key of its slot, granted at token %d as the namespace was wiped", b, l.Token)
	}
	s.beforeCopy = nil
	if l, err := s.Acquire(ctx, a, "w", time.Minute); err == nil {
		t.Fatalf("%q, of the same slot, granted at token %d after the namespace was wiped; the store had issued up to %d", a, l.Token, issued)
	}
	refusesWiped(t, "Acquire("+b+") as the namespace was wiped", err)
}
