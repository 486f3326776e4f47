// Package memstore is an in-memory lease.Backend: the seed's LeaseStore grown
// up. Leases live in key-sharded maps, each shard with its own lock, token
// counter and ID generator; waiters queue per key and are handed the lease in
// arrival order on release or expiry. Nothing survives the process, so use it
// for tests, simulations and single-process programs; boltstore is the
// durable embedded backend.
//
// An acquire+release pair costs two shard lock round trips, two clock
// reads, two hashes and map lookups, and one ID from a batch of AES-CTR
// keystream; it allocates nothing once a key's entry exists. docs/BENCHMARKS.md
// has the figures.
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/leasehq/lease"
)

const shardCount = 64 // a power of two

// Store is an in-memory lease.Backend. The zero value is not usable; call New.
type Store struct {
	clock    lease.Clock // nil: the real clock, read through base
	base     time.Time   // origin of the store's clock: offsets are from it
	baseWall int64       // base.UnixNano(), the origin for an injected clock
	seed     maphash.Seed
	shards   [shardCount]paddedShard
}

var (
	_ lease.Backend      = (*Store)(nil)
	_ lease.WaitAcquirer = (*Store)(nil)
)

// shard holds the keys that hash to it. Tokens come from the shard's counter,
// so a key's tokens rise strictly however its entry comes and goes (I1), and
// an entry that holds nothing can be dropped at any time.
//
// The map is keyed by the key's 64-bit hash, the one that chose the shard,
// so a lookup hashes the key once, not twice; the rare keys whose hashes
// collide are chained through entry.next.
type shard struct {
	mu      sync.Mutex
	m       map[uint64]*entry
	counter lease.Token
	sweepAt int
	ids     idSource
}

// paddedShard rounds a shard up to whole pairs of cache lines (the unit
// adjacent-line prefetchers fetch), so goroutines working on keys of
// different shards do not slow each other down by false sharing.
type paddedShard struct {
	shard
	_ [128 - unsafe.Sizeof(shard{})%128]byte
}

type entry struct {
	l       lease.Lease // l.Key always; the rest is the current generation while held is true
	held    bool
	exp     time.Duration // expiry on the store's clock, as an offset from base
	next    *entry        // the next entry whose key has the same hash
	waiters []*waiter     // FIFO
	timer   lease.Timer   // pending expiry check while waiters wait
	timerAt time.Duration // when timer fires
}

type waiter struct {
	owner string
	ttl   time.Duration
	ch    chan lease.Lease // buffered: the grant never blocks the granter
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store judge expiry on clk instead of the real clock,
// for tests and simulations. clk's readings are compared by their wall time
// (UnixNano), as a fake clock's have no monotonic part; without WithClock the
// store reads the monotonic clock, which wall-clock steps cannot move.
func WithClock(clk lease.Clock) Option { return func(s *Store) { s.clock = clk } }

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{base: time.Now(), seed: maphash.MakeSeed()}
	for _, opt := range opts {
		opt(s)
	}
	if s.clock != nil {
		s.base = s.clock.Now()
	}
	s.baseWall = s.base.UnixNano()
	for i := range s.shards {
		sh := &s.shards[i].shard
		sh.m = make(map[uint64]*entry)
		sh.sweepAt = 1024
		sh.ids.init()
	}
	return s
}

// now returns the store's clock as an offset from base. The real clock is
// read through time.Since, which reads only the monotonic clock. An injected
// clock's reading is taken by its wall time: Time.Sub of two readings
// without monotonic parts costs as much again as the rest of the call.
func (s *Store) now() time.Duration {
	if s.clock == nil {
		return time.Since(s.base)
	}
	return time.Duration(s.clock.Now().UnixNano() - s.baseWall)
}

func (s *Store) afterFunc(d time.Duration, f func()) lease.Timer {
	if s.clock == nil {
		return time.AfterFunc(d, f)
	}
	return s.clock.AfterFunc(d, f)
}

