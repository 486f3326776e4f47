package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/leasehttp"
)

// BenchmarkCompareBolt measures one acquire+release pair on distinct keys
// per client, with fsync on, at 1 and 32 clients:
//
//   - bbolt-update-pair (baseline): two raw db.Update calls, the physical
//     limit of two durable commits when every caller commits alone;
//   - bbolt-batch-default: a naive lease pair on db.Batch with its defaults,
//     whose 10 ms MaxBatchDelay makes a lone client crawl (ANCHORS.md);
//   - boltstore: Acquire and Release through the store's commit loop.
func BenchmarkCompareBolt(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d", clients), func(b *testing.B) {
			b.Run("bbolt-update-pair", func(b *testing.B) {
				db, keys := benchDB(b, clients)
				benchutil.Run(b, clients, func(w, _ int) error {
					if err := db.Update(func(tx *bolt.Tx) error {
						return tx.Bucket(benchBucket).Put(keys[w], benchValue)
					}); err != nil {
						return err
					}
					return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(benchBucket).Delete(keys[w]) })
				})
			})
			b.Run("bbolt-batch-default", func(b *testing.B) {
				db, keys := benchDB(b, clients)
				errHeld := errors.New("held")
				benchutil.Run(b, clients, func(w, _ int) error {
					if err := db.Batch(func(tx *bolt.Tx) error {
						bk := tx.Bucket(benchBucket)
						if bk.Get(keys[w]) != nil {
							return errHeld
						}
						return bk.Put(keys[w], benchValue)
					}); err != nil {
						return err
					}
					return db.Batch(func(tx *bolt.Tx) error { return tx.Bucket(benchBucket).Delete(keys[w]) })
				})
			})
			b.Run("boltstore", func(b *testing.B) {
				s, err := boltstore.Open(filepath.Join(b.TempDir(), "lease.db"))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				keys := make([]string, clients)
				for i := range keys {
					keys[i] = fmt.Sprintf("bench/%d", i)
				}
				ctx := context.Background()
				benchutil.Run(b, clients, func(w, _ int) error {
					l, err := s.Acquire(ctx, keys[w], "bench", time.Minute)
					if err != nil {
						return err
					}
					return s.Release(ctx, l)
				})
			})
		})
	}
}

var (
	benchBucket = []byte("leases")
	// benchValue is the size of a boltstore lease record with a short owner.
	benchValue = make([]byte, 48)
)

func benchDB(b *testing.B, clients int) (*bolt.DB, [][]byte) {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(benchBucket); return err }); err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, clients)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "bench/%d", i)
	}
	return db, keys
}

// BenchmarkCompareBoltLog measures what boltstore's log gains: one
// acquire+release pair on distinct keys per client, at 1 and 32 clients,
// interleaved (benchutil.Interleave) so that both rows meet the same
// moments of the disk:
//
//   - bbolt-only (baseline): the store without its log
//     (WithoutLogForBench), each batch made durable by committing the
//     bbolt transaction, with the same commit loop and group commit;
//   - boltstore: the store as it is, each batch made durable by one log
//     record and one fdatasync, and checkpointed into bbolt now and then.
//
// Each row also reports pairs/batch: pairs per batch made durable, which is
// pairs per fdatasync with the log and per two without (bbolt's commit).
func BenchmarkCompareBoltLog(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			benchLog(b, clients, func(b *testing.B, s *boltstore.Store) func(context.Context, string) error {
				return func(ctx context.Context, key string) error {
					l, err := s.Acquire(ctx, key, "bench", time.Minute)
					if err != nil {
						return err
					}
					return s.Release(ctx, l)
				}
			}, "bbolt-only", "boltstore")
		})
	}
}

// BenchmarkCompareBoltLogServe is BenchmarkCompareBoltLog through lease
// serve's HTTP stack: leasehttp's server over each store, on a loopback
// socket, and its client. serve-bolt-nolog is the store without its log,
// serve-bolt the store as it is.
func BenchmarkCompareBoltLogServe(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			benchLog(b, clients, func(b *testing.B, s *boltstore.Store) func(context.Context, string) error {
				c := serveStore(b, s)
				return func(ctx context.Context, key string) error {
					l, err := c.Acquire(ctx, key, "bench", time.Minute)
					if err != nil {
						return err
					}
					return c.Release(ctx, l)
				}
			}, "serve-bolt-nolog", "serve-bolt")
		})
	}
}

// benchLog interleaves pairs, made by pairOn, on a store without its log
// (row noLog) and one with it (row withLog), and reports each row's
// pairs/batch.
func benchLog(b *testing.B, clients int, pairOn func(*testing.B, *boltstore.Store) func(context.Context, string) error, noLog, withLog string) {
	ctx := context.Background()
	keys := make([]string, clients)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/%d", i)
	}
	type row struct {
		name  string
		s     *boltstore.Store
		pairs atomic.Uint64
	}
	rows := []*row{{name: noLog}, {name: withLog}}
	impls := make([]benchutil.Impl, len(rows))
	for i, r := range rows {
		var opts []boltstore.Option
		if r.name == noLog {
			opts = append(opts, boltstore.WithoutLogForBench())
		}
		var err error
		if r.s, err = boltstore.Open(filepath.Join(b.TempDir(), "lease.db"), opts...); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := r.s.Close(); err != nil {
				b.Error(err)
			}
		})
		pair := pairOn(b, r.s)
		impls[i] = benchutil.Impl{Name: r.name, Op: func(w int) error {
			r.pairs.Add(1)
			return pair(ctx, keys[w])
		}}
	}
	before := make([]uint64, len(rows))
	for i, r := range rows {
		before[i] = boltstore.Commits(r.s)
	}
	benchutil.Interleave(b, clients, impls)
	for i, r := range rows {
		if batches := boltstore.Commits(r.s) - before[i]; batches > 0 {
			b.ReportMetric(float64(r.pairs.Load())/float64(batches), r.name+":pairs/batch")
		}
	}
}

// serveStore starts leasehttp's server over s, as lease serve runs it,
// and returns a client of it; both stop before s is closed.
func serveStore(b *testing.B, s lease.Backend) *leasehttp.Client {
	b.Helper()
	api, err := leasehttp.NewServer(s, leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(api)
	c, err := leasehttp.NewClient(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = api.Close()
		srv.Close()
	})
	return c
}
