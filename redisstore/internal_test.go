package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/redistest"
)

// TestAcquireRetryIsIdempotent runs the acquire script twice with one lease
// ID, as go-redis does when it retries a call whose reply was lost: the
// second run must return the first run's grant, not a HeldError and not a
// second token.
func TestAcquireRetryIsIdempotent(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, srv.Client(t), WithNamespace("t-"+lease.NewID().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const k = "retry"
	id := lease.NewID()
	run := func() []any {
		t.Helper()
		res, err := acquireScript.Run(ctx, s.rdb, []string{s.leaseKey(k), s.counterKey(k)},
			id.String(), "owner", int64(60000), uint64(lease.MaxToken)).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, second := run(), run()
	if first[0] != int64(1) || second[0] != int64(1) || first[1] != second[1] {
		t.Fatalf("first run %v, retry %v: want the same grant twice", first, second)
	}
	if n, err := s.rdb.Get(ctx, s.counterKey(k)).Int64(); err != nil || n != first[1] {
		t.Fatalf("counter = %d, %v after a retried grant of token %v", n, err, first[1])
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
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, srv.Client(t), WithNamespace("t-"+lease.NewID().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
