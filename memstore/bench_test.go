package memstore_test

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/memstore"
)

// The Compare benchmarks are read by internal/benchreport (`make bench`),
// which puts the seed's TypeScript LeaseStore under Node.js (impl seed-node,
// run by scripts/seedbench on the same work) first in each group: it is the
// baseline the targets are stated against.
//
// One op is one acquire+release pair. Groups:
//
//   - Memstore: every client cycles through its own 1024 keys, so clients
//     never contend (c=GOMAXPROCS measures how well the store scales).
//   - MemstoreOneKey: all clients race for one key with try-acquire. One op
//     is one successful pair; an attempt that finds the key held is retried
//     at once and counted in held/op. A lease cannot be held by two
//     goroutines at once, so this measures the hand-over rate of a key.
//
// Impls:
//
//   - memstore: the real clock, read on every call as in production.
//   - memstore-callerclock: a clock whose Now returns a time the caller set,
//     the seed's conditions (its acquire takes `now` as an argument and reads
//     no clock).
//   - map-mutex: a naive reference point, the seed's logic in Go: one map,
//     one mutex, time.Now, a 128-bit ID from crypto/rand per lease.
//
// In-memory ops take tens of nanoseconds, so they are timed with b.Loop and
// RunParallel, not benchutil.Run (whose per-op timing would double them).

const (
	benchTTL      = time.Minute
	keysPerClient = 1024
)

// pairFunc tries one acquire+release pair on key and reports whether the
// acquire found the key held (then nothing was released).
type pairFunc func(key string) (held bool, err error)

var benchImpls = []struct {
	name string
	new  func() pairFunc
}{
	{"memstore", func() pairFunc { return storePair(memstore.New()) }},
	{"memstore-callerclock", func() pairFunc {
		return storePair(memstore.New(memstore.WithClock(&callerClock{now: time.Unix(1e9, 0)})))
	}},
	{"map-mutex", func() pairFunc { return newNaiveStore().pair }},
}

func storePair(s *memstore.Store) pairFunc {
	ctx := context.Background()
	return func(key string) (bool, error) {
		l, err := s.Acquire(ctx, key, "bench", benchTTL)
		if errors.Is(err, lease.ErrHeld) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, s.Release(ctx, l)
	}
}

func BenchmarkCompareMemstore(b *testing.B)       { benchCompare(b, false) }
func BenchmarkCompareMemstoreOneKey(b *testing.B) { benchCompare(b, true) }

func benchCompare(b *testing.B, oneKey bool) {
	clients := []int{1}
	if p := runtime.GOMAXPROCS(0); p > 1 {
		clients = append(clients, p)
	}
	for _, c := range clients {
		for _, im := range benchImpls {
			b.Run(fmt.Sprintf("c=%d/%s", c, im.name), func(b *testing.B) {
				benchPairs(b, im.new(), c, oneKey)
			})
		}
	}
}

// clientKeys returns the keys client w cycles through.
func clientKeys(w int, oneKey bool) []string {
	if oneKey {
		return []string{"bench/one"}
	}
	keys := make([]string, keysPerClient)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/%d/%d", w, i)
	}
	return keys
}

// benchPairs runs b.N successful pairs from clients goroutines; clients is 1
// or GOMAXPROCS (RunParallel's default).
func benchPairs(b *testing.B, pair pairFunc, clients int, oneKey bool) {
	b.ReportAllocs()
	var held atomic.Int64
	// run does one successful pair, retrying while the key is held.
	run := func(key string) bool {
		for {
			h, err := pair(key)
			if err != nil {
				b.Error(err)
				return false
			}
			if !h {
				return true
			}
			if !oneKey {
				b.Errorf("distinct key %q found held", key)
				return false
			}
			held.Add(1)
		}
	}
	// Warm up every key once, so the entries a store keeps per key are
	// allocated before timing starts.
	for w := range clients {
		for _, k := range clientKeys(w, oneKey) {
			run(k)
		}
	}
	if clients == 1 {
		keys := clientKeys(0, oneKey)
		i := 0
		for b.Loop() {
			if !run(keys[i%len(keys)]) {
				return
			}
			i++
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(1)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			keys := clientKeys(int(next.Add(1)-1), oneKey)
			i := 0
			for pb.Next() {
				if !run(keys[i%len(keys)]) {
					return
				}
				i++
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	if oneKey {
		b.ReportMetric(float64(held.Load())/float64(b.N), "held/op")
	}
}

// callerClock is a lease.Clock whose time is set by its user, like the
// seed's `now` argument.
type callerClock struct{ now time.Time }

func (c *callerClock) Now() time.Time { return c.now }

func (c *callerClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	return time.AfterFunc(d, f)
}

// naiveStore is the seed's LeaseStore written plainly in Go, plus a random
// ID: the reference point of the issue ("a naive Go map+mutex with a random
// secret ID").
type naiveStore struct {
	mu     sync.Mutex
	leases map[string]naiveLease
	next   uint64
}

type naiveLease struct {
	owner   string
	token   uint64
	id      [16]byte
	expires time.Time
}

func newNaiveStore() *naiveStore { return &naiveStore{leases: make(map[string]naiveLease)} }

func (s *naiveStore) pair(key string) (bool, error) {
	l, ok := s.acquire(key, "bench", benchTTL)
	if !ok {
		return true, nil
	}
	if !s.release(key, l) {
		return false, errors.New("map-mutex: release failed")
	}
	return false, nil
}

func (s *naiveStore) acquire(key, owner string, ttl time.Duration) (naiveLease, bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.leases[key]; ok && cur.expires.After(now) {
		return naiveLease{}, false
	}
	s.next++
	l := naiveLease{owner: owner, token: s.next, expires: now.Add(ttl)}
	_, _ = crand.Read(l.id[:])
	s.leases[key] = l
	return l, true
}

func (s *naiveStore) release(key string, l naiveLease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.leases[key]
	if !ok || cur.token != l.token || cur.id != l.id {
		return false
	}
	delete(s.leases, key)
	return true
}
