package boltstore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// TestSweepFoldsExpired: a lease expired sweepGrace ago leaves the file,
// its token folded into the floor, whether or not the store has writes to
// checkpoint; a lease still held, or expired more recently, stays; and
// the swept key's next token is above its last (I1).
func TestSweepFoldsExpired(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(time.Now())
	s, err := Open(filepath.Join(t.TempDir(), "lease.db"), WithClock(clock),
		func(c *config) error { c.checkpointEvery = 10 * time.Millisecond; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var gone []lease.Lease
	for i := range 3 {
		l, err := s.Acquire(ctx, fmt.Sprintf("gone/%d", i), "o", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		gone = append(gone, l)
	}
	held, err := s.Acquire(ctx, "held", "o", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	recent, err := s.Acquire(ctx, "recent", "o", sweepGrace)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second + sweepGrace) // "recent" expired just now
	stored := func() map[string]bool {
		out := map[string]bool{}
		if _, err := s.read(ctx, func(leases *bolt.Bucket) error {
			return leases.ForEach(func(k, _ []byte) error { out[string(k)] = true; return nil })
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	poll.Until(t, 10*time.Second, func() error {
		if got := stored(); got["gone/0"] {
			return fmt.Errorf("expired leases still stored: %v", got)
		}
		return nil
	})
	if got := stored(); len(got) != 2 || !got["held"] || !got["recent"] {
		t.Fatalf("stored after a sweep: %v; want held and recent", got)
	}
	if s.floor < uint64(gone[2].Token) {
		t.Fatalf("floor %d after the sweep; %d was swept", s.floor, gone[2].Token)
	}
	for _, l := range gone {
		n, err := s.Acquire(ctx, l.Key, "o", time.Minute)
		if err != nil || n.Token <= held.Token || n.Token <= recent.Token || n.Token <= l.Token {
			t.Fatalf("Acquire(%s) after the sweep = %d, %v; want above %d", l.Key, n.Token, err, l.Token)
		}
	}
}
