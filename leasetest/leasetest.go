// Package leasetest is the conformance suite every lease.Backend runs:
//
//	func TestConformance(t *testing.T) {
//		leasetest.TestBackend(t, func(t *testing.T) lease.Backend {
//			s, err := memstore.New()
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// It checks invariants I1–I4 of docs/DESIGN.md, the handling of bad input,
// List's pages (limits, cursors, every page size over keys with odd bytes,
// and a walk under churn that must see each lease held throughout exactly
// once: paging.go),
// the optional WaitAcquirer, Notifier and Watcher abilities when the backend
// has them (a Notifier's wake-ups on release and expiry, its context and,
// for an io.Closer, its Close; a Watcher's current state, changes, prefix,
// IDs, slow readers and expiry bound: watch.go), and I1 across restarts
// when given Reopen.
// Expiry is waited for in real time on the backend's clock, so backends with
// coarse expiry pass a longer ExpiryTTL.
package leasetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// Option adjusts the suite to a backend.
type Option func(*config) error

type config struct {
	expiryTTL        time.Duration
	settle           time.Duration
	reopen           func(t *testing.T, old lease.Backend) lease.Backend
	watchBuffer      int
	watchExpiryBound time.Duration
}

// ExpiryTTL sets the TTL of the leases the suite lets expire (default 50 ms).
// Backends whose expiry is coarser than that pass their granularity. It must
// be a valid TTL (lease.ValidateTTL).
func ExpiryTTL(d time.Duration) Option {
	return func(c *config) error {
		if err := lease.ValidateTTL(d); err != nil {
			return fmt.Errorf("leasetest: ExpiryTTL: %w", err)
		}
		c.expiryTTL = d
		return nil
	}
}

// Settle sets how long past a lease's TTL the backend may take to notice its
// expiry (default 2 s, polled, so it costs only what the backend needs). It
// must be positive.
func Settle(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: leasetest: Settle needs a positive duration, got %v", lease.ErrInvalid, d)
		}
		c.settle = d
		return nil
	}
}

// Reopen gives the suite a way to restart the backend on the same durable
// state (close old, open anew). With it the suite checks I1 and held leases
// across restarts.
func Reopen(f func(t *testing.T, old lease.Backend) lease.Backend) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: leasetest: Reopen needs a function, got nil", lease.ErrInvalid)
		}
		c.reopen = f
		return nil
	}
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) (config, error) {
	cfg := config{expiryTTL: 50 * time.Millisecond, settle: 2 * time.Second,
		watchBuffer: 1024, watchExpiryBound: time.Second}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: leasetest: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

// longTTL is for leases that must not expire during a test.
const longTTL = time.Minute

// TestBackend runs the conformance suite. newBackend is called once per
// subtest; it may return a fresh backend or share one (the subtests use
// distinct keys) — except for a backend that is both a lease.Notifier and an
// io.Closer: the suite closes the one it gets for Notifier/CloseEndsWaits,
// so newBackend must give that subtest one of its own.
func TestBackend(t *testing.T, newBackend func(t *testing.T) lease.Backend, opts ...Option) {
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{cfg: cfg, newBackend: newBackend}
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, b lease.Backend)
	}{
		{"AcquireReturnsLease", s.acquireReturnsLease},
		{"HeldByOther", s.heldByOther},
		{"TokensRiseAcrossRelease", s.tokensRiseAcrossRelease},
		{"TokensRiseAcrossExpiry", s.tokensRiseAcrossExpiry},
		{"TokensPerKeyIndependentOfOthers", s.tokensPerKey},
		{"RenewKeepsToken", s.renewKeepsToken},
		{"HeldUntilTTL", s.heldUntilTTL},
		{"RenewCanShorten", s.renewCanShorten},
		{"FailedAcquireChangesNothing", s.failedAcquireChangesNothing},
		{"AcquireGivenUp", s.acquireGivenUp},
		{"RenewAfterExpiryFails", s.renewAfterExpiryFails},
		{"SecretIDRequired", s.secretIDRequired},
		{"ReleaseSupersededFails", s.releaseSupersededFails},
		{"ReleaseTwiceFails", s.releaseTwiceFails},
		{"RaceOneKey", s.raceOneKey},
		{"ExclusionUnderChurn", s.exclusionUnderChurn},
		{"GetAndList", s.getAndList},
		{"ListLiteralPrefixByteOrder", s.listLiteralPrefixByteOrder},
		{"ListPageLimits", s.listPageLimits},
		{"ListPageBadInput", s.listPageBadInput},
		{"ListPageBoundaries", s.listPageBoundaries},
		{"ListWalkUnderChurn", s.listWalkUnderChurn},
		{"RelatedKeysIndependent", s.relatedKeysIndependent},
		{"KeysKeptIntact", s.keysKeptIntact},
		{"BadInput", s.badInput},
		{"InputLimitsAccepted", s.inputLimitsAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, newBackend(t)) })
	}
	// The optional abilities are tested where the backend has them, and
	// restarts where the caller says how to restart it; a subtest that could
	// only skip is not registered at all.
	probe := newBackend(t)
	if _, ok := probe.(lease.WaitAcquirer); ok {
		t.Run("WaitAcquirer", func(t *testing.T) { s.waitAcquirer(t, newBackend(t)) })
	}
	if _, ok := probe.(lease.Notifier); ok {
		t.Run("Notifier", s.notifier)
	}
	if _, ok := probe.(lease.Watcher); ok {
		t.Run("Watch", s.watch)
	}
	if _, ok := probe.(lease.BatchRenewer); ok {
		t.Run("RenewBatch", s.renewBatch)
	}
	if cfg.reopen != nil {
		t.Run("Reopen", func(t *testing.T) { s.reopen(t, newBackend(t)) })
	}
}

type suite struct {
	cfg        config
	newBackend func(t *testing.T) lease.Backend
}

// key returns a key unique to this test run.
func key(t *testing.T, name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "leasetest/" + hex.EncodeToString(b[:]) + "/" + name
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, b lease.Backend, k, owner string, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := b.Acquire(ctxFor(t), k, owner, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q, %v): %v", k, owner, ttl, err)
	}
	return l
}

