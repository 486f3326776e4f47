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

// bareHandoff: a leader resigns with the next candidate queued in
// Campaign; the time from Resign to that Campaign returning.
func bareHandoff(ctx context.Context, e *election.Elector, key string) (time.Duration, error) {
	leader, err := e.Campaign(ctx, key, "leader")
	if err != nil {
		return 0, err
	}
	type won struct {
		t   *election.Term
		err error
	}
	next := make(chan won, 1)
	go func() {
		t, err := e.Campaign(ctx, key, "next")
		next <- won{t, err}
	}()
	time.Sleep(handoffQueue) // real time: a term of the real server, as a benchmark's hand-off has
	start := time.Now()
	if err := leader.Resign(ctx); err != nil {
		return 0, err
	}
	w := <-next
	d := time.Since(start)
	if w.err != nil {
		return 0, w.err
	}
	return d, w.t.Resign(ctx)
}

// runnerHandoff: a leader's runner is shut down with the next runner
// queued; the time from the shutdown to the next runner's lead starting.
func runnerHandoff(ctx context.Context, e *election.Elector, key string) (time.Duration, error) {
	hold := func(started chan<- time.Time) election.Lead {
		return func(ctx context.Context, _ *election.Term) error {
			started <- time.Now()
			<-ctx.Done()
			return nil
		}
	}
	run := func(value string, started chan time.Time) (context.CancelFunc, chan error) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx, key, value, hold(started)) }()
		return cancel, done
	}
	ledFirst, ledNext := make(chan time.Time, 1), make(chan time.Time, 1)
	stopLeader, leaderDone := run("leader", ledFirst)
	<-ledFirst
	stopNext, nextDone := run("next", ledNext)
	defer func() {
		stopNext()
		<-nextDone
	}()
	time.Sleep(handoffQueue) // real time: as above
	start := time.Now()
	stopLeader()
	select {
	case at := <-ledNext:
		if err := <-leaderDone; err != nil {
			return 0, err
		}
		return at.Sub(start), nil
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("the next runner did not lead within 30 s")
	}
}

// BenchmarkCompareRunnerHandoff: see the package documentation.
func BenchmarkCompareRunnerHandoff(b *testing.B) {
	var rows []benchutil.Timed
	for _, be := range backends(b) {
		e, err := election.New(be.be, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		prefix := "handoff/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/" + be.name + "/"
		rows = append(rows,
			benchutil.Timed{Name: "campaign-" + be.name, Run: func(ctx context.Context, r int) (time.Duration, error) {
				return bareHandoff(ctx, e, prefix+"bare/"+strconv.Itoa(r))
			}},
			benchutil.Timed{Name: "runner-" + be.name, Run: func(ctx context.Context, r int) (time.Duration, error) {
				return runnerHandoff(ctx, e, prefix+"runner/"+strconv.Itoa(r))
			}})
	}
	b.Run("c=1/interleaved", func(b *testing.B) {
		benchutil.InterleaveRounds(b, context.Background(), handoffRounds, rows)
	})
}
