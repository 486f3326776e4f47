// Package leasetest is the conformance suite every lease.Backend runs:
//
//	func TestConformance(t *testing.T) {
//		leasetest.TestBackend(t, func(t *testing.T) lease.Backend { return memstore.New() })
//	}
//
// It checks invariants I1–I4 of DESIGN.md, the handling of bad input, the
// optional WaitAcquirer and Notifier abilities when the backend has them, and
// I1 across restarts when given Reopen.
// Expiry is waited for in real time on the backend's clock, so backends with
// coarse expiry pass a longer ExpiryTTL.
package leasetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// Option adjusts the suite to a backend.
type Option func(*config)

type config struct {
	expiryTTL time.Duration
	settle    time.Duration
	reopen    func(t *testing.T, old lease.Backend) lease.Backend
}

// ExpiryTTL sets the TTL of the leases the suite lets expire (default 50 ms).
// Backends whose expiry is coarser than that pass their granularity.
func ExpiryTTL(d time.Duration) Option { return func(c *config) { c.expiryTTL = d } }

// Settle sets how long past a lease's TTL the backend may take to notice its
// expiry (default 2 s, polled, so it costs only what the backend needs).
func Settle(d time.Duration) Option { return func(c *config) { c.settle = d } }

// Reopen gives the suite a way to restart the backend on the same durable
// state (close old, open anew). With it the suite checks I1 and held leases
// across restarts.
func Reopen(f func(t *testing.T, old lease.Backend) lease.Backend) Option {
	return func(c *config) { c.reopen = f }
}

// longTTL is for leases that must not expire during a test.
const longTTL = time.Minute

