package linebench_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
)

const (
	handoffRounds = 100
	// handoffQueue is how long the next candidate has to queue before the
	// leader steps down, so that the hand-off starts with it in line.
	handoffQueue = 30 * time.Millisecond
)

// backends opens one store of each kind, closed when b ends.
func backends(b *testing.B) []struct {
	name string
	be   lease.Backend
} {
	ctx := context.Background()
	check := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	mem, err := memstore.New()
	check(err)
	bolt, err := boltstore.Open(filepath.Join(b.TempDir(), "bolt.db"))
	check(err)
	b.Cleanup(func() { _ = bolt.Close() })
	pg, err := pgstore.Open(ctx, pgtest.Start(b))
	check(err)
	b.Cleanup(func() { _ = pg.Close() })
	rds, err := redisstore.Open(ctx, "redis://"+redistest.Start(b).Addr+"/0")
	check(err)
	b.Cleanup(func() { _ = rds.Close() })
	etcd, err := etcdstore.Open(ctx, etcdtest.Start(b))
	check(err)
	b.Cleanup(func() { _ = etcd.Close() })
	srv, err := leasehttp.NewServer(bolt)
	check(err)
	hs := newLoopbackServer(b, srv)
	hc, err := leasehttp.NewClient(hs)
	check(err)
	b.Cleanup(func() { hc.Close() })
	return []struct {
		name string
		be   lease.Backend
	}{{"memstore", mem}, {"boltstore", bolt}, {"pgstore", pg}, {"redisstore", rds}, {"etcdstore", etcd}, {"leasehttp", hc}}
}

// work is the leader's work in both hand-offs: it acts (here: waits)
// until its context ends.
func work(ctx context.Context) { <-ctx.Done() }

// A hand-off's end, stamped in the next leader's goroutine the moment it
// leads, so that no row counts a wake-up of the goroutine timing it.
type led struct {
	t   *election.Term // resignHandoff's next term, to resign
	at  time.Time
	err error
}

// awaitNext waits for the next leader, at most 30 s (the timer is made
// before the hand-off starts, so that it is not on its path).
func awaitNext(next <-chan led, timeout *time.Timer) (led, error) {
	defer timeout.Stop()
	select {
	case w := <-next:
		return w, w.err
	case <-timeout.C:
		return led{}, fmt.Errorf("the next leader did not lead within 30 s")
	}
}

// queueNext starts the next candidate's Campaign and gives it
// handoffQueue to queue.
func queueNext(ctx context.Context, e *election.Elector, key string) <-chan led {
	next := make(chan led, 1)
	go func() {
		t, err := e.Campaign(ctx, key, "next")
		next <- led{t, time.Now(), err}
	}()
	time.Sleep(handoffQueue)
	return next
}

// resignHandoff: a leader with no work to stop resigns, with the next
// candidate queued in Campaign; the time from Resign to that Campaign
// returning. Not a floor for the runner, which must stop its Lead before
// it resigns (so must a hand-written leader): the other two rows' excess
// over it is mostly that, a wake-up of the leader's goroutine.
func resignHandoff(ctx context.Context, e *election.Elector, key string) (time.Duration, error) {
	leader, err := e.Campaign(ctx, key, "leader")
	if err != nil {
		return 0, err
	}
	next := queueNext(ctx, e, key)
	timeout := time.NewTimer(30 * time.Second)
	start := time.Now()
	if err := leader.Resign(ctx); err != nil {
		return 0, err
	}
	w, err := awaitNext(next, timeout)
	if err != nil {
		return 0, err
	}
	return w.at.Sub(start), w.t.Resign(ctx)
}

// A candidate in a hand-off row: run starts it campaigning for key as
// value; started is told when it leads (or its campaign's error); cancel
// shuts it down, and done has its end.
type candidate func(ctx context.Context, key, value string, started chan<- led) (cancel context.CancelFunc, done <-chan error)

// handoff: a leader is shut down with the next candidate queued; the time
// from the shutdown to the next one leading (its work starting).
func handoff(ctx context.Context, run candidate, key string) (time.Duration, error) {
	ledFirst, ledNext := make(chan led, 1), make(chan led, 1)
	stopLeader, leaderDone := run(ctx, key, "leader", ledFirst)
	defer stopLeader()
	if w := <-ledFirst; w.err != nil {
		return 0, w.err
	}
	stopNext, nextDone := run(ctx, key, "next", ledNext)
	defer func() {
		stopNext()
		<-nextDone
	}()
	time.Sleep(handoffQueue)
	timeout := time.NewTimer(30 * time.Second)
	start := time.Now()
	stopLeader()
	w, err := awaitNext(ledNext, timeout)
	if err != nil {
		return 0, err
	}
	if err := <-leaderDone; err != nil {
		return 0, err
	}
	return w.at.Sub(start), nil
}

// byHand is the leader loop a service writes with Campaign and Resign, as
// safe as Run: the leader works under a context that ends with ctx (its
// shutdown) or with its term (a loss), and resigns only once its work has
// returned, so that it never acts after its successor leads.
func byHand(e *election.Elector) candidate {
	return func(ctx context.Context, key, value string, started chan<- led) (context.CancelFunc, <-chan error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			t, err := e.Campaign(ctx, key, value)
			if err != nil {
				started <- led{err: err}
				done <- err
				return
			}
			wctx, stopWork := context.WithCancel(ctx)
			unwatch := context.AfterFunc(t.Context(), stopWork)
			started <- led{at: time.Now()}
			work(wctx)
			unwatch()
			stopWork()
			done <- t.Resign(context.WithoutCancel(ctx))
		}()
		return cancel, done
	}
}

// runner is the same candidate with election.Run.
func runner(e *election.Elector) candidate {
	return func(ctx context.Context, key, value string, started chan<- led) (context.CancelFunc, <-chan error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, key, value, func(ctx context.Context, _ *election.Term) error {
				started <- led{at: time.Now()}
				work(ctx)
				return nil
			})
		}()
		return cancel, done
	}
}

// BenchmarkCompareRunnerHandoff: see the package documentation.
func BenchmarkCompareRunnerHandoff(b *testing.B) {
	var rows []benchutil.Timed
	for _, be := range backends(b) {
		lc, err := lease.NewClient(be.be)
		if err != nil {
			b.Fatal(err)
		}
		e, err := election.New(lc, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		prefix := "handoff/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/" + be.name + "/"
		rows = append(rows,
			benchutil.Timed{Name: "resign-" + be.name, Run: func(ctx context.Context, r int) (time.Duration, error) {
				return resignHandoff(ctx, e, prefix+"resign/"+strconv.Itoa(r))
			}},
			benchutil.Timed{Name: "campaign-" + be.name, Run: func(ctx context.Context, r int) (time.Duration, error) {
				return handoff(ctx, byHand(e), prefix+"campaign/"+strconv.Itoa(r))
			}},
			benchutil.Timed{Name: "runner-" + be.name, Run: func(ctx context.Context, r int) (time.Duration, error) {
				return handoff(ctx, runner(e), prefix+"runner/"+strconv.Itoa(r))
			}})
	}
	b.Run("c=1/interleaved", func(b *testing.B) {
		benchutil.InterleaveRounds(b, context.Background(), handoffRounds, rows)
	})
}
