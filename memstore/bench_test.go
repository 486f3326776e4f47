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
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// The Compare benchmarks are read by tools/benchreport (`make bench`),
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
//   - memstore-callerclock: a clock whose Now returns a time the caller set
//     (leasetest/fakeclock, whose Now is one atomic load), the seed's
//     conditions (its acquire takes `now` as an argument and reads no clock).
//   - map-mutex: a naive reference point, the seed's logic in Go: one map,
//     one mutex, time.Now, a 128-bit ID from crypto/rand per lease.
//   - clock-cas-floor (Memstore only): the least a real-clock pair must
//     do, and nothing else (see clockCASFloor): two clock reads and two
//     compare-and-swaps, with no key, no ID and no Lease.
//   - backend-floor (Memstore only): clock-cas-floor plus what the
//     lease.Backend API imposes on every store, and nothing else (see
//     backendFloor in floor_internal_test.go): a key to find, a secret ID,
//     a Lease returned and passed back by value. benchreport names it as
//     the floor of the real-clock targets: if it misses a target, no store
//     behind lease.Backend can meet that target on the machine.
//
// In-memory ops take tens of nanoseconds, so they are timed with b.Loop and
// RunParallel, not benchutil.Run (whose per-op timing would double them).

const (
	benchTTL      = time.Minute
	keysPerClient = 1024
)

// pairFunc tries one acquire+release pair on key for client w (0 to
// GOMAXPROCS-1) and reports whether the acquire found the key held (then
// nothing was released).
type pairFunc func(w int, key string) (held bool, err error)

var benchImpls = []struct {
	name         string
	new          func(testing.TB) pairFunc
	distinctOnly bool // not run in MemstoreOneKey
}{
	{name: "memstore", new: func(tb testing.TB) pairFunc { return storePair(memtest.New(tb)) }},
	{name: "memstore-callerclock", new: func(tb testing.TB) pairFunc {
		return storePair(memtest.New(tb, memstore.WithClock(fakeclock.New(time.Unix(1e9, 0)))))
	}},
	{name: "map-mutex", new: func(tb testing.TB) pairFunc { return newNaiveStore().pair }},
	{name: "clock-cas-floor", new: func(tb testing.TB) pairFunc { return newClockCASFloor().pair }, distinctOnly: true},
	{name: "backend-floor", new: newBackendFloorPair, distinctOnly: true},
}

// newBackendFloorPair is the backend-floor row: memstore's backendFloor,
// its table built for every client's keys, called as storePair calls a
// Store.
func newBackendFloorPair(testing.TB) pairFunc {
	var keys []string
	for w := range runtime.GOMAXPROCS(0) {
		keys = append(keys, clientKeys(w, false)...)
	}
	f := memstore.NewBackendFloor(keys)
	ctx := context.Background()
	return func(_ int, key string) (bool, error) {
		l, err := f.Acquire(ctx, key, "bench", benchTTL)
		if errors.Is(err, lease.ErrHeld) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, f.Release(ctx, l)
	}
}

