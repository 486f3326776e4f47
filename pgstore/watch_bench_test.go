package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/benchutil"
)

// BenchmarkWatchNotifyCost measures what Watch costs a store nobody
// watches: pgstore's Acquire+Release as it is (each statement NOTIFYs its
// change) beside the same with the NOTIFY taken out of the statements,
// interleaved (benchutil.Interleave) so that both meet the same moments of
// the machine. Each client has its own key.
func BenchmarkWatchNotifyCost(b *testing.B) {
	db := newTestDB(b, 40)
	ctx := context.Background()
	told := db.store(b)
	quiet := db.store(b)
	quiet.q = withoutTold(quiet.q)
	for _, st := range []stmt{quiet.q.acquire, quiet.q.renew, quiet.q.release} {
		if strings.Contains(st.one+st.many, "pg_notify($5") {
			b.Fatal("withoutTold left a watch NOTIFY in a statement")
		}
	}
	pair := benchPairs(b, ctx, told, quiet)
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			benchutil.Interleave(b, clients, []benchutil.Impl{
				{Name: "notify", Op: func(w int) error { return pair(told, fmt.Sprintf("bench/notify/%d", w)) }},
				{Name: "no-notify", Op: func(w int) error { return pair(quiet, fmt.Sprintf("bench/quiet/%d", w)) }},
			})
		})
	}
	// A Store per client, as 32 processes would have: their statements do
	// not share a transaction, so their commits meet at the server, where
	// notifying ones take PostgreSQL's global NOTIFY lock in turn, each
	// through its WAL flush.
	b.Run("c=32/stores=32/interleaved", func(b *testing.B) {
		const clients = 32
		var told32, quiet32 [clients]*Store
		for w := range clients {
			told32[w], quiet32[w] = db.store(b), db.store(b)
			quiet32[w].q = withoutTold(quiet32[w].q)
		}
		benchutil.Interleave(b, clients, []benchutil.Impl{
			{Name: "notify", Op: func(w int) error { return pair(told32[w], fmt.Sprintf("bench/notify32/%d", w)) }},
			{Name: "no-notify", Op: func(w int) error { return pair(quiet32[w], fmt.Sprintf("bench/quiet32/%d", w)) }},
		})
	})
}

// withoutTold returns q with the watch NOTIFYs taken out of its statements
// (the parameter stays referenced, so the statements take the same
// arguments).
func withoutTold(q queries) queries {
	strip := func(sql string) string {
		for _, kind := range []string{"'a'", "'n'", "'r'"} {
			for _, exp := range []string{"l.expires_at", "o.expires_at"} {
				sql = strings.ReplaceAll(sql, told(kind, exp, "$5"), "left($5::text, 0)")
			}
		}
		return sql
	}
	for _, st := range []*stmt{&q.acquire, &q.renew, &q.release} {
		st.one, st.many = strip(st.one), strip(st.many)
	}
	return q
}

// benchPairs makes stores' tables and returns one acquire+release of a key
// on a store, trying again while the key is held.
func benchPairs(b *testing.B, ctx context.Context, stores ...*Store) func(s *Store, key string) error {
	for _, s := range stores {
		if err := s.ensureSchema(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return func(s *Store, key string) error {
		for {
			l, err := s.Acquire(ctx, key, "bench", benchTTL)
			if errors.Is(err, lease.ErrHeld) {
				continue
			}
			if err != nil {
				return err
			}
			return s.Release(ctx, l)
		}
	}
}
