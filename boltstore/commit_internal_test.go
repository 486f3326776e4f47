package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
)

func openInternal(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "lease.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestFailedOpsWriteNothing: tries that find the key held, and renews and
// releases of leases that are not current, commit nothing (ANCHORS: a failed
// acquire that writes makes a contended key collapse).
func TestFailedOpsWriteNothing(t *testing.T) {
	t.Parallel()
	s := openInternal(t)
	ctx := t.Context()
	l, err := s.Acquire(ctx, "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := s.commits.Load()
	stale := l
	stale.ID = lease.NewID()
	expired, cancel := context.WithCancel(ctx)
	cancel()
	for range 20 {
		if _, err := s.Acquire(ctx, "k", "other", time.Minute); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("Acquire: %v", err)
		}
		// The commit loop's own check, as when a try races a grant.
		o := &op{kind: opAcquire, key: "k", owner: "other", ttl: time.Minute}
		if err := s.submit(ctx, o); err != nil || !errors.Is(o.err, lease.ErrHeld) {
			t.Fatalf("commit-loop acquire: %v, %v", err, o.err)
		}
		o = &op{kind: opAcquireWait, ctx: expired, key: "k", owner: "other", ttl: time.Minute, w: &waiter{ch: make(chan result, 1)}}
		if err := s.submit(ctx, o); err != nil || !errors.Is(o.err, lease.ErrHeld) {
			t.Fatalf("commit-loop acquire-wait with a done context: %v, %v", err, o.err)
		}
		if _, err := s.Renew(ctx, stale, time.Minute); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Renew: %v", err)
		}
		if err := s.Release(ctx, stale); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Release: %v", err)
		}
	}
	if n := s.commits.Load() - before; n != 0 {
		t.Fatalf("failed operations made %d commits, want 0", n)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	flush(t, s) // a release is answered before its commit
	if n := s.commits.Load() - before; n != 1 {
		t.Fatalf("a release made %d commits, want 1", n)
	}
}

// TestGroupCommit stalls the commit loop inside a commit, lets 31 more
// acquisitions queue behind it, and checks that they share one commit. It
// counts goroutine stacks, so it does not run in parallel with other tests.
func TestGroupCommit(t *testing.T) {
	const clients = 32
	s := openInternal(t)
	before := s.commits.Load()
	stall := make(chan struct{})
	var hooked atomic.Bool
	s.syncHook = func() { // the loop's next log write waits for stall
		if hooked.CompareAndSwap(false, true) {
			<-stall
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens = map[string]lease.Token{}
	)
	// Straight to the commit loop, as a try that races a grant would go.
	acquire := func(i int) {
		defer wg.Done()
		key := fmt.Sprintf("group/%d", i)
		o := &op{kind: opAcquire, key: key, owner: "o", ttl: time.Minute}
		if err := s.submit(context.Background(), o); err != nil || o.err != nil {
			t.Errorf("acquire %s: %v, %v", key, err, o.err)
			return
		}
		mu.Lock()
		tokens[key] = o.res.Token
		mu.Unlock()
	}
	wg.Add(1)
	go acquire(0)
	waitStacks(t, "boltstore.(*Store).finish(", 1) // the loop took it and waits to commit
	for i := 1; i < clients; i++ {
		wg.Add(1)
		go acquire(i)
	}
	waitStacks(t, "boltstore.(*Store).submit(", clients)
	close(stall)
	wg.Wait()
	if n := s.commits.Load() - before; n != 2 {
		t.Fatalf("%d acquisitions made %d commits, want 2 (the stalled one, then one for the rest)", clients, n)
	}
	if len(tokens) != clients {
		t.Fatalf("%d of %d acquisitions succeeded", len(tokens), clients)
	}
}

// flush returns once every operation answered before the call is
// committed: the commit loop runs one batch at a time, and a no-op sent now
// (an expiry check for a key nobody waits for) joins a later batch than
// theirs.
func flush(t *testing.T, s *Store) {
	t.Helper()
	if err := s.submit(t.Context(), &op{kind: opExpire, key: "flush"}); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseAnsweredBeforeCommit stalls the log write of a release's batch
// and checks that the release is answered anyway; that, meanwhile, a Get of
// the key waits for the batch to be durable, and an Acquire of the key does
// not take it for held; and that once the batch is durable the key went to
// the new acquirer with the next token.
func TestReleaseAnsweredBeforeCommit(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	l, err := s.Acquire(ctx, "k", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	stalled, unstall := stallFirstSync(t, s)
	before := s.commits.Load()

	released := make(chan error, 1)
	go func() { released <- s.Release(ctx, l) }()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release waited for its commit")
	}
	<-stalled
	if n := s.commits.Load() - before; n != 0 {
		t.Fatalf("%d commits done while the release's commit is stalled", n)
	}
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, "k")
		got <- err
	}()
	waitStacks(t, "sync.(*Cond).Wait(", 1)
	select {
	case err := <-got:
		t.Fatalf("Get during the release's stalled log write returned %v; want it to wait", err)
	default:
	}

	type res struct {
		l   lease.Lease
		err error
	}
	acquired := make(chan res, 1)
	go func() {
		l, err := s.Acquire(ctx, "k", "next", time.Minute)
		acquired <- res{l, err}
	}()
	// It reaches the commit loop (stalled) rather than answering "held".
	waitStacks(t, "boltstore.(*Store).submit(", 1)
	select {
	case r := <-acquired:
		t.Fatalf("Acquire during the release's commit = %+v, %v; want it to wait for the commit loop", r.l, r.err)
	default:
	}
	unstall()
	if err := <-got; err != nil && !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get after the release: %v", err)
	}
	r := <-acquired
	if r.err != nil || r.l.Token != l.Token+1 {
		t.Fatalf("Acquire after the release = %+v, %v; want token %d", r.l, r.err, l.Token+1)
	}
}