// sentinels are the kinds of error callers tell apart with errors.Is.
var sentinels = []error{
	lease.ErrHeld, lease.ErrNotHeld, lease.ErrNotFound, lease.ErrInvalid,
	lease.ErrUnavailable, lease.ErrLost, lease.ErrReleased, lease.ErrStaleToken,
}

// errIs reports whether err matches want and no other kind of error in
// sentinels: a caller that sorts errors by kind (retry on ErrUnavailable,
// give up on ErrInvalid, wait on ErrHeld) must take one branch only.
func errIs(err, want error) bool {
	if !errors.Is(err, want) {
		return false
	}
	for _, other := range sentinels {
		if other != want && errors.Is(err, other) {
			return false
		}
	}
	return true
}

// clockSlack is how far apart the backend's clock and the test's may be.
// Backends under test run on this machine or its network; Expires is only
// checked to be plausible (about TTL after the call that set it), which
// catches an expiry computed from the wrong base or without the TTL.
const clockSlack = 5 * time.Second

// checkExpires checks that expires is about ttl after a call that ran from
// before to after on the test's clock. Later by up to the backend's settle
// time is allowed: a coarse backend may report when it will really expire.
func (s *suite) checkExpires(t *testing.T, what string, expires time.Time, ttl time.Duration, before, after time.Time) {
	t.Helper()
	if lo, hi := before.Add(ttl-clockSlack), after.Add(ttl+s.cfg.settle+clockSlack); expires.Before(lo) || expires.After(hi) {
		t.Errorf("%s: Expires is %v after the call began, want about its TTL %v", what, expires.Sub(before), ttl)
	}
}

