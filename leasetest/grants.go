package leasetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// Grants acquires key n times on b (owner "o", TTL a minute), releasing
// each lease but the last, or every one if release, and returns them: a
// history of tokens for tests of what a backend issues next (a restore, a
// bump). It fails t at the first error.
func Grants(t testing.TB, ctx context.Context, b lease.Backend, key string, n int, release bool) []lease.Lease {
	t.Helper()
	var out []lease.Lease
	for i := range n {
		l, err := b.Acquire(ctx, key, "o", time.Minute)
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		out = append(out, l)
		if release || i < n-1 {
			if err := b.Release(ctx, l); err != nil {
				t.Fatalf("release %q: %v", key, err)
			}
		}
	}
	return out
}

// Highest is the highest token among the leases of every history.
func Highest(histories ...[]lease.Lease) lease.Token {
	var t lease.Token
	for _, h := range histories {
		for _, l := range h {
			t = max(t, l.Token)
		}
	}
	return t
}