// TestHeldAnswerWaitsForDurability stalls the log write of a grant and
// checks that a try of the key, which finds it held, is not answered
// meanwhile: a crash then would lose the grant and issue its token again,
// so a try told of that token would see it issued twice (I1).
func TestHeldAnswerWaitsForDurability(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	stalled, unstall := stallFirstSync(t, s)
	granted := make(chan lease.Lease, 1)
	go func() {
		l, err := s.Acquire(ctx, "k", "A", time.Minute)
		if err != nil {
			t.Errorf("Acquire by A: %v", err)
		}
		granted <- l
	}()
	<-stalled // A's grant is applied; its log record is not written
	tried := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "k", "B", time.Minute)
		tried <- err
	}()
	// B is answered, or waits for the grant's record.
	poll.True(t, 10*time.Second, "a try of a key being granted answered or waiting", func() bool {
		return len(tried) > 0 || countStacks("boltstore.(*Store).waitDurable(") > 0
	})
	image := copyStore(t, s.path) // what a crash now would leave
	early := len(tried) > 0
	unstall()
	a := <-granted
	err := <-tried
	if early {
		t.Errorf("a try was answered %v while the grant it names was not durable", err)
	}
	var he *lease.HeldError
	if !errors.As(err, &he) || he.Owner != "A" || he.Token != a.Token {
		t.Fatalf("try of a key granted to A with token %d: %v; want a HeldError naming them", a.Token, err)
	}

	// The premise: after that crash the grant is lost (the key is free),
	// and, but for the floor from the host clock, its token would be
	// issued again.
	s2, err := Open(image, WithHostClock(func() time.Time { return time.Unix(0, 0) }))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if l, err := s2.Acquire(ctx, "k", "C", time.Minute); err != nil || l.Token != a.Token {
		t.Fatalf("Acquire after the crash = %+v, %v; want the lost grant's token %d again", l, err, a.Token)
	}
}

// TestDurabilityWaitHonoursContext: a Get waiting for a log write that
// stalls returns when its context ends.
func TestDurabilityWaitHonoursContext(t *testing.T) {
	s := openInternal(t)
	stalled, unstall := stallFirstSync(t, s)
	granted := make(chan error, 1)
	go func() {
		_, err := s.Acquire(t.Context(), "k", "A", time.Minute)
		granted <- err
	}()
	<-stalled
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, "k")
		got <- err
	}()
	waitStacks(t, "boltstore.(*Store).waitDurable(", 1)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Get whose context ended while it waited: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get waited for a stalled log write 10 s after its context ended")
	}
	unstall()
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
}

