package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// stmtLog records the keys of every statement a batcher sends.
type stmtLog struct {
	mu    sync.Mutex
	stmts [][]string
}

func logStatements[Req, Res any](b *batcher[Req, Res]) *stmtLog {
	l := &stmtLog{}
	hook := func(keys []string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.stmts = append(l.stmts, slices.Clone(keys))
	}
	b.sent.Store(&hook)
	return l
}

// with returns the statements that hold at least one key starting with prefix.
func (l *stmtLog) with(prefix string) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]string
	for _, keys := range l.stmts {
		if slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, prefix) }) {
			out = append(out, keys)
		}
	}
	return out
}

// checkDistinct fails t if a statement holds one key twice.
func (l *stmtLog) checkDistinct(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, keys := range l.stmts {
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] {
				t.Errorf("statement %q holds key %q twice", keys, k)
			}
			seen[k] = true
		}
		if len(keys) > maxBatch {
			t.Errorf("statement holds %d operations, more than maxBatch %d", len(keys), maxBatch)
		}
	}
}

// blockSlots fills every slot of a batcher with a statement that waits on a
// row lock: it locks the rows of keys in a transaction of its own, starts
// op on each key and waits until inflight reports every slot taken. The
// returned function rolls the lock back and checks that the blocked
// operations then succeed.
func blockSlots(t *testing.T, db testDB, keys []string, inflight func() int, op func(ctx context.Context, key string) error) (unblock func()) {
	t.Helper()
	ctx := testCtx(t)
	locker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := locker.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM public.lease_leases WHERE key = ANY ($1) FOR UPDATE) x`, keys).Scan(&n); err != nil || n != len(keys) {
		t.Fatalf("locking %d blocker rows: locked %d, %v", len(keys), n, err)
	}
	done := make(chan error, len(keys))
	for _, k := range keys {
		go func() { done <- op(ctx, k) }()
	}
	eventually(t, 10*time.Second, "blockers did not fill the slots", func() bool { return inflight() == loneSlots })
	return func() {
		t.Helper()
		if err := locker.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		for range keys {
			if err := <-done; err != nil {
				t.Errorf("blocked operation: %v", err)
			}
		}
	}
}

// blockAcquires makes the acquire slots of s wait on row locks (acquires of
// free keys whose rows another transaction has locked).
func blockAcquires(t *testing.T, db testDB, s *Store) (unblock func()) {
	t.Helper()
	ctx := testCtx(t)
	var keys []string
	for i := range loneSlots {
		k := fmt.Sprintf("blocker/%d", i)
		l, err := s.Acquire(ctx, k, "blocker", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return blockSlots(t, db, keys,
		func() int { n, _ := s.acquires.state(); return n },
		func(ctx context.Context, k string) error {
			_, err := s.Acquire(ctx, k, "blocked", time.Minute)
			return err
		})
}

// waitQueued waits until n operations are queued in a batcher.
func waitQueued(t *testing.T, n int, state func() (int, int)) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d operations not queued", n), func() bool { _, q := state(); return q == n })
}

type acquired struct {
	l   lease.Lease
	err error
}

// acquireAsync starts Acquire of each key and returns their results, in
// the order of keys, on one channel each.
func acquireAsync(ctx context.Context, s *Store, keys []string) []chan acquired {
	out := make([]chan acquired, len(keys))
	for i, k := range keys {
		out[i] = make(chan acquired, 1)
		go func() {
			l, err := s.Acquire(ctx, k, "owner-"+k, time.Minute)
			out[i] <- acquired{l, err}
		}()
	}
	return out
}

func TestBatchSharesStatements(t *testing.T) {
	// Acquisitions of distinct keys that arrive while every slot is busy
	// leave in one statement (maxBatch at most), and each gets what it
	// would have got alone.
	db := newTestDB(t, 16)
	s := db.store(t)
	ctx := testCtx(t)
	// "key/held" is held by someone else: its acquire in the batch must be
	// refused with the holder's lease, and not written.
	holder, err := s.Acquire(ctx, "key/held", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// "key/again" was used before: its next token continues from 1.
	again, err := s.Acquire(ctx, "key/again", "first", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, again); err != nil {
		t.Fatal(err)
	}
	log := logStatements(s.acquires)
	unblock := blockAcquires(t, db, s)
	keys := []string{"key/held", "key/again"}
	for i := range maxBatch + 3 - 2 {
		keys = append(keys, fmt.Sprintf("key/%03d", i))
	}
	results := acquireAsync(ctx, s, keys)
	waitQueued(t, len(keys), s.acquires.state)
	unblock()
	for i, ch := range results {
		r := <-ch
		switch keys[i] {
		case "key/held":
			var he *lease.HeldError
			if !errors.As(r.err, &he) || he.Owner != "holder" || he.Token != holder.Token || !he.Expires.Equal(holder.Expires) {
				t.Errorf("batched acquire of a held key: %v, want a HeldError naming %+v", r.err, holder)
			}
		case "key/again":
			if r.err != nil || r.l.Token != again.Token+1 {
				t.Errorf("batched acquire of a released key: %+v, %v; want token %d", r.l, r.err, again.Token+1)
			}
		default:
			if r.err != nil || r.l.Token != 1 || r.l.Owner != "owner-"+keys[i] || r.l.Key != keys[i] || r.l.ID.IsZero() || r.l.TTL != time.Minute {
				t.Errorf("batched acquire of fresh %q: %+v, %v", keys[i], r.l, r.err)
				continue
			}
			g, err := s.Get(ctx, keys[i])
			if err != nil || g.Token != r.l.Token || g.Owner != r.l.Owner || !g.Expires.Equal(r.l.Expires) {
				t.Errorf("Get(%q) after the batch = %+v, %v; want %+v", keys[i], g, err, r.l)
			}
		}
	}
	log.checkDistinct(t)
	stmts := log.with("key/")
	var sizes []int
	total := 0
	for _, st := range stmts {
		sizes = append(sizes, len(st))
		total += len(st)
	}
	// maxBatch+3 queued operations: one full statement and one of 3.
	slices.Sort(sizes)
	if want := []int{3, maxBatch}; !slices.Equal(sizes, want) || total != len(keys) {
		t.Errorf("%d queued acquires went out in statements of sizes %v, want %v", len(keys), sizes, want)
	}
	if g, err := s.Get(ctx, "key/held"); err != nil || g.Token != holder.Token || g.Owner != "holder" {
		t.Errorf("held key after the batch: %+v, %v", g, err)
	}
}

func TestBatchSameKeyNeverShares(t *testing.T) {
	db := newTestDB(t, 16)
	s := db.store(t)
	ctx := testCtx(t)
	log := logStatements(s.acquires)
	unblock := blockAcquires(t, db, s)
	keys := []string{"same", "d/1", "same", "d/2", "same", "d/3"}
	results := acquireAsync(ctx, s, keys)
	waitQueued(t, len(keys), s.acquires.state)
	unblock()
	var winners []lease.Lease
	var held []*lease.HeldError
	for i, ch := range results {
		r := <-ch
		if keys[i] != "same" {
			if r.err != nil || r.l.Token != 1 {
				t.Errorf("acquire of %q: %+v, %v", keys[i], r.l, r.err)
			}
			continue
		}
		var he *lease.HeldError
		switch {
		case r.err == nil:
			winners = append(winners, r.l)
		case errors.As(r.err, &he):
			held = append(held, he)
		default:
			t.Errorf("acquire of the shared key: %v", r.err)
		}
	}
	if len(winners) != 1 || len(held) != 2 {
		t.Fatalf("three acquires of one key: %d won, %d held; want 1 and 2", len(winners), len(held))
	}
	// One batch is in flight at a time: the later statements see the
	// winner's committed lease.
	for _, he := range held {
		if he.Token != winners[0].Token || he.Owner != "owner-same" {
			t.Errorf("loser sees holder token %d owner %q, want the winner's %d", he.Token, he.Owner, winners[0].Token)
		}
	}
	log.checkDistinct(t)
	n := 0
	for _, st := range log.with("") {
		n += strings.Count(strings.Join(st, "\x00")+"\x00", "same\x00")
	}
	if n != 3 {
		t.Errorf("the shared key went out %d times, want 3 (once per statement)", n)
	}
	if got := len(log.with("same")); got != 3 {
		t.Errorf("three acquires of one key went out in %d statements, want 3", got)
	}
}

func TestBatchFailureFailsAll(t *testing.T) {
	// A batch statement that fails (here: its connection is killed while
	// it waits for a row lock) fails every operation in it with an error
	// matching ErrUnavailable, and none of them is applied.
	db := newTestDB(t, 16)
	s := db.store(t)
	ctx := testCtx(t)
	trap, err := s.Acquire(ctx, "batch/trap", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, trap); err != nil {
		t.Fatal(err)
	}
	locker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, `SELECT FROM public.lease_leases WHERE key = 'batch/trap' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	log := logStatements(s.acquires)
	unblock := blockAcquires(t, db, s)
	keys := []string{"batch/a", "batch/b", "batch/trap", "batch/c"}
	results := acquireAsync(ctx, s, keys)
	waitQueued(t, len(keys), s.acquires.state)
	unblock()
	// The batch now waits for the trap's row lock: kill its connection.
	var pid int32
	eventually(t, 10*time.Second, "batch statement not waiting for the row lock", func() bool {
		err := db.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%unnest%'`).Scan(&pid)
		return err == nil
	})
	if _, err := db.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	// pg_terminate_backend only signals: until the backend has exited, it
	// still holds the advisory locks its statement took, and an acquire of
	// those keys would (rightly) be told a concurrent acquire has them.
	eventually(t, 10*time.Second, "killed backend still running", func() bool {
		var n int
		err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE pid = $1)
			+ (SELECT count(*) FROM pg_locks WHERE pid = $1)`, pid).Scan(&n)
		return err == nil && n == 0
	})
	for i, ch := range results {
		r := <-ch
		if !errors.Is(r.err, lease.ErrUnavailable) || errors.Is(r.err, lease.ErrHeld) || !strings.Contains(r.err.Error(), "outcome unknown") {
			t.Errorf("acquire of %q in the failed batch: %+v, %v; want ErrUnavailable, outcome unknown", keys[i], r.l, r.err)
		}
	}
	if got := log.with("batch/"); len(got) != 1 || len(got[0]) != len(keys) {
		t.Errorf("statements %q, want one holding all %d keys", got, len(keys))
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if g, err := s.Get(ctx, k); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("Get(%q) after the killed batch: %+v, %v; want ErrNotFound", k, g, err)
		}
	}
	// The next acquires work and continue the tokens.
	for _, k := range keys {
		want := lease.Token(1)
		if k == "batch/trap" {
			want = trap.Token + 1
		}
		if l, err := s.Acquire(ctx, k, "o", time.Minute); err != nil || l.Token != want {
			t.Errorf("Acquire(%q) after the killed batch: %+v, %v; want token %d", k, l, err, want)
		}
	}
}

func TestBatchRenewsAndReleases(t *testing.T) {
	// Renewals and releases batch the same way: one statement each for
	// the queued operations, each answered as alone.
	db := newTestDB(t, 16)
	s := db.store(t)
	ctx := testCtx(t)
	const n = 6
	var leases []lease.Lease
	for i := range n {
		l, err := s.Acquire(ctx, fmt.Sprintf("rr/%d", i), "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// rr/0 is asked with a wrong token, rr/1 with a wrong ID: not held.
	stale := []lease.Lease{leases[0], leases[1]}
	stale[0].Token++
	stale[1].ID = lease.NewID()

	holdBlockers := func() []lease.Lease {
		var bl []lease.Lease
		for i := range loneSlots {
			l, err := s.Acquire(ctx, fmt.Sprintf("blocker/%d", i), "blocker", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			bl = append(bl, l)
		}
		return bl
	}
	keysOf := func(ls []lease.Lease) []string {
		var keys []string
		for _, l := range ls {
			keys = append(keys, l.Key)
		}
		return keys
	}

	// Renewals.
	renewLog := logStatements(s.renews)
	bl := holdBlockers()
	unblock := blockSlots(t, db, keysOf(bl), func() int { n, _ := s.renews.state(); return n },
		func(ctx context.Context, k string) error {
			_, err := s.Renew(ctx, bl[slices.Index(keysOf(bl), k)], time.Minute)
			return err
		})
	type res struct {
		l   lease.Lease
		err error
	}
	renewed := make([]chan res, n)
	for i := range n {
		renewed[i] = make(chan res, 1)
		l := leases[i]
		if i < 2 {
			l = stale[i]
		}
		go func() {
			r, err := s.Renew(ctx, l, 2*time.Minute)
			renewed[i] <- res{r, err}
		}()
	}
	waitQueued(t, n, s.renews.state)
	unblock()
	for i, ch := range renewed {
		r := <-ch
		switch {
		case i < 2:
			if !errors.Is(r.err, lease.ErrNotHeld) {
				t.Errorf("batched renew of a stale lease on %q: %+v, %v; want ErrNotHeld", leases[i].Key, r.l, r.err)
			}
		case r.err != nil || r.l.Token != leases[i].Token || r.l.ID != leases[i].ID || r.l.TTL != 2*time.Minute || !r.l.Expires.After(leases[i].Expires):
			t.Errorf("batched renew of %+v: %+v, %v", leases[i], r.l, r.err)
		}
	}
	if got := renewLog.with("rr/"); len(got) != 1 || len(got[0]) != n {
		t.Errorf("renew statements %q, want one holding all %d", got, n)
	}
	renewLog.checkDistinct(t)

	// Releases. The blockers still hold their leases (renewed, same token
	// and ID): their releases block this time.
	releaseLog := logStatements(s.releases)
	unblock = blockSlots(t, db, keysOf(bl), func() int { n, _ := s.releases.state(); return n },
		func(ctx context.Context, k string) error { return s.Release(ctx, bl[slices.Index(keysOf(bl), k)]) })
	released := make([]chan error, n)
	for i := range n {
		released[i] = make(chan error, 1)
		l := leases[i]
		if i < 2 {
			l = stale[i]
		}
		go func() { released[i] <- s.Release(ctx, l) }()
	}
	waitQueued(t, n, s.releases.state)
	unblock()
	for i, ch := range released {
		err := <-ch
		_, gerr := s.Get(ctx, leases[i].Key)
		switch {
		case i < 2:
			if !errors.Is(err, lease.ErrNotHeld) || gerr != nil {
				t.Errorf("batched release of a stale lease on %q: %v (Get: %v); want ErrNotHeld and the lease kept", leases[i].Key, err, gerr)
			}
		case err != nil || !errors.Is(gerr, lease.ErrNotFound):
			t.Errorf("batched release of %+v: %v (Get: %v)", leases[i], err, gerr)
		}
	}
	if got := releaseLog.with("rr/"); len(got) != 1 || len(got[0]) != n {
		t.Errorf("release statements %q, want one holding all %d", got, n)
	}
	releaseLog.checkDistinct(t)
}

func TestBatchedTokensIncrease(t *testing.T) {
	// Many clients on a few keys, through batches: at most one holder per
	// key at a time, and each key's tokens rise by one per acquisition.
	db := newTestDB(t, 16)
	s := db.store(t)
	ctx := testCtx(t)
	var multi atomic.Int64
	hook := func(keys []string) {
		if len(keys) > 1 {
			multi.Add(1)
		}
	}
	s.acquires.sent.Store(&hook)
	s.releases.sent.Store(&hook)
	const clients, keys, rounds = 24, 6, 25
	type keyState struct {
		holders atomic.Int32
		mu      sync.Mutex
		tokens  []lease.Token
	}
	state := make([]keyState, keys)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; {
				k := rand.IntN(keys)
				key := fmt.Sprintf("tok/%d", k)
				l, err := s.Acquire(ctx, key, fmt.Sprintf("c%d", c), time.Minute)
				if errors.Is(err, lease.ErrHeld) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				st := &state[k]
				if n := st.holders.Add(1); n != 1 {
					t.Errorf("%d holders of %q at once", n, key)
				}
				st.mu.Lock()
				st.tokens = append(st.tokens, l.Token)
				st.mu.Unlock()
				if r%3 == 0 {
					if rl, err := s.Renew(ctx, l, time.Minute); err != nil || rl.Token != l.Token {
						t.Errorf("renew of %+v: %+v, %v", l, rl, err)
					}
				}
				st.holders.Add(-1)
				if err := s.Release(ctx, l); err != nil {
					t.Error(err)
					return
				}
				r++
			}
		}()
	}
	wg.Wait()
	total := 0
	for k := range state {
		toks := state[k].tokens
		total += len(toks)
		for i, tok := range toks {
			if tok != lease.Token(i+1) {
				t.Fatalf("tok/%d: tokens %v, want 1, 2, 3, …", k, toks)
			}
		}
	}
	if total != clients*rounds {
		t.Fatalf("%d acquisitions, want %d", total, clients*rounds)
	}
	if multi.Load() == 0 {
		t.Fatal("no statement held more than one operation: the test did not exercise batches")
	}
	for name, st := range map[string]func() (int, int){"acquire": s.acquires.state, "renew": s.renews.state, "release": s.releases.state} {
		if inflight, queued := st(); inflight != 0 || queued != 0 {
			t.Errorf("%s batcher left with %d in flight, %d queued", name, inflight, queued)
		}
	}
}

func TestBatchHeldKeysAreReadOnly(t *testing.T) {
	// The batch form of the acquire statement writes nothing for a held
	// key: all keys held — no transaction ID; held and free keys mixed —
	// only the free key's row is written, and a lock on the held key's
	// row does not make the statement wait.
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	for _, k := range []string{"busy/1", "busy/2"} {
		if _, err := s.Acquire(ctx, k, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// run runs the batch statement on keys in a transaction, and reports
	// which keys it acquired, its transaction ID (nil if none) and the
	// transactions that last wrote each key's row.
	run := func(ctx context.Context, keys []string) (got map[string]bool, xid *int64, writer map[string]int64) {
		t.Helper()
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		var ids [][]byte
		var owners []string
		var ttls []int64
		for range keys {
			id := lease.NewID()
			ids, owners, ttls = append(ids, id[:]), append(owners, "other"), append(ttls, time.Minute.Nanoseconds())
		}
		rows, err := tx.Query(ctx, s.q.acquire.many, keys, ids, owners, ttls, s.n.watchChannel, s.ident.Load().id)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]bool{}
		for rows.Next() {
			var key, owner string
			var acquired bool
			var token, ttl int64
			var exp time.Time
			var told *string
			if err := rows.Scan(&key, &acquired, &token, &owner, &ttl, &exp, &told); err != nil {
				t.Fatal(err)
			}
			got[key] = acquired
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("batch acquire statement on %q: %v", keys, err)
		}
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text::bigint`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		writer = map[string]int64{}
		rows, err = tx.Query(ctx, `SELECT key, xmin::text::bigint FROM public.lease_leases WHERE key = ANY ($1)`, keys)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			var x int64
			if err := rows.Scan(&k, &x); err != nil {
				t.Fatal(err)
			}
			writer[k] = x
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got, xid, writer
	}
	got, xid, _ := run(ctx, []string{"busy/1", "busy/2"})
	if got["busy/1"] || got["busy/2"] || len(got) != 2 || xid != nil {
		t.Errorf("batch of held keys: acquired %v, transaction ID %v; want two read-only misses (no ID)", got, deref(xid))
	}
	got, xid, writer := run(ctx, []string{"busy/1", "free"})
	if got["busy/1"] || !got["free"] || xid == nil {
		t.Fatalf("batch of a held and a free key: acquired %v, transaction ID %v; want only the free key, written", got, deref(xid))
	}
	if writer["free"] != *xid || writer["busy/1"] == *xid {
		t.Errorf("batch transaction %d wrote rows %v; want the free key's only", *xid, writer)
	}
	// With the held key's row locked elsewhere, the batch still answers.
	locker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, `SELECT FROM public.lease_leases WHERE key = 'busy/1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if got, _, _ := run(quick, []string{"busy/1", "free/2"}); got["busy/1"] || !got["free/2"] {
		t.Errorf("batch with a held, row-locked key: acquired %v; want only free/2", got)
	}
}
