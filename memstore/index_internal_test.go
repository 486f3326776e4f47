package memstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/leasehq/lease"
)

// TestHashCollision puts two keys under one hash, as a 64-bit collision
// would, and checks that each keeps its own lease and that a sweep dropping
// one leaves the other.
func TestHashCollision(t *testing.T) {
	s := newStore(t)
	const h = 42
	a := s.idx.insert(h, "a", s.now())
	b := s.idx.insert(h, "b", s.now())
	for _, e := range []*entry{a, b} {
		e.mu.Lock()
	}
	s.grantLocked(a, "owner-a", time.Minute, s.now())
	s.grantLocked(b, "owner-b", 10*time.Millisecond, s.now())
	la, lb := s.lease(a), s.lease(b)
	for _, e := range []*entry{a, b} {
		e.mu.Unlock()
	}
	if got := s.idx.lookup(h, "a"); got != a {
		t.Errorf("lookup(a) = %p, want %p", got, a)
	}
	if got := s.idx.lookup(h, "b"); got != b {
		t.Errorf("lookup(b) = %p, want %p", got, b)
	}
	if got := s.idx.lookup(h, "c"); got != nil {
		t.Errorf("lookup(c) = %p, want nil", got)
	}
	if la.Key != "a" || lb.Key != "b" || la.Token == lb.Token && la.ID == lb.ID {
		t.Errorf("leases a %+v and b %+v are not distinct", la, lb)
	}
	s.idx.mu.Lock()
	s.idx.rebuild(s.now()+time.Second, true) // b has expired by then, a has not
	s.idx.mu.Unlock()
	if got := s.idx.lookup(h, "a"); got != a {
		t.Errorf("after sweep lookup(a) = %p, want %p", got, a)
	}
	if got := s.idx.lookup(h, "b"); got != nil {
		t.Errorf("after sweep lookup(b) = %p, want nil (expired, nobody waiting)", got)
	}
	if !b.dead || a.dead {
		t.Errorf("after sweep a.dead = %v, b.dead = %v; want false, true", a.dead, b.dead)
	}
	// A goroutine still holding the dropped entry finds the key's new one.
	if e := s.locked(h, "b", true); e == b {
		t.Error("locked returned the dropped entry")
	} else {
		if e.counter < lb.Token {
			t.Errorf("new entry of b starts at token %d, below b's last %d", e.counter, lb.Token)
		}
		e.mu.Unlock()
	}
}

// TestSweepKeepsTokensRising churns through more keys than the index keeps
// before sweeping, then checks that memory stays bounded and that a key
// whose entry was dropped still gets a larger token (I1).
func TestSweepKeepsTokensRising(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	first, err := s.Acquire(ctx, "k/0", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	const keys = 3 * minSweep
	held := make([]lease.Lease, 0, 100)
	for i := 1; i < keys; i++ {
		l, err := s.Acquire(ctx, fmt.Sprintf("k/%d", i), "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if i%(keys/100) == 0 {
			held = append(held, l) // some stay held through the sweeps
			continue
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	s.idx.mu.Lock()
	n, slots := s.idx.n, len(s.idx.tab.Load().slots)
	s.idx.mu.Unlock()
	// Each sweep drops every released key: at most minSweep entries remain.
	if n > minSweep || slots > 4*minSweep {
		t.Errorf("%d entries in %d slots kept for %d keys, want at most %d", n, slots, keys, minSweep)
	}
	for _, l := range held {
		if got, err := s.Get(ctx, l.Key); err != nil || got.Token != l.Token {
			t.Fatalf("held lease %s after sweeps: %+v, %v", l.Key, got, err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatalf("release of %s after sweeps: %v", l.Key, err)
		}
	}
	again, err := s.Acquire(ctx, "k/0", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token <= first.Token {
		t.Errorf("token after churn %d, not above the first %d", again.Token, first.Token)
	}
}

// TestSweepRacesWithUse runs sweeps (churning through more keys than the
// index keeps) while other goroutines fight over a few hot keys, so that
// lookups meet entries a sweep has just dropped. Per hot key, at most one
// goroutine may hold it at a time and tokens must rise in grant order.
func TestSweepRacesWithUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	const hot = 8
	var (
		mu     sync.Mutex
		holder [hot]bool
		last   [hot]lease.Token
		stop   atomic.Bool
		wg     sync.WaitGroup
		grants atomic.Int64
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				k := (i + w) % hot
				l, err := s.Acquire(ctx, fmt.Sprintf("hot/%d", k), fmt.Sprintf("w%d", w), time.Minute)
				if errors.Is(err, lease.ErrHeld) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if holder[k] || l.Token <= last[k] {
					t.Errorf("hot/%d: granted token %d while held=%v, last token %d", k, l.Token, holder[k], last[k])
				}
				holder[k], last[k] = true, l.Token
				mu.Unlock()
				grants.Add(1)
				mu.Lock()
				holder[k] = false
				mu.Unlock()
				if err := s.Release(ctx, l); err != nil {
					t.Errorf("release hot/%d: %v", k, err)
					return
				}
			}
		}()
	}
	// Churn: each new key is an insert; every minSweep of them a sweep.
	for i := range 3 * minSweep {
		l, err := s.Acquire(ctx, fmt.Sprintf("cold/%d", i), "c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if grants.Load() == 0 {
		t.Fatal("no hot key was ever granted")
	}
}

// TestByKeyAddr: a lease as Acquire returned it leads back to its entry by
// its key's address; a key with the same bytes elsewhere does not, and is
// released through the table. An entry a sweep drops is forgotten.
func TestByKeyAddr(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	l, err := s.Acquire(ctx, "jobs/1234567", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e := s.idx.lookup(s.hash(l.Key), l.Key)
	if got := s.idx.byKeyAddr(l.Key); got != e {
		t.Fatalf("byKeyAddr(the lease's key) = %p, want its entry %p", got, e)
	}
	copied := l
	copied.Key = strings.Clone(l.Key)
	if got := s.idx.byKeyAddr(copied.Key); got != nil {
		t.Fatalf("byKeyAddr(a copy of the key) = %p, want nil", got)
	}
	if err := s.Release(ctx, copied); err != nil {
		t.Fatalf("Release with a copy of the key: %v", err)
	}
	s.idx.mu.Lock()
	s.idx.rebuild(s.now(), true)
	s.idx.mu.Unlock()
	if !e.dead {
		t.Fatal("the released entry was not swept")
	}
	if got := s.idx.byKeyAddr(l.Key); got != nil {
		t.Errorf("byKeyAddr after a sweep dropped the entry = %p, want nil", got)
	}
}

// TestByKeyAddrDeadEntry: a Release that finds a dropped entry by its key's
// address (found just before the sweep forgot it) looks the key up again
// rather than release a lease the sweep has ended.
func TestByKeyAddrDeadEntry(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	l, err := s.Acquire(ctx, "jobs/1234567", "w", lease.MinTTL)
	if err != nil {
		t.Fatal(err)
	}
	e := s.idx.byKeyAddr(l.Key)
	s.idx.mu.Lock()
	s.idx.rebuild(s.now()+time.Second, true) // l has expired by then
	s.idx.mu.Unlock()
	if !e.dead {
		t.Fatal("the expired entry was not swept")
	}
	s.idx.byAddr[addrSlot(unsafe.StringData(l.Key))].Store(e) // as if read before the sweep
	if err := s.Release(ctx, l); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Release of a lease whose entry was swept = %v, want ErrNotHeld", err)
	}
}
