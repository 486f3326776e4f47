package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/benchutil"
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
