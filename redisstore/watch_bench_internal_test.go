package redisstore

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// BenchmarkWatchPublishCost measures what Watch costs a store nobody
// watches: the acquire and release scripts as they are (each PUBLISHes its
// change) beside the same scripts without the PUBLISH, on a durable server
// (appendfsync always), run straight through one client and interleaved
// (benchutil.Interleave) so that both meet the same moments of the machine.
// Each client has its own key.
func BenchmarkWatchPublishCost(b *testing.B) {
	publish := regexp.MustCompile(`(?m)^\s*redis\.call\('PUBLISH', ARGV\[4\].*$`)
	quietAcquire := redis.NewScript(publish.ReplaceAllString(acquireSrc, ""))
	quietRelease := redis.NewScript(publish.ReplaceAllString(releaseSrc, ""))
	if quietAcquire.Hash() == acquireScript.Hash() || quietRelease.Hash() == releaseScript.Hash() {
		b.Fatal("the PUBLISH was not taken out of the scripts")
	}
	benchScriptVariants(b, []scriptVariant{
		{"publish", acquireScript, releaseScript},
		{"no-publish", quietAcquire, quietRelease},
	})
}

// scriptVariant is one way of writing the acquire and release scripts.
type scriptVariant struct {
	name     string
	acq, rel *redis.Script
}

// benchScriptVariants measures an acquire+release pair through each
// variant's scripts, interleaved (benchutil.Interleave) at 1 and 32
// clients, on a durable server (appendfsync always); each client has its
// own key per variant, so every acquire grants.
func benchScriptVariants(b *testing.B, variants []scriptVariant) {
	srv := redistest.Start(b)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer rdb.Close()
	s, err := New(rdb, WithNamespace("bench-"+lease.NewID().Reveal()[:8]))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ms := (10 * time.Second).Milliseconds()
	pair := func(acq, rel *redis.Script, key string) error {
		id := lease.NewID()
		// aofArg "0": no INFO check, as these benchmarks have always run.
		v, err := acq.Run(ctx, rdb, s.acquireKeys(key), id.Reveal(), "bench", ms, s.changesArg, "0", s.idArg).Text()
		if err != nil {
			return err
		}
		lv, err := parseValue(v)
		if err != nil {
			return err
		}
		l := lease.Lease{Key: key, Token: lv.token, ID: id}
		n, err := rel.Run(ctx, rdb, []string{s.leaseKey(key)}, proof(l), s.channelArg, key, s.changesArg).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("release of %q found it taken", key)
		}
		return err
	}
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			impls := make([]benchutil.Impl, len(variants))
			for i, v := range variants {
				impls[i] = benchutil.Impl{Name: v.name, Op: func(w int) error { return pair(v.acq, v.rel, fmt.Sprintf("%s/%d", v.name, w)) }}
			}
			benchutil.Interleave(b, clients, impls)
		})
	}
}
