package scalebench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// BenchmarkCompareScaleBoltDisk: lease.db's size when a million distinct
// keys (LEASE_SCALE_LEASES) have each been used once (issue 28's point 6).
// released: each acquired and released at once; the file after Close.
// expired: each acquired and left to expire; the file after Close once the
// store has been idle past sweepGrace and its sweeps (the clock is a fake
// one, moved on), with the records left; then a second million acquired
// and released, to show the pages freed are used again. The metric
// disk-B/key-used is the file over the keys ever used; records-left counts
// the lease records still in the file.
func BenchmarkCompareScaleBoltDisk(b *testing.B) {
	n := idleLeases(b)
	size := func(b *testing.B, path string) (float64, int) {
		b.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		records := 0
		_ = db.View(func(tx *bolt.Tx) error {
			records = tx.Bucket([]byte("leases")).Stats().KeyN
			return nil
		})
		return float64(fi.Size()), records
	}
	b.Run("c=1/released", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "lease.db")
		s, err := boltstore.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := useOnce(s, n, "released", lease.MaxTTL, true); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
		}
		disk, records := size(b, path)
		b.ReportMetric(disk, "disk-B")
		b.ReportMetric(disk/float64(n), "disk-B/key-used")
		b.ReportMetric(float64(records), "records-left")
	})
	b.Run("c=1/expired-swept", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "lease.db")
		clock := fakeclock.New(time.Now())
		s, err := boltstore.Open(path, boltstore.WithClock(clock))
		if err != nil {
			b.Fatal(err)
		}
		if err := useOnce(s, n, "expired", time.Second, false); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		peak, _ := size(b, path)
		if s, err = boltstore.Open(path, boltstore.WithClock(clock)); err != nil {
			b.Fatal(err)
		}
		clock.Advance(time.Second + 2*time.Minute) // past every expiry and the sweep's grace
		// An idle store sweeps up to 16 × 4,096 records a second.
		time.Sleep(time.Duration(n/(16*4096)+3) * time.Second)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		disk, records := size(b, path)
		s, err = boltstore.Open(path, boltstore.WithClock(clock))
		if err != nil {
			b.Fatal(err)
		}
		if err := useOnce(s, n, "again", lease.MaxTTL, true); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		again, _ := size(b, path)
		for b.Loop() {
		}
		b.ReportMetric(peak, "held-disk-B")
		b.ReportMetric(disk, "disk-B")
		b.ReportMetric(float64(records), "records-left")
		b.ReportMetric(again, "after-1M-more-disk-B")
	})
}

// useOnce acquires n distinct keys under prefix on s, each for ttl,
// releasing each at once if release.
func useOnce(s *boltstore.Store, n int, prefix string, ttl time.Duration, release bool) error {
	return acquireAll(s, n, func(i int) string { return fmt.Sprintf("%s/%07d", prefix, i) }, ttl, release)
}
