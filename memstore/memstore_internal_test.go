package memstore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// newStore is New for the package's own tests, which cannot import
// internal/testkit/memtest (it imports this package).
func newStore(tb testing.TB, opts ...Option) *Store {
	tb.Helper()
	s, err := New(opts...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return s
}

// TestNewRefusesNilClock: WithClock(nil) is a mistake, not a request for
// the real clock, and New says so.
func TestNewRefusesNilClock(t *testing.T) {
	if s, err := New(WithClock(nil)); !errors.Is(err, lease.ErrInvalid) || s != nil {
		t.Fatalf("New(WithClock(nil)) = %v, %v; want nil and ErrInvalid", s, err)
	}
}

// TestEntrySize: entries fill their size class (128 bytes, 128-aligned)
// exactly, so none shares a cache line with another.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 128 {
		t.Errorf("entry is %d bytes, want 128", n)
	}
}

// TestEntryKeyInline: a key that fits in the entry's spare room is kept
// there, so that a lookup comparing it reads no other cache line; a longer
// one is kept as given. Either way the entry and its leases carry the key.
func TestEntryKeyInline(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, key := range []string{"j", strings.Repeat("k", len(entry{}.inline)), strings.Repeat("l", len(entry{}.inline)+1)} {
		l, err := s.Acquire(ctx, key, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e := s.idx.lookup(s.hash(key), key)
		if e == nil || e.key != key || l.Key != key {
			t.Fatalf("key %q: entry %v, lease key %q", key, e, l.Key)
		}
		start := uintptr(unsafe.Pointer(e))
		p := uintptr(unsafe.Pointer(unsafe.StringData(e.key)))
		inside := p >= start && p < start+unsafe.Sizeof(*e)
		if want := len(key) <= len(e.inline); inside != want {
			t.Errorf("key of %d bytes inside its entry: %v, want %v", len(key), inside, want)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFastPathStillValidates checks that skipping validation for known keys
// and owners lets nothing malformed through.
func TestFastPathStillValidates(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
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

// TestAcquireValidatesOwnerOnFreshEntry: an entry another Acquire has just
// inserted (or made afresh after a sweep dropped the one it found) has no
// owner yet. An Acquire that finds it must still refuse an empty owner: the
// fast path may skip validating only an owner equal to a stored, validated
// one, and a fresh entry stores none.
func TestAcquireValidatesOwnerOnFreshEntry(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const k = "job"
	// What a concurrent Acquire(k, "w", …) does before it locks the entry.
	s.idx.insert(s.hash(k), k, s.now())
	l, err := s.Acquire(ctx, k, "", time.Minute)
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Acquire with an empty owner on a fresh entry = %+v, %v; want ErrInvalid", l, err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("the refused Acquire left the key held: Get err = %v", err)
	}
}

// waitQueued spins until key has n waiters. It polls state, not time.
func waitQueued(t *testing.T, s *Store, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if e := s.locked(s.hash(key), key, false); e != nil {
			got := e.waiting()
			e.mu.Unlock()
			if got == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never had %d waiters", key, n)
		}
		runtime.Gosched()
	}
}

// TestRenewShorterWakesWaiterAtExpiry: a holder that renews to a shorter
// TTL moves its expiry earlier; a waiter must be served at the new expiry,
// not at the old one (up to 24 h later), while Get already calls the key
// free.
func TestRenewShorterWakesWaiterAtExpiry(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.Unix(1e9, 0))
	s := newStore(t, WithClock(clk))
	const k = "job"
	l, err := s.Acquire(ctx, k, "holder", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		l   lease.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := s.AcquireWait(wctx, k, "waiter", time.Minute)
		done <- result{l, err}
	}()
	waitQueued(t, s, k, 1)
	if l, err = s.Renew(ctx, l, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	clk.Advance(20 * time.Millisecond) // past the renewed expiry, long before the first
	got, err := s.Get(ctx, k)
	if err != nil || got.Owner != "waiter" || got.Token <= l.Token {
		t.Errorf("after the renewed lease expired: Get = %+v, %v; want the waiter's lease", got, err)
	}
	cancel()
	if r := <-done; r.err == nil {
		if err := s.Release(ctx, r.l); err != nil {
			t.Error(err)
		}
	}
}

// TestAcquireWaitCancelAsGrantedGivesBack races waiters' cancellations
// with the release that hands them the key: a waiter whose ctx ends as it
// is granted gives the lease back and the next waiter is served, so once
// every waiter has returned (and released what it got) the key is free.
func TestAcquireWaitCancelAsGrantedGivesBack(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const k, waiters = "job", 4
	for iter := range 300 {
		h, err := s.Acquire(ctx, k, "holder", time.Minute)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		done := make(chan struct{}, waiters)
		cancels := make([]context.CancelFunc, waiters)
		for i := range waiters {
			wctx, cancel := context.WithCancel(ctx)
			cancels[i] = cancel
			go func() {
				defer func() { done <- struct{}{} }()
				if l, err := s.AcquireWait(wctx, k, "waiter", time.Minute); err == nil {
					if err := s.Release(ctx, l); err != nil {
						t.Errorf("release of a waiter's grant: %v", err)
					}
				}
			}()
		}
		waitQueued(t, s, k, waiters)
		go func() {
			for _, c := range cancels {
				c()
			}
		}()
		if err := s.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
		for range waiters {
			<-done
		}
		l, err := s.Acquire(ctx, k, "after", time.Minute)
		if err != nil {
			t.Fatalf("iteration %d: key left held after every waiter returned: %v", iter, err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEntriesSweepableAfterWaitAndWatch: a waiter that gave up and a watch
// that ended leave the key's entry idle once its lease is gone, so that a
// sweep can drop it: nothing they needed is left to pin it in memory.
func TestEntriesSweepableAfterWaitAndWatch(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.Unix(1e9, 0))
	s := newStore(t, WithClock(clk))
	idle := func(key string) bool {
		e := s.locked(s.hash(key), key, false)
		if e == nil {
			return true
		}
		defer e.mu.Unlock()
		return e.idle(s.now())
	}

	// A waiter that gave up.
	l, err := s.Acquire(ctx, "waited", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, "waited", "waiter", time.Minute)
		done <- err
	}()
	waitQueued(t, s, "waited", 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait after cancel: %v", err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if !idle("waited") {
		t.Error("a key whose waiter gave up is not idle once released: a sweep cannot drop it")
	}

	// A watch of a key, released while watched, then the watch ended.
	wctx, cancel = context.WithCancel(ctx)
	events := make(chan lease.Event, 16)
	go func() {
		for ev, err := range s.Watch(wctx, "watched") {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	if ev := <-events; ev.Kind != lease.Synced {
		t.Fatalf("first event %v, want Synced", ev.Kind)
	}
	l, err = s.Acquire(ctx, "watched", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	<-events // Acquired: the key's expiry check is armed
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	cancel()
	if !idle("watched") {
		t.Error("a watched key is not idle once released: a sweep cannot drop it")
	}
	// Expired: a watched lease left to expire.
	l, err = s.Acquire(ctx, "expiring", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if !idle("expiring") {
		t.Errorf("an expired lease's key is not idle (lease %v)", l.Token)
	}
}
