package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/poll"
)

func testPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "etcdstore-internal/" + hex.EncodeToString(b[:]) + "/"
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newTestStore(t *testing.T, cli *clientv3.Client, prefix string) *Store {
	t.Helper()
	s, err := New(cli, WithPrefix(prefix))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitForWaiters polls until key has a holder and n waiters, and returns
// the waiters' entries in queue order.
func waitForWaiters(t *testing.T, s *Store, key string, n int) []*clientv3.GetResponse {
	t.Helper()
	var resp *clientv3.GetResponse
	poll.Until(t, 10*time.Second, func() error {
		var err error
		resp, err = s.cli.Get(testCtx(t), s.entries(key), append(clientv3.WithFirstCreate()[:2], clientv3.WithPrefix())...)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != n+1 {
			return fmt.Errorf("%d queue entries for %q, want %d", len(resp.Kvs), key, n+1)
		}
		return nil
	})
	resp.Kvs = resp.Kvs[1:]
	return []*clientv3.GetResponse{resp}
}

// TestWaiterWhoseLeaseExpiresNeverHolds is the case Jepsen found in etcd
// 3.4.3's Mutex: a waiter whose own etcd lease ends while it is queued must
// not come out holding the lease once those ahead of it are gone.
func TestWaiterWhoseLeaseExpiresNeverHolds(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	const key = "jepsen"
	holder, err := s.Acquire(testCtx(t), key, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   lease.Lease
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() {
		l, err := s.AcquireWait(testCtx(t), key, "first", time.Minute)
		first <- result{l, err}
	}()
	waitForWaiters(t, s, key, 1)
	go func() {
		l, err := s.AcquireWait(testCtx(t), key, "second", time.Minute)
		second <- result{l, err}
	}()
	q := waitForWaiters(t, s, key, 2)[0]
	in0, err0 := decodeInfo(q.Kvs[0])
	in1, err1 := decodeInfo(q.Kvs[1])
	if err0 != nil || err1 != nil || in0.Owner != "first" || in1.Owner != "second" {
		t.Fatalf("queue order = %q, %q; want first, second", q.Kvs[0].Value, q.Kvs[1].Value)
	}

	// The head's and the second's etcd leases end while they wait (as if
	// their process had stalled past the TTL)... only the second's here.
	if _, err := cli.Revoke(testCtx(t), clientv3.LeaseID(q.Kvs[1].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the head waiter was not served within 10 s of the release")
	}
	if r.err != nil || r.l.Owner != "first" || r.l.Token <= holder.Token {
		t.Fatalf("head waiter got %+v, %v; want a lease for first with a token above %d", r.l, r.err, holder.Token)
	}
	if err := s.Release(testCtx(t), r.l); err != nil {
		t.Fatal(err)
	}
	select {
	case r = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter with the revoked etcd lease did not return within 10 s")
	}
	if r.err == nil {
		t.Fatalf("a waiter whose etcd lease was revoked got the lease: %+v", r.l)
	}
	if !errors.Is(r.err, lease.ErrUnavailable) {
		t.Errorf("err = %v, want one matching ErrUnavailable", r.err)
	}
	if got, err := s.Get(testCtx(t), key); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the lost waiter returned, Get = %+v, %v; want ErrNotFound", got, err)
	}
	if _, err := s.Acquire(testCtx(t), key, "next", time.Minute); err != nil {
		t.Fatalf("the key is not free after the lost waiter returned: %v", err)
	}
}

// TestHeadWaiterWhoseLeaseExpiresNeverHolds: the same for the waiter at the
// head of the queue, which watches the holder itself.
func TestHeadWaiterWhoseLeaseExpiresNeverHolds(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	const key = "jepsen-head"
	holder, err := s.Acquire(testCtx(t), key, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var got lease.Lease
	go func() {
		var err error
		got, err = s.AcquireWait(testCtx(t), key, "waiter", time.Minute)
		done <- err
	}()
	q := waitForWaiters(t, s, key, 1)[0]
	if _, err := cli.Revoke(testCtx(t), clientv3.LeaseID(q.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the waiter whose etcd lease was revoked got the lease: %+v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not return within 10 s of the release")
	}
	if l, err := s.Get(testCtx(t), key); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get = %+v, %v; want ErrNotFound", l, err)
	}
}

func TestOpenRefusesRevisionBehindHighWater(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	prefix := testPrefix()
	s := newTestStore(t, cli, prefix)
	l, err := s.Acquire(testCtx(t), "k", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(testCtx(t), s.highWaterKey())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("high-water key: %v, %v", resp, err)
	}
	hw, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil || hw <= 0 || hw > int64(l.Token) {
		t.Fatalf("high-water mark %q after issuing token %d: want within [1, %d]", resp.Kvs[0].Value, l.Token, l.Token)
	}
	// A fresh Store on the same history opens.
	newTestStore(t, cli, prefix)

	// As if the keys had been copied to a cluster whose revisions are lower
	// than the tokens issued: the mark is above the current revision.
	if _, err := cli.Put(testCtx(t), s.highWaterKey(), formatRev(resp.Header.Revision+1_000_000)); err != nil {
		t.Fatal(err)
	}
	_, err = New(cli, WithPrefix(prefix))
	if !errors.Is(err, ErrRevisionBehind) || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("New with the high-water mark above the revision: err = %v, want ErrRevisionBehind", err)
	}
	// Another prefix is not affected.
	newTestStore(t, cli, testPrefix())
}

func TestRunningStoreStopsWhenRevisionGoesBack(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	if _, err := s.Acquire(testCtx(t), "k", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	// As if the Store had seen a later revision before a restore rewound
	// the cluster.
	s.maxRev.Store(s.maxRev.Load() + 1_000_000)
	if _, err := s.Get(testCtx(t), "k"); !errors.Is(err, ErrRevisionBehind) {
		t.Fatalf("Get after the revision went back: err = %v, want ErrRevisionBehind", err)
	}
	// It stays stopped.
	if _, err := s.Acquire(testCtx(t), "other", "w", time.Minute); !errors.Is(err, ErrRevisionBehind) {
		t.Fatalf("Acquire on a stopped Store: err = %v, want ErrRevisionBehind", err)
	}
}

// TestStoppedStoreEndsItsWatches: a Store that stopped serving (here at a
// revision below one it saw) left its watches running on the rewound
// history; they must end with its error, and a new watch be refused.
func TestStoppedStoreEndsItsWatches(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	ctx := testCtx(t)
	if _, err := s.Acquire(ctx, "k", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ended, synced := make(chan error, 1), make(chan struct{})
	go func() {
		for ev, err := range s.Watch(wctx, "") {
			if err != nil {
				ended <- err
				return
			}
			if ev.Kind == lease.Synced {
				close(synced)
			}
		}
		ended <- nil
	}()
	defer func() { stop(); <-ended }()
	select {
	case <-synced:
	case <-ctx.Done():
		t.Fatal("the watch never synced")
	}
	s.maxRev.Store(s.maxRev.Load() + 1_000_000) // as in TestRunningStoreStopsWhenRevisionGoesBack
	if _, err := s.Get(ctx, "k"); !errors.Is(err, ErrRevisionBehind) {
		t.Fatalf("Get after the revision went back: err = %v, want ErrRevisionBehind", err)
	}
	select {
	case err := <-ended:
		ended <- err
		if !errors.Is(err, ErrRevisionBehind) {
			t.Fatalf("the watch ended with %v, want ErrRevisionBehind", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch of a stopped Store still runs 10 s later")
	}
	for _, err := range s.Watch(ctx, "") {
		if !errors.Is(err, ErrRevisionBehind) {
			t.Fatalf("a new Watch of a stopped Store: %v, want ErrRevisionBehind", err)
		}
		break
	}
}

func TestTokenRange(t *testing.T) {
	for _, rev := range []int64{0, -1, int64(lease.MaxToken) + 1} {
		if _, err := tokenOf(rev); err == nil {
			t.Errorf("tokenOf(%d) accepted", rev)
		}
	}
	if tok, err := tokenOf(int64(lease.MaxToken)); err != nil || tok != lease.MaxToken {
		t.Errorf("tokenOf(2^53) = %d, %v", tok, err)
	}
}

func TestEtcdTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl         time.Duration
		want, tight int64
	}{
		{lease.MinTTL, 2, 1}, {50 * time.Millisecond, 2, 1}, {time.Second, 2, 1},
		{time.Second + time.Millisecond, 3, 2}, {time.Minute, 61, 60}, {lease.MaxTTL, 86401, 86400},
	} {
		if got := etcdTTL(tc.ttl, false); got != tc.want {
			t.Errorf("etcdTTL(%v, false) = %d, want %d", tc.ttl, got, tc.want)
		}
		if got := etcdTTL(tc.ttl, true); got != tc.tight {
			t.Errorf("etcdTTL(%v, true) = %d, want %d", tc.ttl, got, tc.tight)
		}
	}
}

// TestReleaseAfterAnotherStoreRenewed: Release's one-comparison fast path
// compares the holder key's mod revision with that of this Store's last
// write; when another Store has renewed the lease meanwhile — rewriting the
// value, or moving it to etcd leases of its own and back, which revokes the
// one this Store pooled — the comparison fails, the release still succeeds
// by the generic one, and the next acquisition is not failed by the pooled
// etcd lease being gone.
func TestReleaseAfterAnotherStoreRenewed(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	prefix := testPrefix()
	a, b := newTestStore(t, cli, prefix), newTestStore(t, cli, prefix)
	for _, tc := range []struct {
		name string
		ttls []time.Duration // b's renewals
	}{
		{"rewritten", []time.Duration{9500 * time.Millisecond}},             // same etcd TTL, another value
		{"moved", []time.Duration{20 * time.Second}},                        // another etcd lease, another value
		{"moved back", []time.Duration{20 * time.Second, 10 * time.Second}}, // the same value on b's etcd lease; a's revoked
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k-" + tc.name
			l, err := a.Acquire(testCtx(t), key, "a", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, ttl := range tc.ttls {
				if _, err := b.Renew(testCtx(t), l, ttl); err != nil {
					t.Fatalf("b.Renew(%v): %v", ttl, err)
				}
			}
			if err := a.Release(testCtx(t), l); err != nil {
				t.Fatalf("a.Release after b renewed: %v", err)
			}
			if got, err := a.Get(testCtx(t), key); !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("after the release Get = %+v, %v; want ErrNotFound", got, err)
			}
			again, err := a.Acquire(testCtx(t), key, "a", 10*time.Second)
			if err != nil {
				t.Fatalf("a.Acquire after the release: %v", err)
			}
			if err := a.Release(testCtx(t), again); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAcquireWithPooledLeaseGone: a pooled etcd lease that etcd no longer
// has makes etcd refuse the acquisition's Txn before applying it; Acquire
// then tries once more on a new etcd lease instead of failing.
func TestAcquireWithPooledLeaseGone(t *testing.T) {
	s, cli, el := storeWithOnePooled(t)
	if _, err := cli.Revoke(testCtx(t), el.id); err != nil {
		t.Fatal(err)
	}
	var l lease.Lease
	var err error
	for _, op := range []string{"Acquire", "AcquireWait"} {
		if op == "AcquireWait" {
			// Pool a lease again and revoke it.
			if err := s.Release(testCtx(t), l); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			pooled := s.pool[etcdTTL(10*time.Second, false)]
			s.mu.Unlock()
			if _, err := cli.Revoke(testCtx(t), pooled[len(pooled)-1].id); err != nil {
				t.Fatal(err)
			}
			l, err = s.AcquireWait(testCtx(t), "k", "o", 10*time.Second)
		} else {
			l, err = s.Acquire(testCtx(t), "k", "o", 10*time.Second)
		}
		if err != nil {
			t.Fatalf("%s with the pooled etcd lease revoked: %v", op, err)
		}
	}
}

// storeWithOnePooled returns a Store on a fresh etcd, its client, and the
// one etcd lease for a 10 s TTL that an acquire+release of "k" left in its
// pool.
func storeWithOnePooled(t *testing.T) (*Store, *clientv3.Client, *etcdLease) {
	t.Helper()
	cli := etcdtest.NewClient(t, etcdtest.Start(t))
	s := newTestStore(t, cli, testPrefix())
	l, err := s.Acquire(testCtx(t), "k", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(testCtx(t), l); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pooled := s.pool[etcdTTL(10*time.Second, false)]
	if len(pooled) != 1 {
		t.Fatalf("%d pooled etcd leases after a release, want 1", len(pooled))
	}
	return s, cli, pooled[0]
}

// TestHandOffWritesNothingMore: a waiter holds from the release's
// revision on, with the token its entry got when it queued — below the
// release's revision. (Before entries, the waiter created the holder key
// after the release: a second write, and a token above it.)
func TestHandOffWritesNothingMore(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	const key = "handoff"
	holder, err := s.Acquire(testCtx(t), key, "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lease.Lease, 1)
	go func() {
		l, err := s.AcquireWait(testCtx(t), key, "next", time.Minute)
		if err != nil {
			t.Errorf("AcquireWait: %v", err)
		}
		got <- l
	}()
	q := waitForWaiters(t, s, key, 1)[0]
	if err := s.Release(testCtx(t), holder); err != nil {
		t.Fatal(err)
	}
	next := <-got
	mark, err := cli.Get(testCtx(t), s.path(kindReleased, key))
	if err != nil || len(mark.Kvs) != 1 {
		t.Fatalf("release mark: %v, %v", mark, err)
	}
	released := mark.Kvs[0].ModRevision
	if int64(next.Token) != q.Kvs[0].CreateRevision || int64(next.Token) >= released || next.Token <= holder.Token {
		t.Fatalf("next holder's token %d; want its entry's create revision %d, above %d and below the release at %d", next.Token, q.Kvs[0].CreateRevision, holder.Token, released)
	}
	if l, err := s.Get(testCtx(t), key); err != nil || l.Token != next.Token || l.Owner != "next" {
		t.Fatalf("Get = %+v, %v; want next's lease", l, err)
	}
	if err := s.Release(testCtx(t), next); err != nil {
		t.Fatal(err)
	}
}

// TestListWithQueues: a list page shows each key once, with its holder,
// however many waiters the keys have and wherever a read of entries ends.
func TestListWithQueues(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	ctx := testCtx(t)
	holders := map[string]lease.Lease{}
	for _, k := range []string{"q/a", "q/b", "q/c", "q/d"} {
		l, err := s.Acquire(ctx, k, "holder-"+k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		holders[k] = l
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, k := range []string{"q/b", "q/c"} {
		n := map[string]int{"q/b": 5, "q/c": 1}[k]
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = s.AcquireWait(wctx, k, "waiter", time.Minute)
			}()
			waitForWaiters(t, s, k, i+1)
		}
	}
	for limit := 1; limit <= 5; limit++ {
		var seen []string
		var p lease.Page
		for {
			page, err := s.List(ctx, "q/", lease.Page{Limit: limit, After: p.After})
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			for _, l := range page.Leases {
				want := holders[l.Key]
				if l.Token != want.Token || l.Owner != want.Owner {
					t.Fatalf("limit %d: listed %q token %d owner %q; want the holder's, token %d owner %q", limit, l.Key, l.Token, l.Owner, want.Token, want.Owner)
				}
				seen = append(seen, l.Key)
			}
			if page.Next == "" {
				break
			}
			p.After = page.Next
		}
		if strings.Join(seen, ",") != "q/a,q/b,q/c,q/d" {
			t.Fatalf("limit %d: listed %v, want each of q/a..q/d once, in order", limit, seen)
		}
	}
}

// TestNewRefusesTheOldLayout: a prefix with a holder key of the layout
// before entries is refused, not served as if its leases were free.
func TestNewRefusesTheOldLayout(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	prefix := testPrefix()
	if _, err := cli.Put(testCtx(t), prefix+"h\x00job", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cli, WithPrefix(prefix)); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "earlier etcdstore layout") {
		t.Fatalf("New on a prefix of the old layout: %v; want a refusal naming it", err)
	}
}

// TestBusyKeyReusesEntryNames: a key acquired and released over and over
// through one Store reuses its entries' names (its pooled etcd leases'),
// so etcd's index does not gain a deleted key per hand-off until the next
// compaction.
func TestBusyKeyReusesEntryNames(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	const key = "busy"
	start, err := cli.Get(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		l, err := s.Acquire(testCtx(t), key, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(testCtx(t), l); err != nil {
			t.Fatal(err)
		}
	}
	// Every version of every entry since the start, deleted ones included.
	names := map[string]bool{}
	end, err := cli.Get(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	for wr := range cli.Watch(wctx, s.entries(key), clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1)) {
		for _, ev := range wr.Events {
			names[string(ev.Kv.Key)] = true
			if ev.Kv.ModRevision >= end.Header.Revision {
				cancel()
			}
		}
	}
	if len(names) > 2 {
		t.Fatalf("50 acquisitions of one key created %d entry names; want them reused (at most 2)", len(names))
	}
}

// TestMovedEntryKeepsItsName: a waiter's entry (named by its etcd lease)
// that comes to hold and is moved to another etcd lease by a Renew with
// another TTL keeps its name; the etcd lease that names it is not pooled
// again, so a waiter of the same Store queued after it gets a name of its
// own and does not overwrite the holder's entry.
func TestMovedEntryKeepsItsName(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	const key = "moved"
	first, err := s.Acquire(testCtx(t), key, "first", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan lease.Lease, 1)
	go func() {
		l, err := s.AcquireWait(testCtx(t), key, "holder", time.Second)
		if err != nil {
			t.Errorf("AcquireWait: %v", err)
		}
		held <- l
	}()
	waitForWaiters(t, s, key, 1)
	if err := s.Release(testCtx(t), first); err != nil {
		t.Fatal(err)
	}
	l := <-held
	if l, err = s.Renew(testCtx(t), l, 5*time.Second); err != nil { // another etcd TTL: a move
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := s.AcquireWait(testCtx(t), key, "waiter", time.Second)
		if err == nil {
			err = s.Release(testCtx(t), w)
		}
		got <- err
	}()
	waitForWaiters(t, s, key, 1)
	if l, err = s.Renew(testCtx(t), l, 5*time.Second); err != nil {
		t.Fatalf("the holder's Renew after a waiter of the same Store queued: %v", err)
	}
	if cur, err := s.Get(testCtx(t), key); err != nil || cur.Owner != "holder" || cur.Token != l.Token {
		t.Fatalf("Get = %+v, %v; want the holder's lease", cur, err)
	}
	if err := s.Release(testCtx(t), l); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

// TestWaitingAcquireHoldsEtcdsOwnTTL: an election's term (AcquireWait, at
// once or after a wait) is on an etcd lease of ceil(TTL), as etcd's own
// Session of the TTL, so that a crashed leader's successor is not kept
// waiting a second longer than etcd makes it; a try (Acquire) keeps the
// pool's extra second. And the waiter, keeping its etcd lease alive at a
// third of it, still holds a lease that lasts the TTL from its call.
func TestWaitingAcquireHoldsEtcdsOwnTTL(t *testing.T) {
	cli := etcdtest.NewClient(t, etcdtest.Start(t))
	s := newTestStore(t, cli, testPrefix())
	ctx := testCtx(t)
	grantedTTL := func(l lease.Lease) int64 {
		t.Helper()
		s.mu.Lock()
		el := s.held[l.ID]
		s.mu.Unlock()
		if el == nil {
			t.Fatalf("no etcd lease recorded for %s", l.Key)
		}
		resp, err := cli.TimeToLive(ctx, el.id)
		if err != nil {
			t.Fatal(err)
		}
		return resp.GrantedTTL
	}
	const ttl = 2 * time.Second
	free, err := s.AcquireWait(ctx, "free", "leader", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if got := grantedTTL(free); got != 2 {
		t.Errorf("AcquireWait of a free key: etcd lease of %d s for a TTL of %v, want 2 (etcd's own)", got, ttl)
	}
	tried, err := s.Acquire(ctx, "try", "o", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if got := grantedTTL(tried); got != 3 {
		t.Errorf("Acquire: etcd lease of %d s for a TTL of %v, want 3 (the pool's second)", got, ttl)
	}
	leader, err := s.Acquire(ctx, "term", "leader", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	called := time.Now()
	next := make(chan lease.Lease, 1)
	go func() {
		l, err := s.AcquireWait(ctx, "term", "next", ttl)
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitForWaiters(t, s, "term", 1)
	// real time: past the waiter's etcd TTL, which the real etcd server
	// counts: only its keep-alives keep its place.
	time.Sleep(3 * time.Second)
	if err := s.Release(ctx, leader); err != nil {
		t.Fatal(err)
	}
	l := <-next
	if l.Token == 0 {
		t.FailNow()
	}
	if got := grantedTTL(l); got != 2 {
		t.Errorf("AcquireWait after a wait: etcd lease of %d s for a TTL of %v, want 2", got, ttl)
	}
	if l.Expires.Before(called.Add(ttl)) {
		t.Errorf("the waiter's lease expires %v after its call, before the TTL %v", l.Expires.Sub(called), ttl)
	}
}
