package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/benchutil"
	"github.com/leasehq/lease/internal/redistest"
)

// BenchmarkFloorCost measures what the token floor (Bump) costs a grant:
// the acquire and release scripts as they are (a grant GETs the floor)
// beside the same with the floor taken out of acquire.lua, on a durable
// server (appendfsync always), interleaved (benchutil.Interleave) so that
// both meet the same moments of the machine. Each client has its own key,
// so every acquire grants.
func BenchmarkFloorCost(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer rdb.Close()
	s, err := New(ctx, rdb, WithNamespace("bench-"+lease.NewID().Reveal()[:8]))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	start := strings.Index(acquireSrc, "local floor = ")
	end := strings.Index(acquireSrc, "\nif token >= ")
	if start < 0 || end < start {
		b.Fatal("the floor's lines are not where the benchmark looks for them in acquire.lua")
	}
	bare := redis.NewScript(acquireSrc[:start] + acquireSrc[end:])
	ms := (10 * time.Second).Milliseconds()
	pair := func(acq *redis.Script, key string) error {
		id := lease.NewID()
		v, err := acq.Run(ctx, rdb, s.acquireKeys(key), id.Reveal(), "bench", ms, s.changesArg).Text()
		if err != nil {
			return err
		}
		lv, err := parseValue(v)
		if err != nil {
			return err
		}
		l := lease.Lease{Key: key, Token: lv.token, ID: id}
		n, err := releaseScript.Run(ctx, rdb, []string{s.leaseKey(key)}, proof(l), s.channelArg, key, s.changesArg).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("release of %q found it taken", key)
		}
		return err
	}
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			benchutil.Interleave(b, clients, []benchutil.Impl{
				{Name: "floor", Op: func(w int) error { return pair(acquireScript, fmt.Sprintf("floor/%d", w)) }},
				{Name: "no-floor", Op: func(w int) error { return pair(bare, fmt.Sprintf("bare/%d", w)) }},
			})
		})
	}
}