func storePair(s *memstore.Store) pairFunc {
	ctx := context.Background()
	return func(_ int, key string) (bool, error) {
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
			if oneKey && im.distinctOnly {
				continue
			}
			b.Run(fmt.Sprintf("c=%d/%s", c, im.name), func(b *testing.B) {
				benchPairs(b, im.new(b), c, oneKey)
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
	// run does one successful pair for client w, retrying while the key is
	// held.
	run := func(w int, key string) bool {
		for {
			h, err := pair(w, key)
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
			run(w, k)
		}
	}
	if clients == 1 {
		keys := clientKeys(0, oneKey)
		i := 0
		for b.Loop() {
			if !run(0, keys[i%len(keys)]) {
				return
			}
			i++
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(1)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := int(next.Add(1) - 1)
			keys := clientKeys(w, oneKey)
			i := 0
			for pb.Next() {
				if !run(w, keys[i%len(keys)]) {
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

func (s *naiveStore) pair(_ int, key string) (bool, error) {
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

// What memstore's pair costs beyond clockCASFloor, measured on 2026-12-06
// (issue 33) as CPU ns per pair at c=1, each change beside the unchanged
// store and the floor in the same run, on a shared 2-core KVM guest (AMD
// EPYC) where the floor took 60-66 ns, nearly all of it its two clock reads
// (time.Since: 26 ns each), and memstore's median 139-152 before this
// work and 137-144 after, as the load varied. Each row is what removing
// the thing (some of them wrongly, to bound it) saved; the first two were
// kept, and byKeyAddr below.
//
//   - maphash for the index, three calls deep, twice: about 7; keys of up
//     to 16 bytes are now hashed in one call (hash.go).
//   - expireLocked called on every acquire and release: about 2; its test
//     is now inlined.
//   - the secret ID (a sync.Pool of AES-CTR batches): 12-14 when free.
//     crypto/rand.Read costs 54 per ID (vDSO getrandom), one AES block per
//     ID 22 (AES-128) to 29 (AES-256) through crypto/aes, against 15 for
//     the pool and batch; math/rand/v2's global source is 11 but not for
//     secrets. Only sync.Pool gives a per-processor source without
//     linkname into the runtime.
//   - the Lease at 88 bytes, which the caller copies with overlapping
//     16-byte moves that stall: 7-10 when padded to 96, but a padding field
//     shows in %+v (TestIDNeverPrints), and making ID a struct breaks id[:]
//     and lease.ID(b) in every backend.
//   - Release's hash and index probe: about 6 when the entry came from a
//     one-entry cache; index.byKeyAddr, which finds the entry from the
//     address of the key bytes it returned, won 6 (137 to 131) and was
//     kept.
//   - the expiry as a time.Time (base.Add): about 5.
//   - Release's lock: 1-4 with no lock at all, so a lock-free release
//     would not pay for what it would take.
//
// The floor leaves out what the lease.Backend API imposes on any store (a
// key to hash and look up, a secret ID, an 88-byte Lease returned and
// passed back by value): together about 30-35 of the rows above, which is
// why memstore stays above 2× the floor.
//
// Issue 33 again, later on 2026-12-06: what the API imposes is now a row
// of its own, backend-floor (backendFloor in floor_internal_test.go), and
// the levers below were measured as CPU time per pair (user+system time of
// a run of 3M pairs, less that of a run of one, rows in turn, several
// rounds), which the other engineers' load moves less than wall time:
// clock-cas-floor 61-67, backend-floor 107-138 (median 110-125: 1.7-1.9×
// clock-cas-floor, of which the harness's copies of the Lease, which
// stall, are a fifth), memstore before this work 144-155.
//
//   - The ID source's sync.Pool: its Get and Put cost 15 of the 22-24 an ID
//     took through it (7-8 from a source at hand). Each processor's source
//     is now found by pinning the goroutine to its processor
//     (runtime.procPin, kept for linkname callers by go.dev/issue/67401;
//     idSources): 152 to 131, every round lower, and in a later run of six
//     rounds 133 to 127, five lower. Kept; backend-floor uses it too. A ChaCha8 per processor (rand.NewChaCha8) costs 13-16 per ID,
//     crypto/rand.Read 70-78.
//   - Acquire locking the entry it found in line, calling lock only when
//     there is none or it was swept: 125 to 124, rounds either way (noise).
//     Dropped.
//   - now and publishLocked in line: now costs 127 to the inliner
//     (time.Since is inlined into it) and publishLocked 82-83 of 80
//     however written, short of copying their tests into every caller.
//     Dropped untimed.
//   - The key compared in line (two 8-byte loads each side, for 8 to 16
//     bytes) instead of by memequal: lookup then costs 131 and is no longer
//     inlined. Dropped; in backend-floor, no difference beyond noise.
//   - Bounds checks on the path (-d=ssa/check_bce): one per probe of the
//     table, one or two per short key hashed, one per ID taken from a
//     batch, each a compare and a predicted branch. The one idSources
//     added is gone (uint index); the rest left.
//   - The lock: uncontended, sync.Mutex is one compare-and-swap to lock
//     and one atomic add to unlock, and Go has no plain releasing store to
//     unlock with; one compare-and-swap per call would need readers that
//     tolerate torn entries (a sequence lock). What it could win, bounded
//     the other way: a sync.Mutex locked and unlocked (deferred) in each
//     of backend-floor's calls took it from 114 to 117, rounds either way.
//     Not worth a lock-free entry; not tried in memstore.
//   - The token counter (an increment under the lock), the watch checks
//     (one atomic load per publish, with nobody watching) and the key
//     order (order.go: work at insert and at List only, none for a key
//     that has an entry): none shows in a profile of the pair.
//
// Afterwards, six rounds: clock-cas-floor 62, backend-floor 106 (1.72×),
// memstore 127 (2.05× clock-cas-floor, 1.19× backend-floor),
// memstore-callerclock 63. backend-floor itself is above 1.6×
// clock-cas-floor, so issue 33's 1.6× is unreachable here by any store
// behind lease.Backend, and benchreport says so.
// clockCASFloor is the least work any real-clock store must do for an
// acquire+release pair, with nothing else: a monotonic clock read in
// acquire (the expiry is now + TTL) and another in release (I4: the release
// of an expired lease fails with ErrNotHeld, so release must know the
// time), and one atomic compare-and-swap per call to change the key's state,
// for which other goroutines may race. It has no index, no secret ID, no
// Lease to build and no waiters, and each client's state has a cache line
// of its own (the distinct-keys case), so a real store can only cost more.
type clockCASFloor struct {
	base  time.Time
	slots []floorSlot // one per client
}

type floorSlot struct {
	exp atomic.Int64 // 0: free; else the held lease's expiry, ns since base
	_   [56]byte     // a cache line each
}

func newClockCASFloor() *clockCASFloor {
	return &clockCASFloor{base: time.Now(), slots: make([]floorSlot, runtime.GOMAXPROCS(0))}
}

func (f *clockCASFloor) pair(w int, _ string) (bool, error) {
	s := &f.slots[w]
	exp := int64(time.Since(f.base) + benchTTL)
	if !s.exp.CompareAndSwap(0, exp) {
		return true, nil
	}
	if int64(time.Since(f.base)) >= exp {
		return false, errors.New("clock-cas-floor: expired before release")
	}
	if !s.exp.CompareAndSwap(exp, 0) {
		return false, errors.New("clock-cas-floor: release lost its lease")
	}
	return false, nil
}

// TestBenchImplsWork runs every row of the Compare benchmarks a few times,
// so that a broken row fails `make test` rather than a benchmark run, and
// checks that the floor really excludes: a second acquire of a held key
// must find it held.
func TestBenchImplsWork(t *testing.T) {
	for _, im := range benchImpls {
		pair := im.new(t)
		for w := range runtime.GOMAXPROCS(0) {
			for _, k := range clientKeys(w, false)[:3] {
				if held, err := pair(w, k); held || err != nil {
					t.Errorf("%s: client %d, key %s: held=%v err=%v", im.name, w, k, held, err)
				}
			}
		}
	}
	f := newClockCASFloor()
	if !f.slots[0].exp.CompareAndSwap(0, int64(time.Hour)) {
		t.Fatal("clock-cas-floor: a fresh slot is not free")
	}
	if held, err := f.pair(0, "k"); !held || err != nil {
		t.Errorf("clock-cas-floor on a held slot: held=%v err=%v, want held", held, err)
	}
}