// shard returns key's shard and hash.
func (s *Store) shard(key string) (*shard, uint64) {
	h := maphash.String(s.seed, key)
	return &s.shards[h&(shardCount-1)].shard, h
}

// get returns the entry of key, whose hash is h, or nil.
func (sh *shard) get(h uint64, key string) *entry {
	e := sh.m[h]
	for e != nil && e.l.Key != key {
		e = e.next
	}
	return e
}

// Acquire implements lease.Backend.
func (s *Store) Acquire(_ context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	sh, h := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.get(h, key)
	// Only valid keys and owners are ever stored: a key found in the map,
	// asked for again by the owner of its last lease, needs no checking.
	if e == nil || owner != e.l.Owner {
		if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
			return lease.Lease{}, err
		}
	}
	now := s.now()
	if e == nil {
		e = sh.insert(h, key, now)
	} else if s.expireLocked(sh, e, now); e.held {
		return lease.Lease{}, s.heldError(e)
	}
	s.grantLocked(sh, e, owner, ttl, now)
	return e.l, nil
}

// AcquireWait implements lease.WaitAcquirer: waiters are served in arrival
// order, each handed the lease the moment it is released or expires.
func (s *Store) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	sh, h := s.shard(key)
	sh.mu.Lock()
	now := s.now()
	e := sh.get(h, key)
	if e == nil {
		e = sh.insert(h, key, now)
	} else {
		s.expireLocked(sh, e, now)
	}
	if !e.held {
		s.grantLocked(sh, e, owner, ttl, now)
		l := e.l
		sh.mu.Unlock()
		return l, nil
	}
	if ctx.Err() != nil {
		err := s.heldError(e)
		sh.mu.Unlock()
		return lease.Lease{}, err
	}
	w := &waiter{owner: owner, ttl: ttl, ch: make(chan lease.Lease, 1)}
	e.waiters = append(e.waiters, w)
	s.armLocked(sh, e, now)
	sh.mu.Unlock()

	select {
	case l := <-w.ch:
		return l, nil
	case <-ctx.Done():
	}
	sh.mu.Lock()
	if i := slices.Index(e.waiters, w); i >= 0 {
		e.waiters = slices.Delete(e.waiters, i, i+1)
		sh.mu.Unlock()
		return lease.Lease{}, context.Cause(ctx)
	}
	sh.mu.Unlock()
	// Granted as ctx ended: give it back so the next waiter gets it.
	_ = s.Release(context.Background(), <-w.ch)
	return lease.Lease{}, context.Cause(ctx)
}

