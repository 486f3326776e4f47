package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

// lockRows locks the rows of keys (acquired and released once, so that
// each has a free row) in a transaction of db's own and returns it: an
// acquire of one of those keys waits on its row lock until the transaction
// ends.
func lockRows(t *testing.T, db testDB, s *Store, keys ...string) pgx.Tx {
	t.Helper()
	ctx := testCtx(t)
	for _, k := range keys {
		l, err := s.Acquire(ctx, k, "before", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	locker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Rollback(context.Background()) })
	var n int
	if err := locker.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM public.lease_leases WHERE key = ANY ($1) FOR UPDATE) x`, keys).Scan(&n); err != nil || n != len(keys) {
		t.Fatalf("locking %d rows: locked %d, %v", len(keys), n, err)
	}
	return locker
}

// waitingOnLocks waits until n statements of the database wait on a lock.
func waitingOnLocks(t *testing.T, db testDB, n int) {
	t.Helper()
	ctx := testCtx(t)
	eventually(t, 10*time.Second, fmt.Sprintf("%d statements waiting on a lock", n), func() bool {
		var got int
		err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		return err == nil && got == n
	})
}

// freed waits until no lease is held on key, failing t if one still is
// after 10 s (the leases in these tests are for a minute).
func freed(t *testing.T, s *Store, key, why string) {
	t.Helper()
	ctx := testCtx(t)
	eventually(t, 10*time.Second, why, func() bool {
		_, err := s.Get(ctx, key)
		return errors.Is(err, lease.ErrNotFound)
	})
}

// TestAcquireGivenUpLeavesNothing: an acquire whose caller gives up while
// its statement is in flight — here waiting on a row lock, as it would
// behind a slow commit — returns at once, and the lease that statement
// grants once it goes on is released by the store, not held by nobody for
// its TTL. pgx closes the connection when the caller's context ends, but
// PostgreSQL does not notice a closed connection while it waits on a lock
// or commits: the statement went on and granted a lease nobody knew the ID
// of. Also through lease.Client.TryAcquire, which passed its context to the
// backend as it came.
func TestAcquireGivenUpLeavesNothing(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	for _, via := range []string{"Store.Acquire", "Client.TryAcquire"} {
		t.Run(via, func(t *testing.T) {
			key := "given-up/" + via
			locker := lockRows(t, db, s, key)
			ctx, cancel := context.WithCancel(testCtx(t))
			done := make(chan error, 1)
			go func() {
				var err error
				if via == "Store.Acquire" {
					_, err = s.Acquire(ctx, key, "quitter", time.Minute)
				} else {
					c, cerr := lease.NewClient(s, lease.WithOwner("quitter"))
					if cerr != nil {
						done <- cerr
						return
					}
					_, err = c.TryAcquire(ctx, key, time.Minute)
				}
				done <- err
			}()
			waitingOnLocks(t, db, 1)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("%s after its context ended = %v, want context.Canceled", via, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return when its context ended", via)
			}
			if err := locker.Rollback(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			freed(t, s, key, "the lease granted to a caller that gave up is still held")
		})
	}
}

// TestBatchedAcquireGivenUp: in a batch, the caller that gives up gets its
// context's error at once, the others their leases, and the lease granted
// to the one that left is released.
func TestBatchedAcquireGivenUp(t *testing.T) {
	db := newTestDB(t, 16)
	s := db.store(t)
	locker := lockRows(t, db, s, "batch/quitter", "batch/stayer")
	unblock := blockAcquires(t, db, s)
	ctx := testCtx(t)
	qctx, cancel := context.WithCancel(ctx)
	quitter := make(chan error, 1)
	go func() { _, err := s.Acquire(qctx, "batch/quitter", "quitter", time.Minute); quitter <- err }()
	stayer := acquireAsync(ctx, s, []string{"batch/stayer"})[0]
	waitQueued(t, 2, s.acquires.state)
	unblock() // the blockers end; the batch of both is sent and waits on locker
	waitingOnLocks(t, db, 1)
	cancel()
	if err := <-quitter; !errors.Is(err, context.Canceled) {
		t.Fatalf("batched acquire whose context ended = %v, want context.Canceled", err)
	}
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-stayer; r.err != nil {
		t.Fatalf("the other acquire of the batch: %v", r.err)
	}
	freed(t, s, "batch/quitter", "the lease granted in a batch to a caller that gave up is still held")
}

// TestAcquireGivenUpMidCommit: an acquire whose statement is committing
// when its caller gives up, or when its answer is lost (here: the
// statement's bound is reached and pgx closes the connection), is answered
// at once, and the lease the commit grants is released, not held by nobody
// for its TTL. A commit is made slow by commit_delay, which no cancel
// request interrupts. (Killing the backend mid-commit is no such case:
// pg_terminate_backend's signal cuts the delay short, and the commit is
// answered before the backend exits.)
func TestAcquireGivenUpMidCommit(t *testing.T) {
	url := pgtest.Start(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// Every commit that writes waits 100 ms before its WAL flush.
	cfg.ConnConfig.RuntimeParams["commit_delay"] = "100000"
	cfg.ConnConfig.RuntimeParams["commit_siblings"] = "0"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := testDB{url: url, pool: pool}
	s := db.store(t)
	ctx := testCtx(t)
	if _, err := s.Get(ctx, "warm"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatal(err) // the tables exist before the trials
	}
	const trials = 5
	for _, how := range []string{"cancelled", "lost"} {
		t.Run(how, func(t *testing.T) {
			committed := 0
			for i := range trials {
				key := fmt.Sprintf("mid-commit/%s/%d", how, i)
				actx, cancel := context.WithCancel(ctx)
				defer cancel()
				done := make(chan error, 1)
				// PostgreSQL 15 names no wait event for commit_delay: the
				// statement shows active, and its work takes a few
				// milliseconds of the 100.
				want := context.Canceled
				s.acquireBound = acquireBound
				if how == "lost" {
					want = lease.ErrUnavailable
					s.acquireBound = 50 * time.Millisecond // within the commit's 100 ms
				}
				go func() { _, err := s.Acquire(actx, key, "quitter", time.Minute); done <- err }()
				if how == "cancelled" {
					eventually(t, 10*time.Second, "the acquire did not start", func() bool {
						var n int
						err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND starts_with(query, 'WITH req')`).Scan(&n)
						return err == nil && n == 1
					})
					time.Sleep(20 * time.Millisecond) // real time: into the server's 100 ms commit delay
					cancel()
				}
				select {
				case err := <-done:
					if !errors.Is(err, want) {
						t.Fatalf("Acquire %s mid-commit = %v, want %v", how, err, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("Acquire did not return when %s mid-commit", how)
				}
				eventually(t, 10*time.Second, "the acquire's statement did not end", func() bool { n, _ := s.acquires.state(); return n == 0 })
				s.acquireBound = acquireBound
				eventually(t, 10*time.Second, "the acquire's backend still runs it", func() bool {
					var n int
					err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle' AND starts_with(query, 'WITH req')`).Scan(&n)
					return err == nil && n == 0
				})
				freed(t, s, key, "the lease granted by a commit whose answer nobody got is still held")
				l, err := s.Acquire(ctx, key, "next", time.Minute)
				if err != nil {
					t.Fatalf("after the acquire %s mid-commit: %v (its grant is held by nobody)", how, err)
				}
				if l.Token > 1 {
					committed++ // the statement answered to nobody granted token 1
				}
			}
			if committed == 0 {
				t.Fatalf("no acquire %s committed: the test did not end one mid-commit", how)
			}
			t.Logf("%d of %d acquires %s mid-commit had committed", committed, trials, how)
		})
	}
}

// TestAcquireEndedSendsNothing: an Acquire whose ctx has ended before it
// is called sends no statement (which, outliving its caller, would grant
// and release a lease for nothing).
func TestAcquireEndedSendsNothing(t *testing.T) {
	db := newTestDB(t, 4)
	s := db.store(t)
	if _, err := s.Get(testCtx(t), "warm"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatal(err)
	}
	log := logStatements(s.acquires)
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, err := s.Acquire(ctx, "ended", "w", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with an ended ctx = %v, want context.Canceled", err)
	}
	// A statement sent is in flight from before Acquire returns.
	eventually(t, 10*time.Second, "a statement still in flight", func() bool { n, _ := s.acquires.state(); return n == 0 })
	if sent := log.with("ended"); len(sent) != 0 {
		t.Fatalf("Acquire with an ended ctx sent %d statements", len(sent))
	}
}
