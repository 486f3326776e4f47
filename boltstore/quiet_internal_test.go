package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

var quietStart = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// openQuiet opens path on clk, its records kept in the log (logAlone), with
// opts.
func openQuiet(t *testing.T, path string, clk *fakeclock.Clock, opts ...Option) *Store {
	t.Helper()
	s, err := Open(path, append([]Option{WithClock(clk), logAlone}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestQuietRenewalsSkipTheLog: a renewal that keeps or shortens its
// lease's TTL writes no log record and waits for no fdatasync, but for
// the mark, once a quietWindow; one that lengthens it is logged.
func TestQuietRenewalsSkipTheLog(t *testing.T) {
	clk := fakeclock.New(quietStart)
	s := openQuiet(t, filepath.Join(t.TempDir(), "lease.db"), clk)
	defer s.Close()
	ctx := context.Background()
	l, err := s.Acquire(ctx, "k", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	renew := func(ttl time.Duration, wantCommits uint64, what string) {
		t.Helper()
		before := s.commits.Load()
		if l, err = s.Renew(ctx, l, ttl); err != nil {
			t.Fatal(err)
		}
		if got := s.commits.Load() - before; got != wantCommits {
			t.Errorf("%s: %d log records written, want %d", what, got, wantCommits)
		}
	}
	renew(10*time.Second, 1, "the first quiet renewal (the mark)")
	for range 5 {
		renew(10*time.Second, 0, "a quiet renewal within the mark")
	}
	clk.Advance(quietWindow / 2)
	renew(10*time.Second, 0, "a quiet renewal half a window later")
	clk.Advance(quietWindow)
	renew(10*time.Second, 1, "a quiet renewal past the mark (a new mark)")
	renew(20*time.Second, 1, "a renewal that lengthens the TTL")
	renew(5*time.Second, 0, "a renewal that shortens the TTL")
	renew(10*time.Second, 1, "a renewal that lengthens it again")
	if n := s.checkpoints.Load(); n != 0 {
		t.Fatalf("%d checkpoints: this test counts the log's records alone", n)
	}
}

// quietCrash acquires two leases on a store at path, renews one quietly
// three seconds later, and crashes the store (no last checkpoint). It
// returns the renewed lease, as answered, and the other, never renewed
// and expired by then.
func quietCrash(t *testing.T, path string, clk *fakeclock.Clock) (renewed, expired lease.Lease) {
	t.Helper()
	s := openQuiet(t, path, clk)
	ctx := context.Background()
	l, err := s.Acquire(ctx, "renewed", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if expired, err = s.Acquire(ctx, "expired", "o", time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if renewed, err = s.Renew(ctx, l, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	return renewed, expired
}

// TestQuietRenewalKeptAfterCrash: after a crash that lost a quiet
// renewal, Open keeps its lease until at least the expiry the renewal
// answered (the mark's until + TTL), and leaves a lease that had expired
// before the mark's since expired. The negative control opens the same
// files without the grace and finds the promise broken.
func TestQuietRenewalKeptAfterCrash(t *testing.T) {
	for _, grace := range []bool{true, false} {
		name := map[bool]string{true: "grace", false: "no grace (negative control)"}[grace]
		t.Run(name, func(t *testing.T) {
			clk := fakeclock.New(quietStart)
			path := filepath.Join(t.TempDir(), "lease.db")
			renewed, expired := quietCrash(t, path, clk)
			var opts []Option
			if !grace {
				opts = append(opts, WithoutQuietGraceForTest())
			}
			s := openQuiet(t, path, clk, opts...)
			defer s.Close()
			ctx := context.Background()
			got, err := s.Get(ctx, renewed.Key)
			if err != nil {
				t.Fatal(err)
			}
			broken := got.Expires.Before(renewed.Expires)
			if broken != !grace {
				t.Errorf("after the crash %s expires at %v; its renewal answered %v (promise broken: %v, want %v)",
					renewed.Key, got.Expires.Sub(quietStart), renewed.Expires.Sub(quietStart), broken, !grace)
			}
			if grace {
				if want := quietStart.Add(3*time.Second + quietWindow + 10*time.Second); !got.Expires.Equal(want) {
					t.Errorf("%s kept until %v, want the mark's until + TTL, %v", renewed.Key, got.Expires.Sub(quietStart), want.Sub(quietStart))
				}
				if _, err := s.Acquire(ctx, renewed.Key, "thief", time.Second); !errors.Is(err, lease.ErrHeld) {
					t.Errorf("a thief acquired %s after the crash, before the holder's expiry: %v", renewed.Key, err)
				}
			}
			if _, err := s.Get(ctx, expired.Key); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("%s, expired before the mark, came back after the crash: %v", expired.Key, err)
			}
		})
	}
}

// TestCleanCloseLeavesNoMark: Close's checkpoint writes the quiet
// renewals to the file and deletes the mark, so a clean restart keeps
// each lease exactly as renewed.
func TestCleanCloseLeavesNoMark(t *testing.T) {
	clk := fakeclock.New(quietStart)
	path := filepath.Join(t.TempDir(), "lease.db")
	s := openQuiet(t, path, clk)
	ctx := context.Background()
	l, err := s.Acquire(ctx, "k", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if l, err = s.Renew(ctx, l, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openQuiet(t, path, clk)
	defer s.Close()
	got, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Expires.Equal(l.Expires) {
		t.Errorf("after a clean restart k expires at %v, want %v as renewed", got.Expires.Sub(quietStart), l.Expires.Sub(quietStart))
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta).Get(keyQuiet) != nil {
			t.Error("the quiet mark outlived a clean restart")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