// waitExpired waits until the backend no longer reports a lease on k, at
// least the TTL after it was granted, and checks that List agrees.
func (s *suite) waitExpired(t *testing.T, b lease.Backend, k string, ttl time.Duration) {
	t.Helper()
	time.Sleep(ttl)
	deadline := time.Now().Add(s.cfg.settle)
	for {
		_, err := b.Get(ctxFor(t), k)
		if errIs(err, lease.ErrNotFound) {
			for _, l := range listAll(t, b, k) {
				if l.Key == k {
					t.Fatalf("List(%q) returns the lease that Get says has expired: %+v", k, l)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("Get(%q) while waiting for expiry: %v", k, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease on %q still reported %v after its TTL %v", k, s.cfg.settle, ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *suite) acquireReturnsLease(t *testing.T, b lease.Backend) {
	k := key(t, "a")
	before := time.Now()
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	s.checkExpires(t, "Acquire", l.Expires, longTTL, before, time.Now())
	if l.Key != k || l.Owner != "worker-a" || l.TTL != longTTL {
		t.Errorf("lease = %+v, want key %q, owner worker-a, ttl %v", l, k, longTTL)
	}
	if l.Token == 0 || l.Token > lease.MaxToken {
		t.Errorf("token = %d, want within [1, 2^53]", l.Token)
	}
	if l.ID.IsZero() {
		t.Error("lease ID is zero")
	}
	if l.Expires.IsZero() {
		t.Error("Expires is zero")
	}
	l2 := mustAcquire(t, b, key(t, "b"), "worker-a", longTTL)
	if l2.ID == l.ID {
		t.Errorf("two leases share the ID %v", l.ID)
	}
}

func (s *suite) heldByOther(t *testing.T, b lease.Backend) {
	k := key(t, "held")
	before := time.Now()
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	for _, owner := range []string{"worker-b", "worker-a"} {
		_, err := b.Acquire(ctxFor(t), k, owner, longTTL)
		if !errIs(err, lease.ErrHeld) {
			t.Fatalf("second Acquire by %s: err = %v, want ErrHeld (and no other kind)", owner, err)
		}
		var he *lease.HeldError
		if !errors.As(err, &he) {
			t.Fatalf("second Acquire: err %T %v is not a *lease.HeldError", err, err)
		}
		if he.Owner != "worker-a" || he.Token != l.Token || he.Key != k {
			t.Errorf("HeldError = %+v, want owner worker-a, token %d, key %q", he, l.Token, k)
		}
		s.checkExpires(t, "HeldError", he.Expires, longTTL, before, time.Now())
	}
	if got, err := b.Get(ctxFor(t), k); err != nil || got.Token != l.Token || got.Owner != "worker-a" {
		t.Errorf("after failed acquires Get = %+v, %v; want worker-a's token %d", got, err, l.Token)
	}
}

func (s *suite) tokensRiseAcrossRelease(t *testing.T, b lease.Backend) {
	k := key(t, "release")
	var last lease.Token
	for i := range 5 {
		l := mustAcquire(t, b, k, "worker-a", longTTL)
		if l.Token <= last {
			t.Fatalf("generation %d: token %d, not above previous %d", i, l.Token, last)
		}
		last = l.Token
		if err := b.Release(ctxFor(t), l); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

func (s *suite) tokensRiseAcrossExpiry(t *testing.T, b lease.Backend) {
	k := key(t, "expiry")
	ttl := s.cfg.expiryTTL
	first := mustAcquire(t, b, k, "worker-a", ttl)
	s.waitExpired(t, b, k, ttl)
	// The same owner again: a new generation, a new token (I2).
	again := mustAcquire(t, b, k, "worker-a", ttl)
	if again.Token <= first.Token {
		t.Fatalf("re-acquire after expiry: token %d, not above %d", again.Token, first.Token)
	}
	if again.ID == first.ID {
		t.Fatal("re-acquire after expiry kept the old lease ID")
	}
	s.waitExpired(t, b, k, ttl)
	other := mustAcquire(t, b, k, "worker-b", longTTL)
	if other.Token <= again.Token {
		t.Fatalf("acquire by another after expiry: token %d, not above %d", other.Token, again.Token)
	}
}

func (s *suite) tokensPerKey(t *testing.T, b lease.Backend) {
	// Tokens of one key rise whatever happens on other keys.
	k1, k2 := key(t, "k1"), key(t, "k2")
	var last1, last2 lease.Token
	for i := range 4 {
		l1 := mustAcquire(t, b, k1, "w", longTTL)
		l2 := mustAcquire(t, b, k2, "w", longTTL)
		if l1.Token <= last1 || l2.Token <= last2 {
			t.Fatalf("round %d: tokens %d, %d not above %d, %d", i, l1.Token, l2.Token, last1, last2)
		}
		last1, last2 = l1.Token, l2.Token
		for _, l := range []lease.Lease{l1, l2} {
			if err := b.Release(ctxFor(t), l); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
}

func (s *suite) renewKeepsToken(t *testing.T, b lease.Backend) {
	k := key(t, "renew")
	l := mustAcquire(t, b, k, "worker-a", s.cfg.expiryTTL*4)
	for range 3 {
		before := time.Now()
		r, err := b.Renew(ctxFor(t), l, longTTL)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		// Each renewal counts from now, not from the previous expiry.
		s.checkExpires(t, "Renew", r.Expires, longTTL, before, time.Now())
		if r.Token != l.Token || r.ID != l.ID || r.Key != k || r.Owner != "worker-a" {
			t.Fatalf("Renew changed the lease: %+v, was %+v", r, l)
		}
		if r.TTL != longTTL {
			t.Errorf("renewed TTL = %v, want %v", r.TTL, longTTL)
		}
		if r.Expires.Before(l.Expires) {
			t.Errorf("renewed Expires %v is before the earlier %v", r.Expires, l.Expires)
		}
		l = r
	}
	// Renewed to a long TTL, it outlives its first TTL.
	time.Sleep(s.cfg.expiryTTL * 5)
	got, err := b.Get(ctxFor(t), k)
	if err != nil || got.Token != l.Token {
		t.Fatalf("renewed lease gone after its first TTL: %+v, %v", got, err)
	}
	if got.TTL != longTTL {
		t.Errorf("Get after Renew: TTL = %v, want the renewed %v", got.TTL, longTTL)
	}
}

// heldUntilTTL checks that a lease is not lost before its TTL has passed,
// after Acquire and after Renew. On the test's clock, a Get or Acquire that
// has returned less than the TTL after the granting call began ran before
// the lease could expire, and must still see it held; a check that returns
// later proves nothing, and a slow round is tried again.
func (s *suite) heldUntilTTL(t *testing.T, b lease.Backend) {
	ttl := max(2*s.cfg.expiryTTL, 200*time.Millisecond)
	for _, renew := range []bool{false, true} {
		what := "Acquire"
		if renew {
			what = "Renew"
		}
		for attempt := 1; !s.heldFor(t, b, what, ttl, renew); attempt++ {
			if attempt == 10 {
				t.Skipf("%s: the backend never answered fast enough to check a %v TTL", what, ttl)
			}
		}
	}
}

// heldFor grants (or grants and renews) a lease with ttl and polls it until
// 3/4 of ttl; it reports false if its checks were too slow to tell.
func (s *suite) heldFor(t *testing.T, b lease.Backend, what string, ttl time.Duration, renew bool) bool {
	k := key(t, "until-ttl")
	var (
		start time.Time
		l     lease.Lease
	)
	if renew {
		l = mustAcquire(t, b, k, "worker-a", longTTL)
		start = time.Now()
		r, err := b.Renew(ctxFor(t), l, ttl)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		l = r
	} else {
		start = time.Now()
		l = mustAcquire(t, b, k, "worker-a", ttl)
	}
	defer func() { _ = b.Release(ctxFor(t), l) }()
	for {
		got, gerr := b.Get(ctxFor(t), k)
		_, aerr := b.Acquire(ctxFor(t), k, "worker-b", longTTL)
		elapsed := time.Since(start)
		if elapsed >= ttl {
			return false
		}
		if gerr != nil || got.Token != l.Token {
			t.Fatalf("after %s with TTL %v the lease is gone within %v: Get = %+v, %v", what, ttl, elapsed, got, gerr)
		}
		if !errIs(aerr, lease.ErrHeld) {
			t.Fatalf("after %s with TTL %v another owner's Acquire within %v: err = %v, want ErrHeld", what, ttl, elapsed, aerr)
		}
		if elapsed >= ttl*3/4 {
			return true
		}
		time.Sleep(ttl / 20)
	}
}

// renewCanShorten checks that Renew sets the expiry to ttl from now, even
// when that is earlier than the lease's current expiry.
func (s *suite) renewCanShorten(t *testing.T, b lease.Backend) {
	k := key(t, "shorten")
	ttl := s.cfg.expiryTTL
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	r, err := b.Renew(ctxFor(t), l, ttl)
	if err != nil {
		t.Fatalf("Renew to a shorter TTL: %v", err)
	}
	if r.TTL != ttl || r.Token != l.Token {
		t.Fatalf("Renew to %v: %+v, want TTL %v and token %d", ttl, r, ttl, l.Token)
	}
	s.waitExpired(t, b, k, ttl)
}

// failedAcquireChangesNothing checks that an Acquire refused with ErrHeld
// leaves the holder's lease as it was: it still expires at its own TTL.
func (s *suite) failedAcquireChangesNothing(t *testing.T, b lease.Backend) {
	k := key(t, "failed-acquire")
	ttl := 4 * s.cfg.expiryTTL
	start := time.Now()
	l := mustAcquire(t, b, k, "worker-a", ttl)
	for _, owner := range []string{"worker-b", "worker-a"} {
		_, err := b.Acquire(ctxFor(t), k, owner, longTTL)
		if err == nil && time.Since(start) >= ttl {
			t.Skipf("too slow to check: the lease's TTL %v passed before the second Acquire", ttl)
		}
		if !errIs(err, lease.ErrHeld) {
			t.Fatalf("Acquire of a held key by %s: err = %v, want ErrHeld", owner, err)
		}
	}
	got, err := b.Get(ctxFor(t), k)
	if err == nil && (got.Token != l.Token || got.Owner != "worker-a") || err != nil && time.Since(start) < ttl {
		t.Fatalf("after refused acquires Get = %+v, %v; want worker-a's token %d", got, err, l.Token)
	}
	s.waitExpired(t, b, k, ttl-time.Since(start))
}

func (s *suite) renewAfterExpiryFails(t *testing.T, b lease.Backend) {
	k := key(t, "renew-expired")
	ttl := s.cfg.expiryTTL
	l := mustAcquire(t, b, k, "worker-a", ttl)
	s.waitExpired(t, b, k, ttl)
	if _, err := b.Renew(ctxFor(t), l, longTTL); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Renew after expiry: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Get(ctxFor(t), k); !errIs(err, lease.ErrNotFound) {
		t.Fatalf("failed Renew revived the lease: Get err = %v", err)
	}
	if err := b.Release(ctxFor(t), l); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Release after expiry: err = %v, want ErrNotHeld", err)
	}
}

func (s *suite) secretIDRequired(t *testing.T, b lease.Backend) {
	k := key(t, "secret")
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	other := mustAcquire(t, b, key(t, "secret-other"), "worker-b", longTTL)
	forged := l
	forged.ID = lease.NewID()
	if _, err := b.Renew(ctxFor(t), forged, longTTL); !errIs(err, lease.ErrNotHeld) {
		t.Errorf("Renew with a wrong ID: err = %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctxFor(t), forged); !errIs(err, lease.ErrNotHeld) {
		t.Errorf("Release with a wrong ID: err = %v, want ErrNotHeld", err)
	}
	wrongToken := l
	wrongToken.Token = l.Token + 1
	if _, err := b.Renew(ctxFor(t), wrongToken, longTTL); !errIs(err, lease.ErrNotHeld) {
		t.Errorf("Renew with a wrong token: err = %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctxFor(t), wrongToken); !errIs(err, lease.ErrNotHeld) {
		t.Errorf("Release with a wrong token: err = %v, want ErrNotHeld", err)
	}
	// The right ID and token prove nothing about another key, held or free.
	for _, k2 := range []string{other.Key, key(t, "secret-free")} {
		wrongKey := l
		wrongKey.Key = k2
		if _, err := b.Renew(ctxFor(t), wrongKey, longTTL); !errIs(err, lease.ErrNotHeld) {
			t.Errorf("Renew naming key %q with the ID and token of %q: err = %v, want ErrNotHeld", k2, k, err)
		}
		if err := b.Release(ctxFor(t), wrongKey); !errIs(err, lease.ErrNotHeld) {
			t.Errorf("Release naming key %q with the ID and token of %q: err = %v, want ErrNotHeld", k2, k, err)
		}
	}
	if got, err := b.Get(ctxFor(t), k); err != nil || got.Token != l.Token {
		t.Fatalf("forged calls disturbed the lease: Get = %+v, %v", got, err)
	}
	if got, err := b.Get(ctxFor(t), other.Key); err != nil || got.Token != other.Token {
		t.Fatalf("forged calls disturbed another key's lease: Get = %+v, %v", got, err)
	}
	if _, err := b.Renew(ctxFor(t), l, longTTL); err != nil {
		t.Fatalf("Renew with the real ID after forgeries: %v", err)
	}
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatalf("Release with the real ID: %v", err)
	}
}

func (s *suite) releaseSupersededFails(t *testing.T, b lease.Backend) {
	k := key(t, "superseded")
	ttl := s.cfg.expiryTTL
	a := mustAcquire(t, b, k, "worker-a", ttl)
	s.waitExpired(t, b, k, ttl)
	bl := mustAcquire(t, b, k, "worker-b", longTTL)
	if bl.Token <= a.Token {
		t.Fatalf("successor token %d not above %d", bl.Token, a.Token)
	}
	if err := b.Release(ctxFor(t), a); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Release of the superseded lease: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Renew(ctxFor(t), a, longTTL); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Renew of the superseded lease: err = %v, want ErrNotHeld", err)
	}
	got, err := b.Get(ctxFor(t), k)
	if err != nil || got.Token != bl.Token || got.Owner != "worker-b" {
		t.Fatalf("successor disturbed: Get = %+v, %v; want worker-b token %d", got, err, bl.Token)
	}
	if _, err := b.Renew(ctxFor(t), bl, longTTL); err != nil {
		t.Fatalf("successor cannot renew: %v", err)
	}
}

func (s *suite) releaseTwiceFails(t *testing.T, b lease.Backend) {
	k := key(t, "twice")
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := b.Release(ctxFor(t), l); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("second Release: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Renew(ctxFor(t), l, longTTL); !errIs(err, lease.ErrNotHeld) {
		t.Fatalf("Renew after Release: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Get(ctxFor(t), k); !errIs(err, lease.ErrNotFound) {
		t.Fatalf("Get after Release: err = %v, want ErrNotFound", err)
	}
}

func (s *suite) raceOneKey(t *testing.T, b lease.Backend) {
	const racers, rounds = 32, 10
	k := key(t, "race")
	var last lease.Token
	for round := range rounds {
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			winners []lease.Lease
		)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := b.Acquire(ctxFor(t), k, fmt.Sprintf("racer-%d", i), longTTL)
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, l)
					mu.Unlock()
				case !errIs(err, lease.ErrHeld):
					t.Errorf("racer %d: %v", i, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1: %+v", round, len(winners), winners)
		}
		w := winners[0]
		if w.Token <= last {
			t.Fatalf("round %d: token %d not above previous %d", round, w.Token, last)
		}
		last = w.Token
		if err := b.Release(ctxFor(t), w); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
	}
}

func (s *suite) exclusionUnderChurn(t *testing.T, b lease.Backend) {
	const workers, perWorker = 8, 25
	k := key(t, "churn")
	var (
		holders atomic.Int32
		wg      sync.WaitGroup
		mu      sync.Mutex
		tokens  []lease.Token
	)
	// The workers go on until each has its share, as long as acquisitions
	// keep coming: a key that stays held or refused for stall is stuck (a
	// release that frees nothing, a waiter never woken). No bound on the
	// whole run: that is a speed, not a property, and a loaded host (-race
	// beside other suites) made 187 of the 200 through leasehttp in 30 s.
	const stall = 30 * time.Second
	var lastGrant atomic.Int64 // UnixNano of the last acquisition, or the start
	lastGrant.Store(time.Now().UnixNano())
	stuck := func() bool { return time.Since(time.Unix(0, lastGrant.Load())) > stall }
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A worker that finds the key held backs off, doubling up to
			// as long as its last request took times the workers (at
			// least a millisecond): the other workers' retries together
			// then keep about one request in flight. Retried back to back,
			// each one a request a server must answer, they took the
			// holder's turn on a backend behind a network: through
			// leasehttp under -race on a loaded host a few dozen
			// acquisitions in 30 s where one worker alone makes hundreds,
			// and none of them broke I3. In process the pauses stay
			// microseconds, and the workers still race for every release.
			const minPause = 100 * time.Microsecond
			pause := time.Duration(i+1) * minPause
			for got := 0; got < perWorker && !stuck(); {
				sent := time.Now()
				l, err := b.Acquire(ctxFor(t), k, fmt.Sprintf("w%d", i), longTTL)
				if errors.Is(err, lease.ErrHeld) {
					took := time.Since(sent)
					time.Sleep(pause)
					pause = min(2*pause, max(time.Millisecond, workers*took))
					continue
				}
				pause = time.Duration(i+1) * minPause
				if err != nil {
					t.Errorf("worker %d: Acquire: %v", i, err)
					return
				}
				lastGrant.Store(time.Now().UnixNano())
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders at once (I3)", n)
				}
				mu.Lock()
				tokens = append(tokens, l.Token)
				mu.Unlock()
				holders.Add(-1)
				if err := b.Release(ctxFor(t), l); err != nil {
					t.Errorf("worker %d: Release: %v", i, err)
					return
				}
				got++
			}
		}()
	}
	wg.Wait()
	// Acquisitions are serialised, so in the order they were recorded (each
	// while the only holder) tokens strictly rise.
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d at acquisition %d", tokens[i], tokens[i-1], i)
		}
	}
	if len(tokens) < workers*perWorker {
		why := "" // a worker's error, reported above
		if stuck() {
			why = fmt.Sprintf(": none in %v", stall)
		}
		t.Fatalf("only %d of %d acquisitions%s", len(tokens), workers*perWorker, why)
	}
}

func (s *suite) getAndList(t *testing.T, b lease.Backend) {
	base := key(t, "list")
	ka, kb, kc := base+"/a", base+"/b", base+"/c"
	other := base + "x/a" // shares the string prefix base+"/"? no: a sibling
	before := time.Now()
	lb := mustAcquire(t, b, kb, "owner-b", longTTL)
	la := mustAcquire(t, b, ka, "owner-a", longTTL)
	lc := mustAcquire(t, b, kc, "owner-c", longTTL)
	mustAcquire(t, b, other, "owner-x", longTTL)

	got, err := b.Get(ctxFor(t), ka)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Token != la.Token || got.Owner != "owner-a" || got.Key != ka || got.TTL != longTTL || got.Expires.IsZero() {
		t.Errorf("Get = %+v, want the lease %+v", got, la)
	}
	s.checkExpires(t, "Get", got.Expires, longTTL, before, time.Now())
	if !got.ID.IsZero() {
		t.Error("Get returned the secret ID")
	}
	if _, err := b.Get(ctxFor(t), base+"/none"); !errIs(err, lease.ErrNotFound) {
		t.Errorf("Get of a free key: err = %v, want ErrNotFound", err)
	}
	if err := b.Release(ctxFor(t), lc); err != nil {
		t.Fatal(err)
	}
	list := listAll(t, b, base+"/")
	var keys []string
	for _, l := range list {
		keys = append(keys, l.Key)
		if !l.ID.IsZero() {
			t.Errorf("List returned the secret ID of %q", l.Key)
		}
	}
	if want := []string{ka, kb}; strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("List(%q) keys = %q, want %q", base+"/", keys, want)
	}
	if list[1].Token != lb.Token || list[1].Owner != "owner-b" {
		t.Errorf("List entry = %+v, want %+v", list[1], lb)
	}
	if empty, err := b.List(ctxFor(t), base+"/zzz", lease.Page{}); err != nil || len(empty.Leases) != 0 || empty.Next != "" {
		t.Errorf("List of an unused prefix = %+v, %v; want no leases and no Next", empty, err)
	}
}

// listLiteralPrefixByteOrder checks that List's prefix is a string, not a
// pattern (characters that are wildcards to LIKE, glob or Redis MATCH are
// themselves), and that List orders keys by their bytes, as Go compares
// strings, not by a collation.
func (s *suite) listLiteralPrefixByteOrder(t *testing.T, b lease.Backend) {
	base := key(t, "literal") + "/"
	// Each pattern-like name, and a name the pattern would match.
	pairs := [][2]string{
		{"a_b", "axb"},
		{"p%q", "pzzq"},
		{"s*t", "sxxt"},
		{"u?v", "uwv"},
		{"[r]", "r"},
		{`b\c`, "bc"},
		{"Z", "z"},
	}
	var all []string
	for _, p := range pairs {
		for _, name := range p {
			k := base + name + "/1"
			mustAcquire(t, b, k, "o", longTTL)
			all = append(all, k)
		}
	}
	slices.Sort(all)
	if got := keysOf(listAll(t, b, base)); !slices.Equal(got, all) {
		t.Errorf("List(%q) keys = %q, want %q in byte order", base, got, all)
	}
	for _, p := range pairs {
		prefix := base + p[0] + "/"
		if got, want := keysOf(listAll(t, b, prefix)), []string{prefix + "1"}; !slices.Equal(got, want) {
			t.Errorf("List(%q) keys = %q, want %q only", prefix, got, want)
		}
	}
}

// relatedKeysIndependent checks that keys that are prefixes of one another,
// or differ only in case or in a trailing space, are distinct keys to
// Acquire, Get and Release.
func (s *suite) relatedKeysIndependent(t *testing.T, b lease.Backend) {
	base := key(t, "related")
	var others []lease.Lease
	for _, k := range []string{base + "/child", base + "x", base + "/Case", base + "/space "} {
		others = append(others, mustAcquire(t, b, k, "owner of "+k, longTTL))
	}
	if got, err := b.Get(ctxFor(t), base); !errIs(err, lease.ErrNotFound) {
		t.Errorf("Get(%q), free, while keys it is a prefix of are held = %+v, %v; want ErrNotFound", base, got, err)
	}
	var mine []lease.Lease
	for _, k := range []string{base, base + "/case", base + "/space"} {
		l, err := b.Acquire(ctxFor(t), k, "owner of "+k, longTTL)
		if err != nil {
			t.Fatalf("Acquire(%q) while only related keys are held: %v", k, err)
		}
		if got, err := b.Get(ctxFor(t), k); err != nil || got.Key != k || got.Token != l.Token || got.Owner != "owner of "+k {
			t.Errorf("Get(%q) = %+v, %v; want the lease %+v", k, got, err, l)
		}
		mine = append(mine, l)
	}
	for _, l := range mine {
		if err := b.Release(ctxFor(t), l); err != nil {
			t.Fatalf("Release(%q): %v", l.Key, err)
		}
	}
	for _, o := range others {
		if got, err := b.Get(ctxFor(t), o.Key); err != nil || got.Key != o.Key || got.Token != o.Token || got.Owner != o.Owner {
			t.Errorf("after releasing related keys, Get(%q) = %+v, %v; want the lease %+v", o.Key, got, err, o)
		}
	}
}

func (s *suite) keysKeptIntact(t *testing.T, b lease.Backend) {
	base := key(t, "intact")
	for _, suffix := range []string{
		`'; DROP TABLE leases; --`,
		`"quoted" \back\slash %_ wild*card? {tag}`,
		"ünïcødé/日本語/🔒",
		"slash/in/key/",
		strings.Repeat("x", lease.MaxKeyLen-len(base)-1),
	} {
		k := base + "/" + suffix
		l := mustAcquire(t, b, k, "owner '\"; --", longTTL)
		if l.Key != k {
			t.Errorf("Acquire key = %q, want %q", l.Key, k)
		}
		got, err := b.Get(ctxFor(t), k)
		if err != nil || got.Key != k || got.Owner != "owner '\"; --" {
			t.Errorf("Get(%q) = %+v, %v", k, got, err)
		}
		if list := listAll(t, b, k); len(list) != 1 || list[0].Key != k {
			t.Errorf("List(%q) = %+v", k, list)
		}
		if err := b.Release(ctxFor(t), l); err != nil {
			t.Errorf("Release(%q): %v", k, err)
		}
	}
}

func (s *suite) badInput(t *testing.T, b lease.Backend) {
	good := key(t, "good")
	valid := mustAcquire(t, b, good, "owner", longTTL)
	badKeys := map[string]string{
		"empty":         "",
		"too long":      strings.Repeat("k", lease.MaxKeyLen+1),
		"NUL":           "a\x00b",
		"newline":       "a\nb",
		"DEL":           "a\x7fb",
		"C1 control":    "a\u0085b",
		"invalid UTF-8": "a\xffb",
	}
	badTTLs := []time.Duration{0, -time.Second, lease.MinTTL - 1, lease.MaxTTL + 1}
	check := func(t *testing.T, what string, f func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", what, r)
				}
			}()
			err = f()
		}()
		if !errIs(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", what, err)
		}
	}
	ctx := ctxFor(t)
	for name, k := range badKeys {
		bad := valid
		bad.Key = k
		check(t, "Acquire with key "+name, func() error { _, err := b.Acquire(ctx, k, "o", longTTL); return err })
		check(t, "Renew with key "+name, func() error { _, err := b.Renew(ctx, bad, longTTL); return err })
		check(t, "Release with key "+name, func() error { return b.Release(ctx, bad) })
		check(t, "Get with key "+name, func() error { _, err := b.Get(ctx, k); return err })
	}
	badOwners := map[string]string{
		"empty":         "",
		"too long":      strings.Repeat("o", lease.MaxKeyLen+1),
		"NUL":           "o\x00o",
		"newline":       "o\no",
		"C1 control":    "o\u0085o",
		"invalid UTF-8": "o\xffo",
	}
	for name, owner := range badOwners {
		check(t, "Acquire with owner "+name, func() error { _, err := b.Acquire(ctx, key(t, "o"), owner, longTTL); return err })
	}
	for _, ttl := range badTTLs {
		check(t, fmt.Sprintf("Acquire with ttl %v", ttl), func() error { _, err := b.Acquire(ctx, key(t, "ttl"), "o", ttl); return err })
		check(t, fmt.Sprintf("Renew with ttl %v", ttl), func() error { _, err := b.Renew(ctx, valid, ttl); return err })
	}
	if wa, ok := b.(lease.WaitAcquirer); ok {
		// On a held key, so that a backend that queued bad input instead of
		// refusing it would be seen to wait (bounded, not for ever).
		wait := func(k, owner string, ttl time.Duration) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := wa.AcquireWait(ctx, k, owner, ttl)
			return err
		}
		for name, k := range badKeys {
			check(t, "AcquireWait with key "+name, func() error { return wait(k, "o", longTTL) })
		}
		for name, owner := range badOwners {
			check(t, "AcquireWait with owner "+name, func() error { return wait(good, owner, longTTL) })
		}
		for _, ttl := range badTTLs {
			check(t, fmt.Sprintf("AcquireWait with ttl %v", ttl), func() error { return wait(good, "o", ttl) })
		}
	}
	zeroToken, zeroID, hugeToken := valid, valid, valid
	zeroToken.Token = 0
	zeroID.ID = lease.ID{}
	hugeToken.Token = lease.MaxToken + 1
	for name, l := range map[string]lease.Lease{"zero token": zeroToken, "zero ID": zeroID, "token above 2^53": hugeToken} {
		check(t, "Renew with "+name, func() error { _, err := b.Renew(ctx, l, longTTL); return err })
		check(t, "Release with "+name, func() error { return b.Release(ctx, l) })
	}
	// None of it disturbed the valid lease.
	if got, err := b.Get(ctx, good); err != nil || got.Token != valid.Token {
		t.Fatalf("bad input disturbed a valid lease: %+v, %v", got, err)
	}
}

