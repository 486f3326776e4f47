package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/testkit/benchutil"
)

// BenchmarkFloorCost measures what the token floor (Bump) costs a grant:
// pgstore's Acquire+Release as it is beside the same with the floor taken
// out of the acquire statement (tokens as before schema version 2),
// interleaved (benchutil.Interleave) so that both meet the same moments of
// the machine. Each client has its own key, so every acquire grants: on a
// key with a row and on a new key each time; both read the floor, with the
// store id check (queries.go).
func BenchmarkFloorCost(b *testing.B) {
	db := newTestDB(b, 40)
	ctx := context.Background()
	floored := db.store(b)
	bare := db.store(b)
	bare.q = withoutFloor(bare.n, bare.q)
	if strings.Contains(bare.q.acquire.one+bare.q.acquire.many, "token_floor") {
		b.Fatal("withoutFloor left the floor in the acquire statement")
	}
	pair := benchPairs(b, ctx, floored, bare)
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			benchutil.Interleave(b, clients, []benchutil.Impl{
				{Name: "floor", Op: func(w int) error { return pair(floored, fmt.Sprintf("bench/floor/%d", w)) }},
				{Name: "no-floor", Op: func(w int) error { return pair(bare, fmt.Sprintf("bench/bare/%d", w)) }},
			})
		})
	}
	// A new key per pair: every acquire inserts a row.
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/new-keys/interleaved", clients), func(b *testing.B) {
			var nf, nb [32]int
			benchutil.Interleave(b, clients, []benchutil.Impl{
				{Name: "floor", Op: func(w int) error {
					nf[w]++
					return pair(floored, fmt.Sprintf("bench/floor-new/%d/%d/%d", clients, w, nf[w]))
				}},
				{Name: "no-floor", Op: func(w int) error {
					nb[w]++
					return pair(bare, fmt.Sprintf("bench/bare-new/%d/%d/%d", clients, w, nb[w]))
				}},
			})
		})
	}
}

// withoutFloor returns q with the token floor, and the store id check that
// comes with it, taken out of the acquire statement: a grant's token is the
// row's + 1, a new key's 1. The floor is 0 there, computed from the store id
// parameter only so that the statement takes the same arguments.
func withoutFloor(n names, q queries) queries {
	strip := func(sql string) string {
		return strings.ReplaceAll(sql, floorExpr(n), `(length($6::text) * 0)`)
	}
	q.acquire.one, q.acquire.many = strip(q.acquire.one), strip(q.acquire.many)
	return q
}
