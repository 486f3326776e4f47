package electionbench_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// The crash rows' TTL is the least etcd grants with etcdtest's election
// timeout (ceil(1.5 × 100 ms) = 1 s), and 10 s in the group ElectionCrash10,
// where a fixed overhead would weigh less and one that grows with the TTL
// more. Each round runs crashInstances hand-offs of every row
// at once, instance i of each row starting at the same random offset in
// etcd's 500 ms expiry tick (its lessor revokes expired leases twice a
// second), so that the rows meet the tick at the same phases.
const (
	crashRounds    = 6
	crashInstances = 4
	rttPerRound    = 50 // Put round trips timed between rounds: the RTT floor
)

// crash is one row: it elects a leader whose process stops at once, and
// returns the time from the leader's first request (its lease's grant) to
// the next leader's Campaign returning.
type crash struct {
	name string
	run  func(ctx context.Context, key string) (time.Duration, error)
}

// BenchmarkCompareElectionCrash measures a crashed leader's hand-off, the
// rows side by side on one embedded etcd:
//
//   - expiry-floor: an etcd lease of the TTL granted, a key put on it and
//     never kept alive, and the key's deletion (etcd expiring the lease)
//     reaching a watcher that was waiting for it: the least any election
//     on etcd must wait for;
//   - etcd-election: concurrency.Election; the leader's session (the TTL)
//     on a client of its own, closed right after Campaign returned (the
//     process stopped: keep-alives end, the lease is not revoked); the next
//     candidate on a session of its own;
//   - election-etcdstore: package election on etcdstore, the same TTL; the
//     leader's Store on a client of its own, closed right after Campaign
//     returned (its renewals fail, it never releases); the next candidate
//     on a Store of its own.
//
// Each row's hand-off counts from just before the leader's first request.
// put-rtt is a Put round trip on the same etcd, timed between rounds: the
// unit of over-ttl-rtt, each row's p50 beyond the TTL in round trips.
func BenchmarkCompareElectionCrash(b *testing.B) { electionCrash(b, 1) }

// BenchmarkCompareElectionCrash10 is BenchmarkCompareElectionCrash with a
// TTL of 10 s.
func BenchmarkCompareElectionCrash10(b *testing.B) { electionCrash(b, 10) }

// electionCrash runs the crash rows with a TTL of crashTTL seconds.
func electionCrash(b *testing.B, crashTTL int64) {
	eps := etcdtest.Start(b)
	ctx := context.Background()
	pfx := uniquePrefix()
	cli, watchCli := etcdtest.NewClient(b, eps), etcdtest.NewClient(b, eps)
	storePfx := pfx + "store/"
	next := newElector(b, etcdtest.NewClient(b, eps), storePfx, time.Duration(crashTTL)*time.Second)
	// process returns a client to stop like a process: closed without
	// revoking its leases.
	process := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}

	rows := []crash{
		{"expiry-floor", func(ctx context.Context, key string) (time.Duration, error) {
			k := pfx + "floor/" + key
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wch := watchCli.Watch(wctx, k, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
			if wr := <-wch; !wr.Created {
				return 0, fmt.Errorf("watch of %q not created: %v", k, wr.Err())
			}
			t0 := time.Now()
			g, err := cli.Grant(ctx, crashTTL)
			if err != nil {
				return 0, err
			}
			if _, err := cli.Put(ctx, k, "L", clientv3.WithLease(g.ID)); err != nil {
				return 0, err
			}
			for wr := range wch {
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						return time.Since(t0), nil
					}
				}
			}
			return 0, fmt.Errorf("watch of %q ended: %v", k, ctx.Err())
		}},
		{"etcd-election", func(ctx context.Context, key string) (time.Duration, error) {
			ek := pfx + "election/" + key + "/"
			sessF, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
			if err != nil {
				return 0, err
			}
			defer sessF.Close()
			leaderCli, err := process()
			if err != nil {
				return 0, err
			}
			t0 := time.Now()
			sessL, err := concurrency.NewSession(leaderCli, concurrency.WithTTL(int(crashTTL)))
			if err != nil {
				leaderCli.Close()
				return 0, err
			}
			if err := concurrency.NewElection(sessL, ek).Campaign(ctx, "L"); err != nil {
				leaderCli.Close()
				return 0, err
			}
			done := make(chan won, 1)
			nextLeader := concurrency.NewElection(sessF, ek)
			go func() {
				err := nextLeader.Campaign(ctx, "F")
				done <- won{time.Now(), err}
			}()
			leaderCli.Close() // the crash
			w := <-done
			if w.err != nil {
				return 0, w.err
			}
			return w.at.Sub(t0), nextLeader.Resign(ctx)
		}},
		{"election-etcdstore", func(ctx context.Context, key string) (time.Duration, error) {
			leaderCli, err := process()
			if err != nil {
				return 0, err
			}
			leader := newElectorOn(leaderCli, storePfx, time.Duration(crashTTL)*time.Second)
			if leader.err != nil {
				leaderCli.Close()
				return 0, leader.err
			}
			defer leader.store.Close()
			t0 := time.Now()
			term, err := leader.el.Campaign(ctx, key, "L")
			if err != nil {
				leaderCli.Close()
				return 0, err
			}
			done := make(chan won, 1)
			var nextTerm interface{ Resign(context.Context) error }
			go func() {
				t, err := next.Campaign(ctx, key, "F")
				if err == nil {
					nextTerm = t
				}
				done <- won{time.Now(), err}
			}()
			leaderCli.Close() // the crash
			w := <-done
			<-term.Done() // lost at its deadline, before the next term began
			if w.err != nil {
				return 0, w.err
			}
			return w.at.Sub(t0), nextTerm.Resign(ctx)
		}},
	}

	b.Run(fmt.Sprintf("c=%d/interleaved", 1), func(b *testing.B) {
		rounds := max(b.N, crashRounds)
		lat := make([][]time.Duration, len(rows))
		var rtt []time.Duration
		b.ResetTimer()
		start := time.Now()
		for r := range rounds {
			for range rttPerRound {
				t0 := time.Now()
				if _, err := cli.Put(ctx, pfx+"rtt", "x"); err != nil {
					b.Fatal(err)
				}
				rtt = append(rtt, time.Since(t0))
			}
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				first error
			)
			for j := range crashInstances {
				offset := rand.N(500 * time.Millisecond)
				for i, row := range rows {
					wg.Go(func() {
						time.Sleep(offset)
						d, err := row.run(ctx, fmt.Sprintf("crash-%d-%d", r, j))
						mu.Lock()
						defer mu.Unlock()
						if err != nil && first == nil {
							first = fmt.Errorf("%s, round %d: %w", row.name, r, err)
						}
						lat[i] = append(lat[i], d)
					})
				}
			}
			wg.Wait()
			if first != nil {
				b.Fatal(first)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		unit := benchutil.Percentile(rtt, 50)
		out := []benchutil.Row{{Name: "put-rtt", Latencies: rtt}}
		for i, row := range rows {
			over := benchutil.Percentile(lat[i], 50) - time.Duration(crashTTL)*time.Second
			out = append(out, benchutil.Row{Name: row.name, Latencies: lat[i], Extra: map[string]float64{
				"over-ttl-ms":  float64(over) / 1e6,
				"over-ttl-rtt": float64(over) / float64(unit),
			}})
		}
		benchutil.ReportRows(b, elapsed/time.Duration(rounds), out)
	})
}