// inputLimitsAccepted checks that the limits themselves are valid: an owner
// of MaxKeyLen bytes and TTLs of exactly MinTTL and MaxTTL. (A key of
// MaxKeyLen bytes is in KeysKeptIntact.)
func (s *suite) inputLimitsAccepted(t *testing.T, b lease.Backend) {
	owner := strings.Repeat("o", lease.MaxKeyLen)
	k := key(t, "limits")
	l, err := b.Acquire(ctxFor(t), k, owner, lease.MaxTTL)
	if err != nil {
		t.Fatalf("Acquire with an owner of %d bytes and TTL MaxTTL: %v", len(owner), err)
	}
	if l.Owner != owner || l.TTL != lease.MaxTTL {
		t.Errorf("Acquire = owner of %d bytes, TTL %v; want %d bytes, %v", len(l.Owner), l.TTL, len(owner), lease.MaxTTL)
	}
	if l, err = b.Renew(ctxFor(t), l, lease.MaxTTL); err != nil {
		t.Fatalf("Renew with TTL MaxTTL: %v", err)
	}
	if l, err = b.Renew(ctxFor(t), l, lease.MinTTL); err != nil {
		t.Fatalf("Renew with TTL MinTTL: %v", err)
	}
	if l.TTL != lease.MinTTL {
		t.Errorf("Renew with TTL MinTTL: TTL = %v", l.TTL)
	}
	if l, err = b.Acquire(ctxFor(t), key(t, "limits-min"), "o", lease.MinTTL); err != nil {
		t.Fatalf("Acquire with TTL MinTTL: %v", err)
	} else if l.TTL != lease.MinTTL {
		t.Errorf("Acquire with TTL MinTTL: TTL = %v", l.TTL)
	}
}

