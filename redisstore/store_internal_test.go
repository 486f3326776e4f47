package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// TestAcquireRetryIsIdempotent runs the acquire script twice with one lease
// ID, as go-redis does when it retries a call whose reply was lost: the
// second run must return the first run's grant, not a HeldError and not a
// second token.
func TestAcquireRetryIsIdempotent(t *testing.T) {
	_, s, ctx := newInternalStore(t)
	const k = "retry"
	id := lease.NewID()
	run := func() string {
		t.Helper()
		res, err := acquireScript.Run(ctx, s.rdb, s.acquireKeys(k), s.acquireArgs(id.Reveal(), "owner", 60000)...).Text()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, second := run(), run()
	v1, err1 := parseValue(first)
	v2, err2 := parseValue(second)
	if err1 != nil || err2 != nil || v1.id != id.Reveal() || v2 != v1 {
		t.Fatalf("first run %q (%v), retry %q (%v): want the same grant, carrying the caller's id, twice", first, err1, second, err2)
	}
	if n, err := s.rdb.Get(ctx, s.counterKey(k)).Int64(); err != nil || n != int64(v1.token) {
		t.Fatalf("counter = %d, %v after a retried grant of token %d", n, err, v1.token)
	}
	// A different ID is another caller: it sees the lease held.
	if _, err := s.Acquire(ctx, k, "other", time.Minute); err == nil {
		t.Fatal("another caller acquired a held key")
	}
}

// TestTokenSpaceExhausted checks that a counter near 2^53 issues no token
// from 2^53 up and writes no lease, instead of handing out a token that a
// Lua number or a JSON number cannot carry exactly.
func TestTokenSpaceExhausted(t *testing.T) {
	_, s, ctx := newInternalStore(t)
	const k = "exhausted"
	if err := s.rdb.Set(ctx, s.counterKey(k), uint64(lease.MaxToken)-2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, k, "o", time.Minute)
	if err != nil || l.Token != lease.MaxToken-1 {
		t.Fatalf("last token: %+v, %v; want token 2^53 - 1", l, err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, k, "o", time.Minute); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Fatalf("Acquire past 2^53: err = %v, want token space exhausted", err)
	}
	if n, _ := s.rdb.Exists(ctx, s.leaseKey(k)).Result(); n != 0 {
		t.Fatal("an exhausted Acquire wrote a lease")
	}
}

// TestTokenLimitInScript keeps the limit acquire.lua holds as a literal
// equal to tokenLimit.
func TestTokenLimitInScript(t *testing.T) {
	lit := strconv.FormatUint(tokenLimit, 10)
	if !strings.Contains(acquireSrc, "if token >= "+lit+" then") {
		t.Fatalf("acquire.lua does not compare the token with %s (tokenLimit)", lit)
	}
}

func TestKeyNames(t *testing.T) {
	s := &Store{ns: "ns"}
	for _, k := range []string{"a", "a}b", "a{b}c", "%7D", "%", "}}}", "*?[]\\"} {
		lk, ck := s.leaseKey(k), s.counterKey(k)
		// The hash tag is what lies between the first '{' and the next '}'.
		tag := func(name string) string {
			i := strings.IndexByte(name, '{')
			j := strings.IndexByte(name[i+1:], '}')
			return name[i+1 : i+1+j]
		}
		if tag(lk) != tag(ck) {
			t.Errorf("key %q: lease tag %q, counter tag %q", k, tag(lk), tag(ck))
		}
		if got, ok := s.userKey(lk); !ok || got != k {
			t.Errorf("userKey(leaseKey(%q)) = %q, %v", k, got, ok)
		}
	}
	if s.leaseKey("a}b") == s.leaseKey("a%7Db") {
		t.Error("two keys share a lease key name")
	}
}

// TestReleasePublishesOnlyWhenWanted checks that a release nobody waits for
// publishes nothing, and that one a WaitChange marked publishes its key. A
// raw subscriber on the release channel sees messages in the order they
// were published, so if the unwanted release had published, its key would
// arrive before the wanted one's.
func TestReleasePublishesOnlyWhenWanted(t *testing.T) {
	srv, s, ctx := newInternalStore(t)
	ps := srv.Client(t).Subscribe(ctx, s.channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}

	quiet, err := s.Acquire(ctx, "quiet", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, quiet); err != nil {
		t.Fatal(err)
	}

	awaited, err := s.Acquire(ctx, "awaited", "h", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- s.WaitChange(ctx, "awaited") }()
	waitMarked(t, s, "awaited")
	// A renewal rewrites the lease and must keep the waiter's mark.
	if awaited, err = s.Renew(ctx, awaited, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, awaited); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	msg, err := ps.ReceiveMessage(rctx)
	if err != nil {
		t.Fatalf("no message on the release channel within 10 s of a wanted release: %v", err)
	}
	if msg.Payload != "awaited" {
		t.Fatalf("first message on the release channel is %q, want \"awaited\" (a release nobody waited for published)", msg.Payload)
	}
	if err := <-woke; err != nil {
		t.Fatalf("WaitChange: %v", err)
	}
}

// TestWantKeepsExpiry checks that marking a lease as wanted (SETRANGE in
// place) leaves its PX expiry alone: a lost expiry would make the lease
// live for ever.
func TestWantKeepsExpiry(t *testing.T) {
	_, s, ctx := newInternalStore(t)
	if _, err := s.Acquire(ctx, "k", "h", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := wantScript.Run(ctx, s.rdb, []string{s.leaseKey("k")}).Int64(); err != nil || n < 1 || n > time.Minute.Milliseconds() {
		t.Fatalf("want on a held lease = %d, %v; want its remaining ms, 1 to 60000", n, err)
	}
	if d, err := s.rdb.PTTL(ctx, s.leaseKey("k")).Result(); err != nil || d <= 0 || d > time.Minute {
		t.Fatalf("PTTL after want = %v, %v; want the lease's remaining minute", d, err)
	}
	if n, err := wantScript.Run(ctx, s.rdb, []string{s.leaseKey("free")}).Int64(); err != nil || n != 0 {
		t.Fatalf("want on a free key = %d, %v; want 0", n, err)
	}
	if n, err := s.rdb.Exists(ctx, s.leaseKey("free")).Result(); err != nil || n != 0 {
		t.Fatalf("want on a free key created it (EXISTS = %d, %v)", n, err)
	}
}

// TestWaiterAfterReleaseAndRegrant covers the race of a waiter that marks
// only after the lease it saw was released and granted to someone else: it
// marks the new lease, and that lease's release wakes it.
func TestWaiterAfterReleaseAndRegrant(t *testing.T) {
	_, s, ctx := newInternalStore(t)
	const k = "regrant"
	first, err := s.Acquire(ctx, k, "first", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, k, "waiter", time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire of a held key: %v", err)
	}
	// The holder releases (nobody marked it: no PUBLISH) and another takes
	// the key before the waiter gets to WaitChange.
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	second, err := s.Acquire(ctx, k, "second", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- s.WaitChange(ctx, k) }()
	waitMarked(t, s, k)
	select {
	case err := <-woke:
		t.Fatalf("WaitChange returned %v while the key is held", err)
	default:
	}
	if err := s.Release(ctx, second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("WaitChange: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken within 10 s of the release of the lease it marked")
	}
}

// waitMarked waits until a WaitChange has marked key's lease as wanted.
func waitMarked(t *testing.T, s *Store, key string) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() error {
		w, err := s.rdb.GetRange(context.Background(), s.leaseKey(key), 0, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		if w != "1" {
			return fmt.Errorf("lease of %q not marked as wanted (mark %q)", key, w)
		}
		return nil
	})
}

// TestParseValue reads the value format of value.go, and the format of
// earlier versions (the expiry in place of the grant time), which stores
// of both versions may meet on one server.
func TestParseValue(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	grant := time.UnixMicro(1796248430_000042)
	for _, c := range []struct {
		v       string
		token   lease.Token
		expires time.Time
		owner   string
		wanted  bool
	}{
		{"0" + id + "7:1796248430.000042:1500:own:er", 7, grant.Add(1500 * time.Millisecond), "own:er", false},
		{"1" + id + "9007199254740991:1796248430.000042:1:o", lease.MaxToken - 1, grant.Add(time.Millisecond), "o", true},
		{"0" + id + "7:1796248431500042:1500:o", 7, grant.Add(1500 * time.Millisecond), "o", false}, // earlier format
	} {
		v, err := parseValue(c.v)
		if err != nil || v.id != id || v.token != c.token || !v.expires.Equal(c.expires) || v.owner != c.owner || v.wanted != c.wanted {
			t.Errorf("parseValue(%q) = %+v, %v; want token %d, expiry %v, owner %q", c.v, v, err, c.token, c.expires, c.owner)
		}
	}
	for _, bad := range []string{
		"0" + id + "7:1796248430.42:1500:o",      // microseconds not six digits
		"0" + id + "7:1796248430.0000042:1500:o", // nor seven
		"0" + id + "7:1796248430.-00042:1500:o",
		"0" + id + "7:.000042:1500:o",
		"0" + id + "7:1796248430.000042:0:o",
		"0" + id + "0:1796248430.000042:1500:o",
		"0" + id + "7:1796248430.000042:1500:",
		"0" + id + "7:1796248430.000042:1500",
		"2" + id + "7:1796248430.000042:1500:o",
	} {
		if v, err := parseValue(bad); err == nil {
			t.Errorf("parseValue(%q) = %+v, want an error", bad, v)
		}
	}
}

// TestExpiryFromServerTime checks that a grant's and a renewal's expiry is
// the server's TIME during the call plus the TTL.
func TestExpiryFromServerTime(t *testing.T) {
	_, s, ctx := newInternalStore(t)
	const ttl = 1500 * time.Millisecond
	for range 20 { // TIME's microseconds take every length from 1 to 6 digits now and then
		before, err1 := s.rdb.Time(ctx).Result()
		l, err2 := s.Acquire(ctx, "k", "o", ttl)
		r, err3 := s.Renew(ctx, l, 2*ttl)
		after, err4 := s.rdb.Time(ctx).Result()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		if l.Expires.Before(before.Add(ttl)) || l.Expires.After(after.Add(ttl)) {
			t.Fatalf("grant expires %v, want server TIME %v..%v plus %v", l.Expires, before, after, ttl)
		}
		if r.Expires.Before(l.Expires.Add(ttl)) || r.Expires.After(after.Add(2*ttl)) {
			t.Fatalf("renewal expires %v, want after %v and by %v", r.Expires, l.Expires.Add(ttl), after.Add(2*ttl))
		}
		g, err := s.Get(ctx, "k")
		if err != nil || !g.Expires.Equal(r.Expires) {
			t.Fatalf("Get = %+v, %v; want the renewal's expiry %v", g, err, r.Expires)
		}
		if err := s.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProof(t *testing.T) {
	l := lease.Lease{ID: lease.NewID(), Token: lease.MaxToken}
	if got, want := proof(l), l.ID.Reveal()+strconv.FormatUint(uint64(l.Token), 10)+":"; got != want {
		t.Fatalf("proof = %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = proof(l) }); n > 1 {
		t.Errorf("proof allocates %v times, want 1", n)
	}
}

// newInternalStore starts a server and returns it with a Store on it, in a
// namespace of its own, and a context for the test's calls; both end in
// cleanup.
func newInternalStore(t *testing.T) (*redistest.Server, *Store, context.Context) {
	t.Helper()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := New(srv.Client(t), WithNamespace("t-"+lease.NewID().Reveal()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return srv, s, ctx
}