// TestBackend runs the conformance suite. newBackend is called once per
// subtest; it may return a fresh backend or share one (the subtests use
// distinct keys).
func TestBackend(t *testing.T, newBackend func(t *testing.T) lease.Backend, opts ...Option) {
	cfg := config{expiryTTL: 50 * time.Millisecond, settle: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
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
		{"RenewAfterExpiryFails", s.renewAfterExpiryFails},
		{"SecretIDRequired", s.secretIDRequired},
		{"ReleaseSupersededFails", s.releaseSupersededFails},
		{"ReleaseTwiceFails", s.releaseTwiceFails},
		{"RaceOneKey", s.raceOneKey},
		{"ExclusionUnderChurn", s.exclusionUnderChurn},
		{"GetAndList", s.getAndList},
		{"KeysKeptIntact", s.keysKeptIntact},
		{"BadInput", s.badInput},
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
		t.Run("Notifier", func(t *testing.T) { s.notifier(t, newBackend(t)) })
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

// waitExpired waits until the backend no longer reports a lease on k, at
// least the TTL after it was granted.
func (s *suite) waitExpired(t *testing.T, b lease.Backend, k string, ttl time.Duration) {
	t.Helper()
	time.Sleep(ttl)
	deadline := time.Now().Add(s.cfg.settle)
	for {
		_, err := b.Get(ctxFor(t), k)
		if errors.Is(err, lease.ErrNotFound) {
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
	l := mustAcquire(t, b, k, "worker-a", longTTL)
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
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	for _, owner := range []string{"worker-b", "worker-a"} {
		_, err := b.Acquire(ctxFor(t), k, owner, longTTL)
		if !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("second Acquire by %s: err = %v, want ErrHeld", owner, err)
		}
		var he *lease.HeldError
		if !errors.As(err, &he) {
			t.Fatalf("second Acquire: err %T %v is not a *lease.HeldError", err, err)
		}
		if he.Owner != "worker-a" || he.Token != l.Token || he.Key != k {
			t.Errorf("HeldError = %+v, want owner worker-a, token %d, key %q", he, l.Token, k)
		}
	}
	if got, err := b.Get(ctxFor(t), k); err != nil || got.Token != l.Token {
		t.Errorf("after failed acquires Get = %+v, %v; want token %d", got, err, l.Token)
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
		r, err := b.Renew(ctxFor(t), l, longTTL)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
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
	if got, err := b.Get(ctxFor(t), k); err != nil || got.Token != l.Token {
		t.Fatalf("renewed lease gone after its first TTL: %+v, %v", got, err)
	}
}

func (s *suite) renewAfterExpiryFails(t *testing.T, b lease.Backend) {
	k := key(t, "renew-expired")
	ttl := s.cfg.expiryTTL
	l := mustAcquire(t, b, k, "worker-a", ttl)
	s.waitExpired(t, b, k, ttl)
	if _, err := b.Renew(ctxFor(t), l, longTTL); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Renew after expiry: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Get(ctxFor(t), k); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("failed Renew revived the lease: Get err = %v", err)
	}
	if err := b.Release(ctxFor(t), l); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release after expiry: err = %v, want ErrNotHeld", err)
	}
}

func (s *suite) secretIDRequired(t *testing.T, b lease.Backend) {
	k := key(t, "secret")
	l := mustAcquire(t, b, k, "worker-a", longTTL)
	forged := l
	forged.ID = lease.NewID()
	if _, err := b.Renew(ctxFor(t), forged, longTTL); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Renew with a wrong ID: err = %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctxFor(t), forged); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Release with a wrong ID: err = %v, want ErrNotHeld", err)
	}
	wrongToken := l
	wrongToken.Token = l.Token + 1
	if err := b.Release(ctxFor(t), wrongToken); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("Release with a wrong token: err = %v, want ErrNotHeld", err)
	}
	if got, err := b.Get(ctxFor(t), k); err != nil || got.Token != l.Token {
		t.Fatalf("forged calls disturbed the lease: Get = %+v, %v", got, err)
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
	if err := b.Release(ctxFor(t), a); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Release of the superseded lease: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Renew(ctxFor(t), a, longTTL); !errors.Is(err, lease.ErrNotHeld) {
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
	if err := b.Release(ctxFor(t), l); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("second Release: err = %v, want ErrNotHeld", err)
	}
	if _, err := b.Get(ctxFor(t), k); !errors.Is(err, lease.ErrNotFound) {
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
				case !errors.Is(err, lease.ErrHeld):
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
	deadline := time.Now().Add(30 * time.Second)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got := 0; got < perWorker && time.Now().Before(deadline); {
				l, err := b.Acquire(ctxFor(t), k, fmt.Sprintf("w%d", i), longTTL)
				if errors.Is(err, lease.ErrHeld) {
					time.Sleep(time.Duration(i+1) * 100 * time.Microsecond)
					continue
				}
				if err != nil {
					t.Errorf("worker %d: Acquire: %v", i, err)
					return
				}
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
		t.Fatalf("only %d of %d acquisitions in 30 s", len(tokens), workers*perWorker)
	}
}

func (s *suite) getAndList(t *testing.T, b lease.Backend) {
	base := key(t, "list")
	ka, kb, kc := base+"/a", base+"/b", base+"/c"
	other := base + "x/a" // shares the string prefix base+"/"? no: a sibling
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
	if !got.ID.IsZero() {
		t.Error("Get returned the secret ID")
	}
	if _, err := b.Get(ctxFor(t), base+"/none"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get of a free key: err = %v, want ErrNotFound", err)
	}
	if err := b.Release(ctxFor(t), lc); err != nil {
		t.Fatal(err)
	}
	list, err := b.List(ctxFor(t), base+"/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
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
	empty, err := b.List(ctxFor(t), base+"/zzz")
	if err != nil || len(empty) != 0 {
		t.Errorf("List of an unused prefix = %v, %v; want none", empty, err)
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
		list, err := b.List(ctxFor(t), k)
		if err != nil || len(list) != 1 || list[0].Key != k {
			t.Errorf("List(%q) = %+v, %v", k, list, err)
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
		if !errors.Is(err, lease.ErrInvalid) {
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
	check(t, "Acquire with empty owner", func() error { _, err := b.Acquire(ctx, key(t, "o"), "", longTTL); return err })
	for _, ttl := range badTTLs {
		check(t, fmt.Sprintf("Acquire with ttl %v", ttl), func() error { _, err := b.Acquire(ctx, key(t, "ttl"), "o", ttl); return err })
		check(t, fmt.Sprintf("Renew with ttl %v", ttl), func() error { _, err := b.Renew(ctx, valid, ttl); return err })
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
	l, err := wa.AcquireWait(ctxFor(t), k, "after-expiry", longTTL)
	if err != nil {
		t.Fatalf("AcquireWait across an expiry: %v", err)
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
	if _, err := wa.AcquireWait(ctx, k, "impatient", longTTL); err == nil {
		t.Fatal("AcquireWait with an expiring context acquired a held key")
	}
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctxFor(t), k, "next", longTTL); err != nil {
		t.Fatalf("the impatient waiter left the key held: %v", err)
	}
}

func (s *suite) notifier(t *testing.T, b lease.Backend) {
	n := b.(lease.Notifier)
	k := key(t, "notify")
	l := mustAcquire(t, b, k, "holder", longTTL)
	woke := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			err := n.WaitChange(ctx, k)
			if err != nil {
				woke <- err
				return
			}
			if _, err := b.Get(ctx, k); errors.Is(err, lease.ErrNotFound) {
				woke <- nil
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := b.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitChange: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChange did not return within 10 s of a release")
	}
	t.Logf("woken %v after the release", time.Since(start))
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
	if _, err := b.Acquire(ctxFor(t), held, "thief", longTTL); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("after reopen a held lease was handed out: err = %v", err)
	}
	if _, err := b.Renew(ctxFor(t), h, longTTL); err != nil {
		t.Fatalf("after reopen the holder cannot renew: %v", err)
	}
}