func (s *suite) waitAcquirer(t *testing.T, b lease.Backend) {
	wa := b.(lease.WaitAcquirer)
	k := key(t, "wait")
	holder := mustAcquire(t, b, k, "holder", longTTL)

	// Three waiters arrive in order; releases hand the lease over in that order.
	const waiters = 3
	type result struct {
		i int
		l lease.Lease
		e error
	}
	results := make(chan result, waiters)
	for i := range waiters {
		go func() {
			l, err := wa.AcquireWait(ctxFor(t), k, fmt.Sprintf("waiter-%d", i), longTTL)
			results <- result{i, l, err}
		}()
		time.Sleep(100 * time.Millisecond) // let it queue before the next arrives
	}
	select {
	case r := <-results:
		t.Fatalf("waiter %d got through while the key was held: %+v, %v", r.i, r.l, r.e)
	case <-time.After(100 * time.Millisecond):
	}
	prev := holder
	for want := range waiters {
		if err := b.Release(ctxFor(t), prev); err != nil {
			t.Fatalf("Release: %v", err)
		}
		var r result
		select {
		case r = <-results:
		case <-time.After(10 * time.Second):
			t.Fatalf("no waiter woke within 10 s of a release")
		}
		if r.e != nil {
			t.Fatalf("waiter %d: %v", r.i, r.e)
		}
		if r.i != want {
			t.Fatalf("waiter %d was served before waiter %d (not FIFO)", r.i, want)
		}
		if r.l.Token <= prev.Token {
			t.Fatalf("waiter token %d not above %d", r.l.Token, prev.Token)
		}
		prev = r.l
	}

	// A waiter is served when the holder's lease expires, too.
	if err := b.Release(ctxFor(t), prev); err != nil {
		t.Fatal(err)
	}
	ttl := s.cfg.expiryTTL
	short := mustAcquire(t, b, k, "short", ttl)
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctxFor(t), ttl+s.cfg.settle+time.Second)
	defer wcancel()
	l, err := wa.AcquireWait(wctx, k, "after-expiry", longTTL)
	if err != nil {
		t.Fatalf("AcquireWait across an expiry of %v, not served within %v: %v", ttl, time.Since(start), err)
	}
	if l.Token <= short.Token {
		t.Fatalf("token %d not above %d", l.Token, short.Token)
	}
	if waited := time.Since(start); waited > ttl+s.cfg.settle {
		t.Errorf("waiter served %v after an expiry of %v", waited, ttl)
	}

	// A waiter whose context ends gives up its place and holds nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err = wa.AcquireWait(ctx, k, "impatient", longTTL)
	if err == nil {
		t.Fatal("AcquireWait with an expiring context acquired a held key")
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errIs(err, lease.ErrHeld) {
		t.Errorf("AcquireWait whose context ended: err = %v, want the context's error or ErrHeld", err)
	}
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctxFor(t), k, "next", longTTL); err != nil {
		t.Fatalf("the impatient waiter left the key held: %v", err)
	}
}

