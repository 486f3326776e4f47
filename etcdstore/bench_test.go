package etcdstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// BenchmarkCompareEtcd compares, on one embedded etcd node, with distinct
// keys per client:
//
//   - put-pair: Put then Delete of a key, the raw cost of two writes (the
//     baseline: the same number of round trips as a lock pair);
//   - mutex: concurrency.Mutex Lock+Unlock with one session per client,
//     reused (no token check on Unlock, no per-holder lease, no secret);
//   - etcdstore: Acquire+Release;
//   - bare-txns (one client): the two Txns etcdstore sends for the pair,
//     built once and sent straight through clientv3 (etcdstore.BareTxns):
//     etcd's share of etcdstore's pair, without the Store's own work.
//
// The rows are measured interleaved (benchutil.Interleave): the targets
// compare them within a few percent, which rows measured one after another,
// each in its own window of the disk's luck, cannot resolve.
func BenchmarkCompareEtcd(b *testing.B) {
	eps := etcdtest.Start(b)
	ctx := context.Background()
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			cli := etcdtest.NewClient(b, eps)
			pfx := uniquePrefix(b)
			mutexes := newBenchMutexes(b, eps, clients, func(w int) string { return fmt.Sprintf("%sm%d/", pfx, w) })
			s := newBenchStore(b, eps)
			impls := []benchutil.Impl{
				{Name: "put-pair", Op: func(w int) error {
					k := fmt.Sprintf("%sk%d", pfx, w)
					if _, err := cli.Put(ctx, k, "v"); err != nil {
						return err
					}
					_, err := cli.Delete(ctx, k)
					return err
				}},
				{Name: "mutex", Op: func(w int) error {
					if err := mutexes[w].Lock(ctx); err != nil {
						return err
					}
					return mutexes[w].Unlock(ctx)
				}},
				{Name: "etcdstore", Op: func(w int) error {
					l, err := s.Acquire(ctx, fmt.Sprintf("k%d", w), "bench", 10*time.Second)
					if err != nil {
						return err
					}
					return s.Release(ctx, l)
				}},
			}
			if clients == 1 {
				bare, err := etcdstore.BareTxns(ctx, newBenchStore(b, eps), "k0", "bench", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				impls = append(impls, benchutil.Impl{Name: "bare-txns", Op: func(int) error { return bare(ctx) }})
			}
			benchutil.Interleave(b, clients, impls)
		})
	}
}

// BenchmarkCompareEtcdOneKey: 32 clients queue for one key; one op is one
// acquisition and release, so ops/s is the rate at which the key changes
// hands. mutex: concurrency.Mutex Lock+Unlock, a session per client (its
// waiters watch the key ahead of them); etcdstore: AcquireWait (FIFO)
// and Release.
func BenchmarkCompareEtcdOneKey(b *testing.B) {
	eps := etcdtest.Start(b)
	ctx := context.Background()
	const clients = 32
	b.Run(fmt.Sprintf("c=%d/mutex", clients), func(b *testing.B) {
		key := uniquePrefix(b) + "one/"
		benchMutexes(b, eps, clients, func(int) string { return key })
	})
	b.Run(fmt.Sprintf("c=%d/etcdstore", clients), func(b *testing.B) {
		s := newBenchStore(b, eps)
		benchutil.Run(b, clients, func(int, int) error {
			l, err := s.AcquireWait(ctx, "one", "bench", 10*time.Second)
			if err != nil {
				return err
			}
			return s.Release(ctx, l)
		})
	})
}

// newBenchStore returns an etcdstore Store on a client of its own, under a
// prefix of its own, closed when b ends.
func newBenchStore(b *testing.B, eps []string) *etcdstore.Store {
	s, err := etcdstore.New(etcdtest.NewClient(b, eps), etcdstore.WithPrefix(uniquePrefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// newBenchMutexes returns clients concurrency.Mutexes, each on a session of
// its own (reused by every Lock), on the mutex prefix name(w).
func newBenchMutexes(b *testing.B, eps []string, clients int, name func(w int) string) []*concurrency.Mutex {
	cli := etcdtest.NewClient(b, eps)
	mutexes := make([]*concurrency.Mutex, clients)
	for w := range clients {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sess.Close() })
		mutexes[w] = concurrency.NewMutex(sess, name(w))
	}
	return mutexes
}

// benchMutexes runs Lock+Unlock pairs of concurrency.Mutex from clients
// goroutines, each with a Mutex of newBenchMutexes.
func benchMutexes(b *testing.B, eps []string, clients int, name func(w int) string) {
	ctx := context.Background()
	mutexes := newBenchMutexes(b, eps, clients, name)
	benchutil.Run(b, clients, func(w, _ int) error {
		if err := mutexes[w].Lock(ctx); err != nil {
			return err
		}
		return mutexes[w].Unlock(ctx)
	})
}
