package memstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestHashCollision puts two keys under one hash, as a 64-bit collision
// would, and checks that each keeps its own lease and that sweeping one
// leaves the other.
func TestHashCollision(t *testing.T) {
	s := New()
	sh := &s.shards[0].shard
	const h = 42
	sh.mu.Lock()
	a := sh.insert(h, "a", s.now())
	b := sh.insert(h, "b", s.now())
	s.grantLocked(sh, a, "owner-a", time.Minute, s.now())
	s.grantLocked(sh, b, "owner-b", 10*time.Millisecond, s.now())
	la, lb := a.l, b.l
	if got := sh.get(h, "a"); got != a {
		t.Errorf("get(a) = %p, want %p", got, a)
	}
	if got := sh.get(h, "b"); got != b {
		t.Errorf("get(b) = %p, want %p", got, b)
	}
	if got := sh.get(h, "c"); got != nil {
		t.Errorf("get(c) = %p, want nil", got)
	}
	if la.Key != "a" || lb.Key != "b" || la.Token == lb.Token || la.ID == lb.ID {
		t.Errorf("leases a %+v and b %+v are not distinct", la, lb)
	}
	sh.sweep(s.now() + time.Second) // b has expired by then, a has not
	if got := sh.get(h, "a"); got != a {
		t.Errorf("after sweep get(a) = %p, want %p", got, a)
	}
	if got := sh.get(h, "b"); got != nil {
		t.Errorf("after sweep get(b) = %p, want nil (expired, nobody waiting)", got)
	}
	sh.sweep(s.now() + 2*time.Minute)
	if _, ok := sh.m[h]; ok {
		t.Error("sweep left an empty chain in the map")
	}
	sh.mu.Unlock()
}

// TestSweepKeepsTokensRising churns through more keys than a sweep lets a
// shard keep, then checks that memory stays bounded and that a key whose
// entry was dropped still gets a larger token (I1).
func TestSweepKeepsTokensRising(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	first, err := s.Acquire(ctx, "k/0", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	const keys = 3000 * shardCount // about 3000 a shard: past the sweep threshold of 1024
	for i := 1; i < keys; i++ {
		l, err := s.Acquire(ctx, fmt.Sprintf("k/%d", i), "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i := range s.shards {
		total += len(s.shards[i].m)
	}
	// Nothing is held, so each sweep empties its shard: at most 1024 left.
	if limit := shardCount * 1024; total > limit {
		t.Errorf("%d entries kept for %d released keys, want at most %d", total, keys, limit)
	}
	again, err := s.Acquire(ctx, "k/0", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token <= first.Token {
		t.Errorf("token after churn %d, not above the first %d", again.Token, first.Token)
	}
}

// TestFastPathStillValidates checks that skipping validation for known keys
// and owners lets nothing malformed through.
func TestFastPathStillValidates(t *testing.T) {
	ctx := context.Background()
	s := New()
	l, err := s.Acquire(ctx, "job", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"bad owner on a known key", func() error { _, err := s.Acquire(ctx, "job", "bad\x00owner", time.Minute); return err }()},
		{"empty owner on a known key", func() error { _, err := s.Acquire(ctx, "job", "", time.Minute); return err }()},
		{"bad ttl on a known key", func() error { _, err := s.Acquire(ctx, "job", "w", time.Millisecond); return err }()},
		{"release with zero token", s.Release(ctx, lease.Lease{Key: "job", ID: l.ID})},
		{"release with zero id", s.Release(ctx, lease.Lease{Key: "job", Token: l.Token})},
		{"release with bad key", s.Release(ctx, lease.Lease{Key: "bad\x7fkey", Token: 1, ID: l.ID})},
		{"renew with zero id", func() error { _, err := s.Renew(ctx, lease.Lease{Key: "job", Token: l.Token}, time.Minute); return err }()},
	} {
		if !errors.Is(tc.err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, tc.err)
		}
	}
}

// TestPairDoesNotAllocate: once a key's entry exists, an acquire+release
// pair allocates nothing (issue 2's hot-path goal).
func TestPairDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	s := New()
	pair := func() {
		l, err := s.Acquire(ctx, "job", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	pair() // creates the entry
	if n := testing.AllocsPerRun(100, pair); n != 0 {
		t.Errorf("acquire+release allocates %v times, want 0", n)
	}
}

// TestIDsDistinct draws several batches of IDs: none is zero or repeated.
func TestIDsDistinct(t *testing.T) {
	var g idSource
	g.init()
	seen := make(map[lease.ID]bool)
	for range 5 * idBatch {
		id := g.next()
		if id.IsZero() || seen[id] {
			t.Fatalf("id %v is zero or repeated", id)
		}
		seen[id] = true
	}
	var h idSource
	h.init()
	if seen[h.next()] {
		t.Error("two sources made the same id: not seeded independently")
	}
}