// notifier checks WaitChange: it returns nil once the key may have become
// free — released, expired, or free already when called — its context's
// error when that ends first, an error matching ErrInvalid for a bad key,
// and, for a backend that is an io.Closer, an error matching ErrUnavailable
// once the backend is closed. It may return nil early or spuriously, so
// each check calls it again while the key is still held, as lease.Client
// does.
func (s *suite) notifier(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, b lease.Backend, n lease.Notifier)
	}{
		{"WakesOnRelease", s.notifyOnRelease},
		{"WakesOnExpiry", s.notifyOnExpiry},
		{"FreeKeyReturns", s.notifyFreeKey},
		{"ContextEnds", s.notifyContextEnds},
		{"BadKey", s.notifyBadKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := s.newBackend(t)
			tc.f(t, b, b.(lease.Notifier))
		})
	}
	if _, ok := s.newBackend(t).(io.Closer); ok {
		t.Run("CloseEndsWaits", func(t *testing.T) {
			b := s.newBackend(t)
			s.notifyClose(t, b, b.(lease.Notifier), b.(io.Closer))
		})
	}
}

// waitFree calls WaitChange on k until it fails or Get finds k free, and
// sends the outcome (nil: woken and free) on the returned channel.
func waitFree(b lease.Backend, n lease.Notifier, k string, within time.Duration) <-chan error {
	woke := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		for {
			if err := n.WaitChange(ctx, k); err != nil {
				woke <- err
				return
			}
			if _, err := b.Get(ctx, k); errors.Is(err, lease.ErrNotFound) {
				woke <- nil
				return
			}
			if err := ctx.Err(); err != nil { // nil while it ends: no spinning on
				woke <- fmt.Errorf("WaitChange returned nil after its context ended: %w", err)
				return
			}
		}
	}()
	return woke
}

