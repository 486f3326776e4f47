package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// gate holds a Store's first Txn in flight until the test opens it, so
// that the operations started meanwhile queue up behind it, and records
// every batch's lease keys.
type gate struct {
	b       *batcher
	once    sync.Once
	started chan struct{} // closed when the first Txn is about to be sent
	open    chan struct{} // closed by the test to let it go

	mu      sync.Mutex
	batches [][]string
	onBatch func(keys []string) // called for each batch after the first, before it is sent
}

func newGate(s *Store) *gate {
	g := &gate{b: s.batch, started: make(chan struct{}), open: make(chan struct{})}
	s.batch.beforeSend = func(batch []*txnReq) {
		keys := make([]string, len(batch))
		for i, r := range batch {
			keys[i] = r.key
		}
		g.mu.Lock()
		g.batches = append(g.batches, keys)
		first := len(g.batches) == 1
		on := g.onBatch
		g.mu.Unlock()
		if first {
			g.once.Do(func() { close(g.started) })
			<-g.open
		} else if on != nil {
			on(keys)
		}
	}
	return g
}

// waitQueued waits until n operations are queued behind the held Txn.
func (g *gate) waitQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.b.mu.Lock()
		got := len(g.b.queue)
		g.b.mu.Unlock()
		if got == n {
			return
		}
		if got > n || time.Now().After(deadline) {
			t.Fatalf("%d operations queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *gate) recorded() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

type acquired struct {
	l   lease.Lease
	err error
}

// TestBatchSharesTxn: acquisitions and releases on distinct keys, started
// while a Txn is in flight, go out together in one Txn, and each gets what
// it would have got alone — a new lease, a HeldError naming the holder, a
// release. A release with a forged ID (a lease this Store did not grant) is
// refused by its read of the holder's entry, without a Txn.
func TestBatchSharesTxn(t *testing.T) {
	eps := etcdtest.Start(t)
	s := newTestStore(t, etcdtest.NewClient(t, eps), testPrefix())
	// Before the gate: two held keys, one to find held, one to release.
	held, err := s.Acquire(testCtx(t), "held", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	toRelease, err := s.Acquire(testCtx(t), "to-release", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Acquire(testCtx(t), "other", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	forged := other
	forged.ID = lease.NewID()

	g := newGate(s)
	txns0 := s.batch.txns.Load()
	first := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(testCtx(t), "first", "w", time.Minute)
		first <- acquired{l, err}
	}()
	<-g.started

	const free = 28
	results := make([]chan acquired, free)
	var errs [3]chan error
	for i := range errs {
		errs[i] = make(chan error, 1)
	}
	for i := range free {
		results[i] = make(chan acquired, 1)
		go func() {
			l, err := s.Acquire(testCtx(t), fmt.Sprintf("k%d", i), fmt.Sprintf("w%d", i), time.Minute)
			results[i] <- acquired{l, err}
		}()
	}
	go func() { _, err := s.Acquire(testCtx(t), "held", "other", time.Minute); errs[0] <- err }()
	go func() { errs[1] <- s.Release(testCtx(t), toRelease) }()
	go func() { errs[2] <- s.Release(testCtx(t), forged) }()
	g.waitQueued(t, free+2)
	if err := <-errs[2]; !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Release with a forged ID while a Txn is in flight: %v, want ErrNotHeld", err)
	}
	close(g.open)

	f := <-first
	if f.err != nil {
		t.Fatalf("first Acquire: %v", f.err)
	}
	var tok lease.Token
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("Acquire k%d: %v", i, r.err)
		}
		if r.l.Key != fmt.Sprintf("k%d", i) || r.l.Owner != fmt.Sprintf("w%d", i) {
			t.Errorf("Acquire k%d returned %+v", i, r.l)
		}
		// One Txn, one revision: the same token for every key, above
		// every token issued before it.
		if i == 0 {
			tok = r.l.Token
		}
		if r.l.Token != tok || tok <= f.l.Token {
			t.Errorf("k%d: token %d; want the batch's one token %d, above the previous Txn's %d", i, r.l.Token, tok, f.l.Token)
		}
		got, err := s.Get(testCtx(t), r.l.Key)
		if err != nil || got.Owner != r.l.Owner || got.Token != r.l.Token {
			t.Errorf("Get(%q) = %+v, %v; want owner %s token %d", r.l.Key, got, err, r.l.Owner, r.l.Token)
		}
	}
	var he *lease.HeldError
	if err := <-errs[0]; !errors.As(err, &he) || he.Owner != "holder" || he.Token != held.Token {
		t.Errorf("Acquire of a held key in a batch: %v; want a HeldError naming holder, token %d", err, held.Token)
	}
	if err := <-errs[1]; err != nil {
		t.Errorf("Release in a batch: %v", err)
	}
	if _, err := s.Get(testCtx(t), "to-release"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("after its release in a batch, Get(to-release) err = %v, want ErrNotFound", err)
	}
	for _, l := range []lease.Lease{held, other} {
		if got, err := s.Get(testCtx(t), l.Key); err != nil || got.Token != l.Token {
			t.Errorf("held key %q was disturbed: %+v, %v", l.Key, got, err)
		}
	}

	if n := s.batch.txns.Load() - txns0; n != 2 {
		t.Errorf("%d Txns for %d operations started while one was in flight, want 2 (the first, then one batch): batches %v", n, free+3, g.recorded())
	}
}

// TestBatchSameKeyNeverShares: an operation on a key that already has one
// queued is not batched with it (one Txn's comparisons all see the state
// before it) nor held behind it: it goes out at once, alone, as it would
// without batching.
func TestBatchSameKeyNeverShares(t *testing.T) {
	eps := etcdtest.Start(t)
	s := newTestStore(t, etcdtest.NewClient(t, eps), testPrefix())
	l, err := s.Acquire(testCtx(t), "same", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(s)
	first := make(chan error, 1)
	go func() { _, err := s.Acquire(testCtx(t), "other", "x", time.Minute); first <- err }()
	<-g.started

	release := make(chan error, 1)
	go func() { release <- s.Release(testCtx(t), l) }()
	g.waitQueued(t, 1)
	// Another operation on the key while its release is queued: sent now,
	// before the release, so it finds a's lease.
	_, err = s.Acquire(testCtx(t), "same", "b", time.Minute)
	var he *lease.HeldError
	if !errors.As(err, &he) || he.Owner != "a" || he.Token != l.Token {
		t.Fatalf("acquisition while the key's release is queued: %v; want a HeldError naming a", err)
	}
	d := make(chan error, 1)
	go func() { _, err := s.Acquire(testCtx(t), "d", "d", time.Minute); d <- err }()
	g.waitQueued(t, 2)
	close(g.open)
	for _, ch := range []chan error{first, release, d} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Acquire(testCtx(t), "same", "c", time.Minute)
	if err != nil || c.Token <= l.Token {
		t.Fatalf("acquisition after the release: %+v, %v", c, err)
	}

	batches := g.recorded()
	want := [][]string{{"other"}, {"same"}, {"same", "d"}, {"same"}}
	if !slices.EqualFunc(batches, want, slices.Equal[[]string]) {
		t.Errorf("batches %v, want %v", batches, want)
	}
	for _, keys := range batches {
		for i, k := range keys {
			if slices.Contains(keys[i+1:], k) {
				t.Errorf("a batch holds two operations on %q: %v", k, keys)
			}
		}
	}
}

// TestBatchFailureFailsAll: a batch's Txn that fails fails every operation
// in it with an error matching ErrUnavailable that says the outcome is
// unknown.
func TestBatchFailureFailsAll(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	held, err := s.Acquire(testCtx(t), "held", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(s)
	// The connection breaks as the batch is sent.
	g.onBatch = func([]string) { _ = cli.Close() }
	first := make(chan error, 1)
	go func() { _, err := s.Acquire(testCtx(t), "first", "w", time.Minute); first <- err }()
	<-g.started
	const n = 5
	errs := make(chan error, n+1)
	for i := range n {
		go func() { _, err := s.Acquire(testCtx(t), fmt.Sprintf("k%d", i), "w", time.Minute); errs <- err }()
	}
	go func() { errs <- s.Release(testCtx(t), held) }()
	g.waitQueued(t, n+1)
	close(g.open)
	if err := <-first; err != nil {
		t.Fatalf("the Txn before the failure: %v", err)
	}
	for range n + 1 {
		err := <-errs
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("operation of the failed batch: err = %v, want ErrUnavailable", err)
		} else if !strings.Contains(err.Error(), "unknown") {
			t.Errorf("operation of the failed batch: %q does not say the outcome is unknown", err)
		}
	}
	if b := g.recorded(); len(b) != 2 || len(b[1]) != n+1 {
		t.Errorf("batches %v, want the first Txn and one batch of %d", b, n+1)
	}
}

// TestBatchRefusedIsSentAlone: a batch etcd refuses before applying it
// (here an etcd lease that does not exist, in one operation) is sent
// again one operation at a time: only the operation at fault fails.
func TestBatchRefusedIsSentAlone(t *testing.T) {
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	g := newGate(s)
	put := func(key string, opts ...clientv3.OpOption) *txnReq {
		k := s.path(kindEntry, key)
		return &txnReq{key: key, cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			then: []clientv3.Op{clientv3.OpPut(k, "v", opts...)}}
	}
	type result struct {
		resp *clientv3.TxnResponse
		err  error
	}
	first := make(chan result, 1)
	go func() { r, err := s.txn(testCtx(t), put("first")); first <- result{r, err} }()
	<-g.started
	const bogus = clientv3.LeaseID(0x7fff_0000_0000_0001) // never granted
	keys := []string{"a", "bogus", "c"}
	results := make([]chan result, len(keys))
	for i, k := range keys {
		results[i] = make(chan result, 1)
		var opts []clientv3.OpOption
		if k == "bogus" {
			opts = append(opts, clientv3.WithLease(bogus))
		}
		go func() { r, err := s.txn(testCtx(t), put(k, opts...)); results[i] <- result{r, err} }()
		g.waitQueued(t, i+1)
	}
	txns0 := s.batch.txns.Load()
	close(g.open)
	if r := <-first; r.err != nil || !r.resp.Succeeded {
		t.Fatalf("first: %+v, %v", r.resp, r.err)
	}
	for i, k := range keys {
		r := <-results[i]
		if k == "bogus" {
			if !errors.Is(r.err, rpctypes.ErrLeaseNotFound) {
				t.Errorf("put with a lease that does not exist: %v, want etcd's lease-not-found", r.err)
			}
			continue
		}
		if r.err != nil || !r.resp.Succeeded {
			t.Errorf("put %q, batched with one etcd refused: %+v, %v; want it done", k, r.resp, r.err)
		}
		if got, err := cli.Get(testCtx(t), s.path(kindEntry, k)); err != nil || len(got.Kvs) != 1 {
			t.Errorf("key %q after the resend: %v, %v", k, got, err)
		}
	}
	// The first Txn, the refused batch, then one Txn per operation.
	if n := s.batch.txns.Load() - txns0; n != 1+1+int64(len(keys)) {
		t.Errorf("%d Txns, want %d (first, the refused batch, %d alone)", n, 2+len(keys), len(keys))
	}
}

// TestBatchTooManyOpsShrinks: a batch above etcd's --max-txn-ops (128 on
// the embedded server etcdtest starts) is sent again one operation at a
// time and later batches are smaller.
func TestBatchTooManyOpsShrinks(t *testing.T) {
	c := etcdtest.StartCluster(t, 1) // a server of known configuration
	s := newTestStore(t, c.Client(t), testPrefix())
	s.batch.max = 1000
	g := newGate(s)
	first := make(chan error, 1)
	go func() { _, err := s.Acquire(testCtx(t), "first", "w", time.Minute); first <- err }()
	<-g.started
	const n = 130
	errs := make(chan error, n)
	for i := range n {
		go func() { _, err := s.Acquire(testCtx(t), fmt.Sprintf("k%d", i), "w", time.Minute); errs <- err }()
	}
	g.waitQueued(t, n)
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Acquire in a batch too large for etcd: %v", err)
		}
	}
	s.batch.mu.Lock()
	got := s.batch.max
	s.batch.mu.Unlock()
	if got != n/2 {
		t.Errorf("after etcd refused a batch of %d, batches are at most %d, want %d", n, got, n/2)
	}
	all, err := s.List(testCtx(t), "k", lease.Page{})
	if err != nil || len(all.Leases) != n {
		t.Fatalf("List = %d leases, %v; want %d", len(all.Leases), err, n)
	}
}

// TestBatchCancelledWhileQueued: an operation whose context ends while it
// is queued is never sent, and the others go on.
func TestBatchCancelledWhileQueued(t *testing.T) {
	eps := etcdtest.Start(t)
	s := newTestStore(t, etcdtest.NewClient(t, eps), testPrefix())
	g := newGate(s)
	first := make(chan error, 1)
	go func() { _, err := s.Acquire(testCtx(t), "first", "w", time.Minute); first <- err }()
	<-g.started
	ctx, cancel := context.WithCancel(testCtx(t))
	gone := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx, "gone", "w", time.Minute); gone <- err }()
	g.waitQueued(t, 1)
	kept := make(chan error, 1)
	go func() { _, err := s.Acquire(testCtx(t), "kept", "w", time.Minute); kept <- err }()
	g.waitQueued(t, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while queued: err = %v, want context.Canceled", err)
	}
	g.waitQueued(t, 1)
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(testCtx(t), "gone"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("the cancelled acquisition took effect: Get err = %v", err)
	}
	for _, keys := range g.recorded() {
		if slices.Contains(keys, "gone") {
			t.Errorf("the cancelled operation was sent: batches %v", g.recorded())
		}
	}
}