// stallFirstSync makes the store's next log write wait until unstall is
// called; stalled is closed once it waits. Cleanup calls unstall too, so a
// failing test never leaves the commit stalled.
func stallFirstSync(t *testing.T, s *Store) (stalled <-chan struct{}, unstall func()) {
	t.Helper()
	stall, waiting := make(chan struct{}), make(chan struct{})
	unstall = sync.OnceFunc(func() { close(stall) })
	t.Cleanup(unstall)
	var hooked atomic.Bool
	s.syncHook = func() {
		if hooked.CompareAndSwap(false, true) {
			close(waiting)
			<-stall
		}
	}
	return waiting, unstall
}

// copyStore copies the bbolt file at path and its log, as a crash would
// leave them now, to a new directory, and returns the copy's path.
func copyStore(t *testing.T, path string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), filepath.Base(path))
	for _, p := range [][2]string{{path, to}, {walPath(path), walPath(to)}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// waitStacks waits until n goroutines have a frame containing fn in their
// stacks (for submit: sent, or blocked sending, to the stalled loop).
func waitStacks(t *testing.T, fn string, n int) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() error {
		if got := countStacks(fn); got < n {
			return fmt.Errorf("%d goroutines in %s, want %d", got, fn, n)
		}
		return nil
	})
}

// countStacks returns how many frames of all goroutines' stacks contain fn.
func countStacks(fn string) int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), fn)
}

// TestHighWaterKept: release deletes the lease record but keeps the key's
// token high-water mark on disk.
func TestHighWaterKept(t *testing.T) {
	t.Parallel()
	s := openInternal(t)
	var last lease.Token
	for range 3 {
		l, err := s.Acquire(t.Context(), "hw", "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		last = l.Token
	}
	// On disk: what Close's checkpoint committed to the bbolt file.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketLeases).Get([]byte("hw")); v != nil {
			t.Errorf("released lease still stored: %x", v)
		}
		// Its high-water mark is folded into the floor.
		st, bad, err := readMeta(tx, s.path, schemaVersion)
		if err != nil || bad != nil || lease.Token(st.floor) != last {
			t.Errorf("floor = %d, %v, %v; want %d", st.floor, err, bad, last)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCommitFailureStops: once a commit fails (here: bbolt's MaxSize, as a
// full disk would), every operation fails until the store is reopened, and
// what was acknowledged before is intact after the reopen.
func TestCommitFailureStops(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	s := openMaxSize(t, path, 256<<10)
	owner := strings.Repeat("o", lease.MaxKeyLen)
	acked := map[string]lease.Token{}
	var failure error
	for i := 0; failure == nil; i++ {
		if i == 10000 {
			t.Fatal("10000 acquisitions fit in a 256 KiB file")
		}
		key := fmt.Sprintf("%0400d", i)
		l, err := s.Acquire(t.Context(), key, owner, time.Minute)
		if err != nil {
			failure = err
			break
		}
		acked[key] = l.Token
	}
	if !errors.Is(failure, lease.ErrUnavailable) || !errors.Is(failure, berrors.ErrMaxSizeReached) {
		t.Fatalf("failed commit: %v, want ErrUnavailable wrapping bbolt's error", failure)
	}
	t.Logf("after %d acquisitions: %v", len(acked), failure)
	for key := range acked {
		if _, err := s.Get(t.Context(), key); !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Get after a failed commit: %v, want ErrUnavailable", err)
		}
		if _, err := s.Acquire(t.Context(), key+"x", "o", time.Minute); !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Acquire after a failed commit: %v, want ErrUnavailable", err)
		}
		break
	}
	if err := s.Close(); !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("Close after a failed commit: %v, want the failure", err)
	}
	reopenHas(t, path, acked)
}

// TestCloseReportsFailedCheckpoint: when Close's own checkpoint fails (here:
// bbolt's MaxSize, as a full disk would), Close says so, and a reopen
// recovers from the log what the bbolt file lacks.
func TestCloseReportsFailedCheckpoint(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	// No checkpoint on the clock: on a loaded machine the 100 acquisitions
	// took over a second, and the interval's checkpoint failed first.
	s := openMaxSize(t, path, 64<<10, func(c *config) { c.checkpointEvery = time.Hour })
	acked := map[string]lease.Token{}
	for i := range 100 { // 100 KiB of keys alone
		key := fmt.Sprintf("%0500d", i)
		l, err := s.Acquire(t.Context(), key, "o", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		acked[key] = l.Token
	}
	if n := s.checkpoints.Load(); n != 0 {
		t.Fatalf("%d checkpoints before Close: this test needs Close's to be the first", n)
	}
	err := s.Close()
	if !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("Close with a failing checkpoint: %v, want ErrUnavailable wrapping bbolt's error", err)
	}
	t.Logf("Close: %v", err)
	reopenHas(t, path, acked)
}

