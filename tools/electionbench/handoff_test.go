package electionbench_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// Graceful hand-offs per row and run, and how long each leader holds its
// term with the next candidate queued before it resigns: longer than etcd's
// 100 ms watch resync, so that concurrency.Election's waiter, whose watch
// starts from a past revision and so joins etcd's unsynced watchers, is
// synced by then, as it is in any term that lasts (a term shorter than
// that would charge Election up to 100 ms more).
const (
	handoffRounds = 120
	handoffTerm   = 120 * time.Millisecond
	handoffTTL    = 10 // seconds; no renewal or keep-alive falls in a hand-off
)

// handoff is one row: it elects a leader, queues the next candidate,
// waits a term, and returns the time from the leader's resignation to the
// next leader's Campaign returning.
type handoff struct {
	name string
	run  func(ctx context.Context, round int) (time.Duration, error)
}

// BenchmarkCompareElection measures a graceful hand-off, interleaved
// round by round (each round one hand-off of each row, starting from the
// next row each round):
//
//   - delete-watch-floor: the leader's key deleted, and the deletion
//     reaching a watcher that was waiting for it (synced): the least any
//     election on etcd must do, one committed write and one event;
//   - delete-watch-claim: the same, and the watcher then claims with a
//     Txn that creates the key if absent: the least an election must do
//     whose next term's token is made at the hand-off, as etcdstore's was
//     before its waiters' entries became the holder (kept for comparison);
//   - etcd-election: concurrency.Election, leader and candidate each on a
//     session and client of its own: Resign is a Delete; the candidate,
//     queued by its key's create revision, wakes on the deletion and reads
//     once more (a Get) to see nobody is left ahead of it;
//   - election-etcdstore: package election on etcdstore, each on a Store
//     and client of its own: Resign is Release (a Txn); the candidate,
//     queued in AcquireWait with an entry whose create revision is the
//     term's fencing token, holds on the deletion's event, writing and
//     reading nothing more.
func BenchmarkCompareElection(b *testing.B) {
	eps := etcdtest.Start(b)
	ctx := context.Background()
	pfx := uniquePrefix()

	floorCli, watchCli := etcdtest.NewClient(b, eps), etcdtest.NewClient(b, eps)
	sessL, sessF := newSession(b, eps, handoffTTL), newSession(b, eps, handoffTTL)
	storePfx := pfx + "store/"
	elL := newElector(b, etcdtest.NewClient(b, eps), storePfx, handoffTTL*time.Second)
	elF := newElector(b, etcdtest.NewClient(b, eps), storePfx, handoffTTL*time.Second)

	// queued checks, before the resignation, that the candidate has joined
	// the queue: n keys under prefix.
	queued := func(ctx context.Context, prefix string, n int64) error {
		resp, err := floorCli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count != n {
			return fmt.Errorf("%d keys under %q after a term, want %d: the candidate did not queue", resp.Count, prefix, n)
		}
		return nil
	}
	// deleteWatch deletes a leader's key, after a term, that a synced
	// watcher waits for; on the deletion the watcher calls then (if any),
	// and the time from the deletion's request to then's return is the
	// hand-off.
	deleteWatch := func(ctx context.Context, k string, then func(context.Context) error) (time.Duration, error) {
		if _, err := floorCli.Put(ctx, k, "L"); err != nil {
			return 0, err
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := watchCli.Watch(wctx, k, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		if wr := <-wch; !wr.Created {
			return 0, fmt.Errorf("watch of %q not created: %v", k, wr.Err())
		}
		got := make(chan won, 1)
		go func() {
			for wr := range wch {
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						var err error
						if then != nil {
							err = then(ctx)
						}
						got <- won{time.Now(), err}
						return
					}
				}
			}
		}()
		time.Sleep(handoffTerm)
		t0 := time.Now()
		if _, err := floorCli.Delete(ctx, k); err != nil {
			return 0, err
		}
		w := <-got
		return w.at.Sub(t0), w.err
	}
	rows := []handoff{
		{"delete-watch-floor", func(ctx context.Context, r int) (time.Duration, error) {
			return deleteWatch(ctx, fmt.Sprintf("%sfloor/%d", pfx, r), nil)
		}},
		{"delete-watch-claim", func(ctx context.Context, r int) (time.Duration, error) {
			k := fmt.Sprintf("%sclaim/%d", pfx, r)
			d, err := deleteWatch(ctx, k, func(ctx context.Context) error {
				resp, err := watchCli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, "F")).Commit()
				if err == nil && !resp.Succeeded {
					err = fmt.Errorf("claim of %q refused", k)
				}
				return err
			})
			if err != nil {
				return 0, err
			}
			_, err = floorCli.Delete(ctx, k)
			return d, err
		}},
		{"etcd-election", func(ctx context.Context, r int) (time.Duration, error) {
			key := fmt.Sprintf("%selection/%d/", pfx, r)
			leader, next := concurrency.NewElection(sessL, key), concurrency.NewElection(sessF, key)
			if err := leader.Campaign(ctx, "L"); err != nil {
				return 0, err
			}
			done := make(chan won, 1)
			go func() {
				err := next.Campaign(ctx, "F")
				done <- won{time.Now(), err}
			}()
			time.Sleep(handoffTerm)
			if err := queued(ctx, key, 2); err != nil {
				return 0, err
			}
			t0 := time.Now()
			if err := leader.Resign(ctx); err != nil {
				return 0, err
			}
			w := <-done
			if w.err != nil {
				return 0, w.err
			}
			return w.at.Sub(t0), next.Resign(ctx)
		}},
		{"election-etcdstore", func(ctx context.Context, r int) (time.Duration, error) {
			key := fmt.Sprintf("e%d", r)
			term, err := elL.Campaign(ctx, key, "L")
			if err != nil {
				return 0, err
			}
			done := make(chan won, 1)
			var nextTerm interface{ Resign(context.Context) error }
			go func() {
				t, err := elF.Campaign(ctx, key, "F")
				if err == nil {
					nextTerm = t
				}
				done <- won{time.Now(), err}
			}()
			time.Sleep(handoffTerm)
			// etcdstore's entries of key, the leader's and the candidate's:
			// see the package documentation.
			if err := queued(ctx, storePfx+"e\x00"+key+"\x00", 2); err != nil {
				return 0, err
			}
			t0 := time.Now()
			if err := term.Resign(ctx); err != nil {
				return 0, err
			}
			w := <-done
			if w.err != nil {
				return 0, w.err
			}
			return w.at.Sub(t0), nextTerm.Resign(ctx)
		}},
	}

	timed := make([]benchutil.Timed, len(rows))
	for i, r := range rows {
		timed[i] = benchutil.Timed{Name: r.name, Run: r.run}
	}
	b.Run("c=1/interleaved", func(b *testing.B) {
		benchutil.InterleaveRounds(b, ctx, max(b.N, handoffRounds), timed)
	})
}
