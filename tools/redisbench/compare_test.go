package redisbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// BenchmarkCompareRedis compares, on one durable server (appendonly yes,
// appendfsync always), a pair of PINGs (the limit for two round trips), a
// SET PX + DEL pair (the limit for a durable lease pair: two writes, each
// fsynced before its reply, fewer than any lease can make), redsync Lock+Unlock, redislock Obtain+Release and redisstore
// Acquire+Release, each client on its own key.
func BenchmarkCompareRedis(b *testing.B) {
	benchCompare(b, redistest.Start(b))
}

// BenchmarkCompareRedisVolatile is BenchmarkCompareRedis on a server without
// persistence (redisstore with AllowVolatile).
func BenchmarkCompareRedisVolatile(b *testing.B) {
	benchCompare(b, redistest.Start(b, redistest.Volatile()), redisstore.AllowVolatile())
}

func benchCompare(b *testing.B, srv *redistest.Server, opts ...redisstore.Option) {
	ctx := context.Background()
	// go-redis defaults to 10 connections per CPU; every contender gets the
	// same pool, large enough for 32 clients.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer rdb.Close()
	store, err := redisstore.New(rdb, append(opts, redisstore.WithNamespace(testNamespace()))...)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	rs := redsync.New(goredis.NewPool(rdb))
	locker := redislock.New(rdb)
	const ttl = 10 * time.Second

	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d", clients), func(b *testing.B) {
			ns := testNamespace()
			key := func(impl string, w int) string { return fmt.Sprintf("%s/bench/%s/%d", ns, impl, w) }
			b.Run("ping-pair", func(b *testing.B) {
				benchutil.Run(b, clients, func(int, int) error {
					if err := rdb.Ping(ctx).Err(); err != nil {
						return err
					}
					return rdb.Ping(ctx).Err()
				})
			})
			b.Run("set-del-pair", func(b *testing.B) {
				benchutil.Run(b, clients, func(w, _ int) error {
					k := key("set-del", w)
					if err := rdb.Set(ctx, k, "bench", ttl).Err(); err != nil {
						return err
					}
					return rdb.Del(ctx, k).Err()
				})
			})
			b.Run("redsync", func(b *testing.B) {
				mutexes := make([]*redsync.Mutex, clients)
				for w := range mutexes {
					mutexes[w] = rs.NewMutex(key("redsync", w), redsync.WithExpiry(ttl), redsync.WithTries(1))
				}
				benchutil.Run(b, clients, func(w, _ int) error {
					if err := mutexes[w].LockContext(ctx); err != nil {
						return err
					}
					if ok, err := mutexes[w].UnlockContext(ctx); !ok || err != nil {
						return fmt.Errorf("unlock: %v, %v", ok, err)
					}
					return nil
				})
			})
			b.Run("redislock", func(b *testing.B) {
				benchutil.Run(b, clients, func(w, _ int) error {
					l, err := locker.Obtain(ctx, key("redislock", w), ttl, nil)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				})
			})
			b.Run("redisstore", func(b *testing.B) {
				benchutil.Run(b, clients, func(w, _ int) error {
					l, err := store.Acquire(ctx, key("redisstore", w), "bench", ttl)
					if err != nil {
						return err
					}
					return store.Release(ctx, l)
				})
			})
		})
	}
}

// testNamespace returns a namespace of its own for a benchmark, so that runs
// never see each other's keys, nor those of an earlier run on a server named
// by LEASE_TEST_REDIS_ADDR.
func testNamespace() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:])
}