// openMaxSize opens a store at path whose bbolt file cannot grow past max
// bytes, as on a full disk, configured further by more; it is closed in
// cleanup.
func openMaxSize(t *testing.T, path string, max int, more ...func(*config)) *Store {
	t.Helper()
	s, err := Open(path, func(c *config) error {
		c.boltOptions = func(o *bolt.Options) { o.MaxSize = max }
		for _, f := range more {
			f(c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// reopenHas reopens the store at path after a failure and checks that every
// acknowledged lease in acked is there with its token.
func reopenHas(t *testing.T, path string, acked map[string]lease.Token) {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("reopen after the failure: %v", err)
	}
	defer func() { _ = s.Close() }()
	for key, tok := range acked {
		if l, err := s.Get(t.Context(), key); err != nil || l.Token != tok {
			t.Fatalf("after reopen Get(%q) = %+v, %v; want token %d", key, l, err, tok)
		}
	}
}

// TestRenewalOrder checks the order a RenewBatch is applied in: every
// index once, by key, and a key's renewals in their own order (the last of
// them is the one that stands), for a batch whose keys come in any order.
func TestRenewalOrder(t *testing.T) {
	var renewals []lease.Renewal
	for i := range lease.MaxRenewBatch {
		// 16 keys, each 16 times, none next to itself, descending and
		// ascending by turns.
		k := (i * 7) % 16
		if i%2 == 1 {
			k = 15 - k
		}
		renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: fmt.Sprintf("k/%02d", k)}, TTL: time.Duration(i+1) * time.Second})
	}
	order := renewalOrder(make([]int, 3, 8), renewals)
	if len(order) != len(renewals) {
		t.Fatalf("renewalOrder gave %d indexes for %d renewals", len(order), len(renewals))
	}
	seen := make([]bool, len(renewals))
	for n, i := range order {
		if i < 0 || i >= len(renewals) || seen[i] {
			t.Fatalf("renewalOrder: index %d at %d is out of range or given twice: %v", i, n, order)
		}
		seen[i] = true
		if n == 0 {
			continue
		}
		prev, cur := renewals[order[n-1]].Lease.Key, renewals[i].Lease.Key
		if prev > cur || prev == cur && order[n-1] > i {
			t.Fatalf("renewalOrder: %s (index %d) before %s (index %d): want keys in order, a key's renewals in theirs", prev, order[n-1], cur, i)
		}
	}
	sorted := []lease.Renewal{{Lease: lease.Lease{Key: "a"}}, {Lease: lease.Lease{Key: "b"}}, {Lease: lease.Lease{Key: "b"}}}
	if got := renewalOrder(nil, sorted); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("renewalOrder of a sorted batch = %v, want [0 1 2]", got)
	}
}

// TestRenewBatchLastOfAKeyStands checks that a batch naming a key twice,
// among keys out of order, renews it as the two renewals made in their
// order would: the second's TTL stands.
func TestRenewBatchLastOfAKeyStands(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "lease.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var held []lease.Lease
	for _, k := range []string{"z", "m", "a"} {
		l, err := s.Acquire(ctx, k, "worker", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var renewals []lease.Renewal
	for i := range 20 {
		// m is renewed 7 times, its TTL going 2 min, 3 min, ... 8 min.
		renewals = append(renewals, lease.Renewal{Lease: held[i%3], TTL: time.Duration(2+i/3) * time.Minute})
	}
	res, err := s.RenewBatch(ctx, renewals)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Lease.Key != renewals[i].Lease.Key || r.Lease.TTL != renewals[i].TTL {
			t.Errorf("result %d: %+v, %v; want %s renewed for %v", i, r.Lease, r.Err, renewals[i].Lease.Key, renewals[i].TTL)
		}
	}
	for i, want := range []time.Duration{8 * time.Minute, 8 * time.Minute, 7 * time.Minute} {
		if g, err := s.Get(ctx, held[i].Key); err != nil || g.TTL != want {
			t.Errorf("Get(%s) = %+v, %v; want the batch's last renewal of it, TTL %v", held[i].Key, g, err, want)
		}
	}
}