func (s *suite) notifyOnRelease(t *testing.T, b lease.Backend, n lease.Notifier) {
	k := key(t, "notify")
	l := mustAcquire(t, b, k, "holder", longTTL)
	woke := waitFree(b, n, k, 20*time.Second)
	time.Sleep(200 * time.Millisecond) // let it wait before the release
	start := time.Now()
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("WaitChange across a release, not woken within 20 s: %v", err)
	}
	t.Logf("woken %v after the release", time.Since(start))
}

// notifyOnExpiry: nobody releases the key; its holder's lease runs out. A
// waiter must wake by itself, whether the backend announces expiry or times
// the wait by the holder's expiry.
func (s *suite) notifyOnExpiry(t *testing.T, b lease.Backend, n lease.Notifier) {
	k := key(t, "notify-expiry")
	ttl := s.cfg.expiryTTL
	granted := time.Now()
	mustAcquire(t, b, k, "crashed", ttl)
	within := ttl + s.cfg.settle + 10*time.Second
	if err := <-waitFree(b, n, k, within); err != nil {
		t.Fatalf("WaitChange on a lease of TTL %v that expires, not woken within %v: %v", ttl, within, err)
	}
	t.Logf("woken %v after the grant of a lease of TTL %v", time.Since(granted), ttl)
}