// Renew implements lease.Backend.
func (s *Store) Renew(_ context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	sh, h := s.shard(l.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	e, err := s.currentLocked(sh, h, l, now)
	if err != nil {
		return lease.Lease{}, err
	}
	e.exp = now + ttl
	e.l.TTL = ttl
	e.l.Expires = s.base.Add(e.exp)
	return e.l, nil
}

// Release implements lease.Backend.
func (s *Store) Release(_ context.Context, l lease.Lease) error {
	sh, h := s.shard(l.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	e, err := s.currentLocked(sh, h, l, now)
	if err != nil {
		return err
	}
	e.held = false
	if len(e.waiters) > 0 {
		s.grantNextLocked(sh, e, now)
	}
	return nil
}

// Get implements lease.Backend.
func (s *Store) Get(_ context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, err
	}
	sh, h := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.get(h, key)
	if e == nil || !e.held || e.exp <= s.now() {
		return lease.Lease{}, lease.ErrNotFound
	}
	l := e.l
	l.ID = lease.ID{}
	return l, nil
}

// List implements lease.Backend.
func (s *Store) List(_ context.Context, prefix string) ([]lease.Lease, error) {
	var out []lease.Lease
	for i := range s.shards {
		sh := &s.shards[i].shard
		sh.mu.Lock()
		now := s.now()
		for _, e := range sh.m {
			for ; e != nil; e = e.next {
				if e.held && e.exp > now && strings.HasPrefix(e.l.Key, prefix) {
					l := e.l
					l.ID = lease.ID{}
					out = append(out, l)
				}
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b lease.Lease) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// currentLocked returns the entry of l's key if l is its current unexpired
// generation, ErrNotHeld if it is not, and an error matching ErrInvalid if l
// is malformed. An expired generation is retired on the way, handing the key
// to a waiter.
func (s *Store) currentLocked(sh *shard, h uint64, l lease.Lease, now time.Duration) (*entry, error) {
	if e := sh.get(h, l.Key); e != nil {
		s.expireLocked(sh, e, now)
		if e.held && e.l.Token == l.Token && e.l.ID == l.ID {
			return e, nil // a lease the store issued, so well formed
		}
	}
	if err := lease.ValidateLease(l); err != nil {
		return nil, err
	}
	return nil, lease.ErrNotHeld
}

// expireLocked retires e's lease if it has expired by now, and hands the key
// to the first waiter, so nobody can barge ahead of the queue.
func (s *Store) expireLocked(sh *shard, e *entry, now time.Duration) {
	if e.held && e.exp <= now {
		e.held = false
		if len(e.waiters) > 0 {
			s.grantNextLocked(sh, e, now)
		}
	}
}

// grantLocked makes e.l a new generation held by owner.
func (s *Store) grantLocked(sh *shard, e *entry, owner string, ttl, now time.Duration) {
	sh.counter++
	e.held = true
	e.exp = now + ttl
	e.l = lease.Lease{Key: e.l.Key, Owner: owner, Token: sh.counter, ID: sh.ids.next(), TTL: ttl, Expires: s.base.Add(e.exp)}
}

// grantNextLocked hands the free key to the first waiter.
func (s *Store) grantNextLocked(sh *shard, e *entry, now time.Duration) {
	w := e.waiters[0]
	e.waiters[0] = nil
	e.waiters = e.waiters[1:]
	s.grantLocked(sh, e, w.owner, w.ttl, now)
	w.ch <- e.l
	s.armLocked(sh, e, now)
}

// armLocked makes sure an expiry check is pending, no later than the
// current expiry, while anyone waits on a held key, so waiters are served at
// expiry without polling.
func (s *Store) armLocked(sh *shard, e *entry, now time.Duration) {
	if len(e.waiters) == 0 || !e.held || (e.timer != nil && e.timerAt <= e.exp) {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	var t lease.Timer
	t = s.afterFunc(e.exp-now, func() {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if e.timer != t {
			return // replaced by an earlier check
		}
		e.timer = nil
		s.expireLocked(sh, e, s.now())
		s.armLocked(sh, e, s.now())
	})
	e.timer, e.timerAt = t, e.exp
}

func (s *Store) heldError(e *entry) error {
	return &lease.HeldError{Key: e.l.Key, Owner: e.l.Owner, Token: e.l.Token, Expires: e.l.Expires}
}

// insert adds an entry for key, whose hash is h. Every time the map doubles
// past its last sweep, entries that hold nothing are dropped, so memory
// follows the number of live leases at amortised constant cost.
func (sh *shard) insert(h uint64, key string, now time.Duration) *entry {
	if len(sh.m) >= sh.sweepAt {
		sh.sweep(now)
	}
	e := &entry{l: lease.Lease{Key: key}, next: sh.m[h]}
	sh.m[h] = e
	return e
}

// sweep drops the entries that hold nothing and nobody waits for.
func (sh *shard) sweep(now time.Duration) {
	for h, head := range sh.m {
		var kept *entry
		for e := head; e != nil; {
			next := e.next
			if (e.held && e.exp > now) || len(e.waiters) > 0 || e.timer != nil {
				e.next, kept = kept, e
			}
			e = next
		}
		if kept == nil {
			delete(sh.m, h)
		} else {
			sh.m[h] = kept
		}
	}
	sh.sweepAt = max(1024, 2*len(sh.m))
}
