package scalebench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/memstore"
)

// idleLeases is how many idle leases the Scale benchmarks hold:
// LEASE_SCALE_LEASES, or a million.
func idleLeases(tb testing.TB) int {
	v := os.Getenv("LEASE_SCALE_LEASES")
	if v == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("LEASE_SCALE_LEASES=%q: want a positive count", v)
	}
	return n
}

// idleKey is the name of idle lease i: 12 bytes, as "jobs/1234567" is.
func idleKey(i int) string { return fmt.Sprintf("idle/%07d", i) }

// activeKeys are the keys the pairs cycle through: few enough to stay in
// cache, so that what the idle leases cost shows.
var activeKeys = func() []string {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("active/%04d", i)
	}
	return keys
}()

// heapGrowth returns how many heap bytes fill leaves allocated.
func heapGrowth(fill func()) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fill()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}

// fullMemstore returns a memstore holding n idle leases (TTL a day) and
// the heap bytes each took.
func fullMemstore(tb testing.TB) (*memstore.Store, float64) {
	n := idleLeases(tb)
	ctx := context.Background()
	var s *memstore.Store
	grown := heapGrowth(func() {
		s = memtest.New(tb)
		for i := range n {
			if _, err := s.Acquire(ctx, idleKey(i), "worker-1", lease.MaxTTL); err != nil {
				tb.Fatal(err)
			}
		}
	})
	return s, grown / float64(n)
}

// floorRecord is what a lease is at the least: its owner, token, secret,
// TTL and expiry.
type floorRecord struct {
	owner    string
	token    lease.Token
	id       lease.ID
	ttl, exp time.Duration
}

// mapFloor is the same fields in a Go map under one lock, and nothing else:
// no lock per key, no waiters, no watchers, no token kept past a release.
type mapFloor struct {
	mu sync.Mutex
	m  map[string]floorRecord
}

func (f *mapFloor) pair(key string, now time.Duration) {
	f.mu.Lock()
	f.m[key] = floorRecord{owner: "bench", token: 1, id: lease.ID{2}, ttl: time.Minute, exp: now + time.Minute}
	f.mu.Unlock()
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
}

// BenchmarkCompareScaleMemstore: acquire+release pairs on 1,024 keys of
// their own in an empty memstore and in one holding a million idle leases,
// and the heap bytes each idle lease takes, beside the same fields in a
// plain Go map.
func BenchmarkCompareScaleMemstore(b *testing.B) {
	ctx := context.Background()
	pairs := func(b *testing.B, s *memstore.Store) {
		i := 0
		for b.Loop() {
			l, err := s.Acquire(ctx, activeKeys[i&1023], "bench", time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Release(ctx, l); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	full, per := fullMemstore(b)
	b.Run("c=1/memstore-empty", func(b *testing.B) { pairs(b, memtest.New(b)) })
	b.Run("c=1/memstore-1M-idle", func(b *testing.B) {
		pairs(b, full)
		b.ReportMetric(per, "B/lease")
	})
	b.Run("c=1/memstore-1M-list-1000", func(b *testing.B) { listPages(b, full, idleLeases(b)) })
	b.Run("c=1/map-floor", func(b *testing.B) {
		n := idleLeases(b)
		var f mapFloor
		per := heapGrowth(func() {
			f.m = make(map[string]floorRecord)
			for i := range n {
				f.m[idleKey(i)] = floorRecord{owner: "worker-1", token: 1, id: lease.ID{1}, ttl: lease.MaxTTL, exp: lease.MaxTTL}
			}
		}) / float64(n)
		start := time.Now()
		i := 0
		for b.Loop() {
			f.pair(activeKeys[i&1023], time.Since(start))
			i++
		}
		b.ReportMetric(per, "B/lease")
		runtime.KeepAlive(f.m)
	})
}

// listPages lists pages of 1,000 of the n idle leases, each starting after
// a key spread over the keyspace, and reports the time per page.
func listPages(b *testing.B, s lease.Backend, n int) {
	ctx := context.Background()
	i := 0
	for b.Loop() {
		after := ""
		if k := (i * 7919) % n; k > 0 {
			after = lease.Cursor(idleKey(k))
		}
		p, err := s.List(ctx, "idle/", lease.Page{Limit: 1000, After: after})
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Leases) == 0 {
			b.Fatalf("an empty page after %q", after)
		}
		i++
	}
}