// notifyFreeKey: a key released between the caller's failed Acquire and its
// WaitChange must not leave the caller waiting for a release that has
// happened already.
func (s *suite) notifyFreeKey(t *testing.T, b lease.Backend, n lease.Notifier) {
	released := key(t, "notify-released")
	l := mustAcquire(t, b, released, "holder", longTTL)
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key(t, "notify-never-held"), released} {
		ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
		err := n.WaitChange(ctx, k)
		cancel()
		if err != nil {
			t.Errorf("WaitChange on the free key %q: %v, want nil within 10 s", k, err)
		}
	}
}

// notifyContextEnds: on a key that stays held, WaitChange returns its
// context's error when the context ends.
func (s *suite) notifyContextEnds(t *testing.T, b lease.Backend, n lease.Notifier) {
	k := key(t, "notify-ctx")
	mustAcquire(t, b, k, "holder", longTTL)
	ctx, cancel := context.WithTimeout(ctxFor(t), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		for {
			err := n.WaitChange(ctx, k)
			if err == nil && ctx.Err() != nil {
				// A nil may have raced the end: the next call must say so.
				err = n.WaitChange(ctx, k)
				if err == nil {
					err = errors.New("nil after the context ended")
				}
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitChange whose context ended: err = %v, want the context's DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChange still waiting 10 s after its context ended")
	}
}

func (s *suite) notifyBadKey(t *testing.T, b lease.Backend, n lease.Notifier) {
	for _, k := range []string{"", "a\x00b", "a\nb", "\xff", strings.Repeat("k", lease.MaxKeyLen+1)} {
		ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
		err := n.WaitChange(ctx, k)
		cancel()
		if !errIs(err, lease.ErrInvalid) {
			t.Errorf("WaitChange(%.40q): err = %v, want ErrInvalid", k, err)
		}
	}
}

// notifyClose: Close ends a pending WaitChange, and later ones fail at once,
// with an error matching ErrUnavailable (the caller falls back to polling),
// never with nil (which would have it retry at once, for ever).
func (s *suite) notifyClose(t *testing.T, b lease.Backend, n lease.Notifier, c io.Closer) {
	k := key(t, "notify-close")
	mustAcquire(t, b, k, "holder", longTTL)
	woke := waitFree(b, n, k, 10*time.Second)
	time.Sleep(200 * time.Millisecond) // let it wait before the close
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-woke; !errIs(err, lease.ErrUnavailable) {
		t.Errorf("WaitChange pending across Close: err = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
	defer cancel()
	if err := n.WaitChange(ctx, k); !errIs(err, lease.ErrUnavailable) {
		t.Errorf("WaitChange after Close: err = %v, want ErrUnavailable", err)
	}
}

func (s *suite) reopen(t *testing.T, b lease.Backend) {
	k, held := key(t, "reopen"), key(t, "reopen-held")
	var last lease.Token
	for range 3 {
		l := mustAcquire(t, b, k, "w", longTTL)
		if err := b.Release(ctxFor(t), l); err != nil {
			t.Fatal(err)
		}
		last = l.Token
	}
	h := mustAcquire(t, b, held, "holder", longTTL)
	b = s.cfg.reopen(t, b)
	l := mustAcquire(t, b, k, "w", longTTL)
	if l.Token <= last {
		t.Fatalf("after reopen: token %d, not above %d issued before (I1)", l.Token, last)
	}
	if _, err := b.Acquire(ctxFor(t), held, "thief", longTTL); !errIs(err, lease.ErrHeld) {
		t.Fatalf("after reopen a held lease was handed out: err = %v", err)
	}
	if _, err := b.Renew(ctxFor(t), h, longTTL); err != nil {
		t.Fatalf("after reopen the holder cannot renew: %v", err)
	}
}
