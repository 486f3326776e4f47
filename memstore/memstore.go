// Package memstore is an in-memory lease.Backend: the seed's LeaseStore grown
// up. Each key has an entry with its own lock, token counter and FIFO of
// waiters, found through an index that lookups read without locking, so
// goroutines working on different keys share no written memory and the
// store scales with cores; waiters are handed the lease in arrival order on
// release or expiry, and watchers (Watch) are told of every change, each
// expiry as the store's clock reaches it. Nothing survives the process, so
// use it for tests, simulations and single-process programs; boltstore is
// the durable embedded backend.
//
// An acquire+release pair costs a hash and an index probe (the release of a
// lease as Acquire returned it finds the entry from its key's address
// instead), two lock round trips on the key's entry, two clock reads, and
// one ID from a per-processor batch of AES-CTR keystream; it allocates
// nothing once a key's entry exists. docs/BENCHMARKS.md has the figures.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

// Store is an in-memory lease.Backend. The zero value is not usable; call New.
type Store struct {
	clock    lease.Clock // nil: the real clock, read through base
	base     time.Time   // origin of the store's clock: offsets are from it
	baseWall int64       // base.UnixNano(), the origin for an injected clock
	hasher   hasher      // the index's hash of keys
	idx      index
	ids      idSources
	watch    *watchhub.Hub

	closed    atomic.Bool   // set first by Close: operations fail, timers do nothing
	done      chan struct{} // closed by Close: waiters leave
	closeOnce sync.Once
}

var (
	_ lease.Backend      = (*Store)(nil)
	_ lease.WaitAcquirer = (*Store)(nil)
	_ lease.Watcher      = (*Store)(nil)
)

// entry is one key's state, padded to 128 bytes: that size class's objects
// are 128-byte aligned, two whole cache lines, so two entries never share
// a cache line, and goroutines on different keys do not slow each other
// down by false sharing. It is kept that small because a store may hold
// millions of idle leases (the Scale benchmarks measure bytes per lease):
// what only waiting or watching needs lives in pending.
//
// The room left over holds the key's bytes when they fit (newEntry), so
// that a lookup comparing the key reads the entry's own cache lines, which
// the call goes on to use, rather than a string allocated apart.
type entry struct {
	entryState
	inline [128 - unsafe.Sizeof(entryState{})%128]byte
}

// newEntry returns a new entry for key, whose hash is h, its counter at
// floor; key's bytes are copied into the entry if they fit.
func newEntry(h uint64, key string, floor lease.Token) *entry {
	e := &entry{entryState: entryState{hash: h, key: key, counter: floor}}
	if n := len(key); n <= len(e.inline) {
		copy(e.inline[:], key)
		e.key = unsafe.String(&e.inline[0], n)
	}
	return e
}

// entryState: key and hash never change; the rest is guarded by mu. Tokens
// come from the entry's counter, which a new entry starts at the highest
// token of any dropped one (index.insert), so a key's tokens rise strictly
// however its entry comes and goes (I1).
type entryState struct {
	mu      sync.Mutex
	dead    bool // dropped from the index by a sweep: look the key up again
	held    bool
	watched bool // a watcher was told of the lease held: time its expiry
	hash    uint64
	key     string
	// The last generation granted, current while held is true: its token
	// is counter, and its expiry exp (lease returns it whole).
	owner   string
	id      lease.ID
	ttl     time.Duration
	exp     time.Duration // expiry on the store's clock, as an offset from base
	counter lease.Token   // the last token issued on this key
	p       *pending      // nil while nobody waits and no expiry check is pending
}

// pending is what an entry needs only while someone waits for its key or
// its expiry must be checked: made when first needed, dropped when empty.
type pending struct {
	waiters []*waiter     // FIFO
	timer   lease.Timer   // pending expiry check while waiters wait or watchers watch
	timerAt time.Duration // when timer fires
}

// waiting returns how many wait for e's key.
func (e *entry) waiting() int {
	if e.p == nil {
		return 0
	}
	return len(e.p.waiters)
}

// timer returns e's pending expiry check, or nil.
func (e *entry) timer() lease.Timer {
	if e.p == nil {
		return nil
	}
	return e.p.timer
}

// pend returns e's pending state, made if e has none.
func (e *entry) pend() *pending {
	if e.p == nil {
		e.p = new(pending)
	}
	return e.p
}

// settle drops e's pending state once nobody waits and no check is pending.
func (e *entry) settle() {
	if e.p != nil && len(e.p.waiters) == 0 && e.p.timer == nil {
		e.p = nil
	}
}

// idle reports whether e holds nothing at now and nobody waits for it, so
// that dropping it loses nothing but its counter (kept in index.floor). A
// pending state left empty counts as none.
func (e *entry) idle(now time.Duration) bool {
	return !(e.held && e.exp > now) && (e.p == nil || len(e.p.waiters) == 0 && e.p.timer == nil)
}

// lease returns e's last generation, ID included: the current one while
// e.held.
func (s *Store) lease(e *entry) lease.Lease {
	return lease.Lease{Key: e.key, Owner: e.owner, Token: e.counter, ID: e.id, TTL: e.ttl, Expires: s.base.Add(e.exp)}
}

type waiter struct {
	owner string
	ttl   time.Duration
	ch    chan lease.Lease // buffered: the grant never blocks the granter
}

// Option configures New.
type Option func(*config) error

type config struct {
	clock lease.Clock
}

// WithClock makes the store judge expiry on clk instead of the real clock,
// for tests and simulations. clk's readings are compared by their wall time
// (UnixNano), as a fake clock's have no monotonic part; without WithClock the
// store reads the monotonic clock, which wall-clock steps cannot move. A nil
// clk is refused.
func WithClock(clk lease.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: memstore: WithClock(nil): leave the option out for the real clock", lease.ErrInvalid)
		}
		c.clock = clk
		return nil
	}
}

// New returns an empty Store, or an error matching lease.ErrInvalid if an
// option is.
func New(opts ...Option) (*Store, error) {
	var cfg config
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: memstore: nil option", lease.ErrInvalid)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Store{base: time.Now(), clock: cfg.clock, done: make(chan struct{})}
	s.hasher.init()
	if s.clock != nil {
		s.base = s.clock.Now()
	}
	s.baseWall = s.base.UnixNano()
	s.idx.init()
	s.watch = watchhub.New("memstore", watchhub.DefaultBuffer)
	return s, nil
}

// Close ends the store, as boltstore's Close does: pending AcquireWait
// calls and watchers end with an error matching lease.ErrUnavailable, and
// so does every operation after it; the expiry checks it has pending are
// stopped, so that a closed store keeps no timer (nor, through one, itself)
// alive. The leases it held are gone with it. Close is idempotent and
// returns nil: the error is there so that a Store is an io.Closer like the
// other stores, and code that closes whatever backend it was given closes
// this one too.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		s.watch.Close(errClosed)
		s.idx.entries(func(e *entry) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if t := e.timer(); t != nil {
				t.Stop()
				e.p.timer = nil
			}
		})
	})
	return nil
}

var errClosed = fmt.Errorf("%w: memstore: store is closed", lease.ErrUnavailable)

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

// newID sets *id to a fresh secret ID from the calling processor's source.
func (s *Store) newID(id *lease.ID) { s.ids.fill(id) }

// locked returns key's live entry, locked, or nil if there is none and
// create is false.
func (s *Store) locked(h uint64, key string, create bool) *entry {
	return s.lock(h, key, s.idx.lookup(h, key), create)
}

// hash is key's hash in the index.
func (s *Store) hash(key string) uint64 { return s.hasher.hash(key) }

// lock is locked starting from e, what a lookup of key returned.
func (s *Store) lock(h uint64, key string, e *entry, create bool) *entry {
	for {
		if e == nil {
			if !create {
				return nil
			}
			e = s.idx.insert(h, key, s.now())
		}
		e.mu.Lock()
		if !e.dead {
			return e
		}
		e.mu.Unlock()
		// Swept meanwhile; the key may have a new entry. The sweep may not
		// have published its table yet: find waits for it.
		e = s.idx.find(h, key)
	}
}

// Acquire implements lease.Backend.
func (s *Store) Acquire(_ context.Context, key, owner string, ttl time.Duration) (l lease.Lease, _ error) {
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	if s.closed.Load() {
		return lease.Lease{}, errClosed
	}
	h := s.hash(key)
	e := s.idx.lookup(h, key)
	// Only valid keys and owners are ever stored: a key found in the index,
	// asked for again by the owner of its last lease, needs no checking. A
	// new key is checked before it is inserted; e.owner is read once e
	// is locked. An entry that has never been granted (just inserted by
	// another call, or made afresh after a sweep dropped the one found)
	// stores the empty owner, which is not valid: owner == "" is checked.
	validated := e == nil
	if validated {
		if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
			return lease.Lease{}, err
		}
	}
	e = s.lock(h, key, e, true)
	// No defer: the hot path unlocks by hand, on every way out.
	if !validated && (owner != e.owner || owner == "") {
		if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
			e.mu.Unlock()
			return lease.Lease{}, err
		}
	}
	now := s.now()
	if s.expireLocked(e, now); e.held {
		err := s.heldError(e)
		e.mu.Unlock()
		return lease.Lease{}, err
	}
	s.grantLocked(e, owner, ttl, now)
	// Field by field into the result: s.lease(e) would be built on the
	// stack with 8-byte stores and copied out with 16-byte loads, which
	// cannot be forwarded from them and stall.
	l.Key, l.Owner, l.Token, l.ID, l.TTL, l.Expires = e.key, e.owner, e.counter, e.id, e.ttl, s.base.Add(e.exp)
	e.mu.Unlock()
	return l, nil
}

// AcquireWait implements lease.WaitAcquirer: waiters are served in arrival
// order, each handed the lease the moment it is released or expires.
func (s *Store) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	if s.closed.Load() {
		return lease.Lease{}, errClosed
	}
	e := s.locked(s.hash(key), key, true)
	now := s.now()
	s.expireLocked(e, now)
	if !e.held {
		s.grantLocked(e, owner, ttl, now)
		l := s.lease(e)
		e.mu.Unlock()
		return l, nil
	}
	if ctx.Err() != nil {
		err := s.heldError(e)
		e.mu.Unlock()
		return lease.Lease{}, err
	}
	w := &waiter{owner: owner, ttl: ttl, ch: make(chan lease.Lease, 1)}
	p := e.pend()
	p.waiters = append(p.waiters, w)
	s.armLocked(e, now)
	e.mu.Unlock()

	var err error
	select {
	case l := <-w.ch:
		return l, nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-s.done:
		err = errClosed
	}
	e.mu.Lock()
	if e.p != nil { // it stays while w is in it
		if i := slices.Index(e.p.waiters, w); i >= 0 {
			e.p.waiters = slices.Delete(e.p.waiters, i, i+1)
			e.settle()
			e.mu.Unlock()
			return lease.Lease{}, err
		}
	}
	e.mu.Unlock()
	// Granted as ctx ended: give it back so the next waiter gets it.
	_ = s.Release(context.Background(), <-w.ch)
	return lease.Lease{}, err
}

// Renew implements lease.Backend.
func (s *Store) Renew(_ context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	if s.closed.Load() {
		return lease.Lease{}, errClosed
	}
	now := s.now()
	e, err := s.current(&l, now)
	if err != nil {
		return lease.Lease{}, err
	}
	defer e.mu.Unlock()
	e.exp = now + ttl
	e.ttl = ttl
	s.publishLocked(e, lease.Renewed)
	// A shorter TTL moves the expiry earlier than a pending check: waiters
	// must be served at the new expiry.
	s.armLocked(e, now)
	return s.lease(e), nil
}

// Release implements lease.Backend.
func (s *Store) Release(_ context.Context, l lease.Lease) error {
	if s.closed.Load() {
		return errClosed
	}
	now := s.now()
	e, err := s.current(&l, now)
	if err != nil {
		return err
	}
	e.held = false
	s.publishLocked(e, lease.Released)
	if e.waiting() > 0 {
		s.grantNextLocked(e, now)
	} else if t := e.timer(); t != nil {
		// A watched lease's expiry check: nothing is left to check, and
		// the entry may be swept before the released lease would expire.
		t.Stop()
		e.p.timer = nil // kept: a watched key's next grant arms a check again
	}
	e.mu.Unlock() // by hand, as in Acquire
	return nil
}

// Get implements lease.Backend.
func (s *Store) Get(_ context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, err
	}
	if s.closed.Load() {
		return lease.Lease{}, errClosed
	}
	e := s.locked(s.hash(key), key, false)
	if e == nil {
		return lease.Lease{}, lease.ErrNotFound
	}
	defer e.mu.Unlock()
	if !e.held || e.exp <= s.now() {
		return lease.Lease{}, lease.ErrNotFound
	}
	l := s.lease(e)
	l.ID = lease.ID{}
	return l, nil
}

// List implements lease.Backend. It takes the index's entries in key order
// (see order), then walks them from the cursor, locking one entry at a time
// to read its lease, until it has the page and one lease more. An entry is
// only dropped from the index once it holds nothing, so a lease held
// throughout a walk is in the runs every page takes, and each page takes the
// keys after the last one of the page before: it is seen exactly once.
func (s *Store) List(_ context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, after, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	if s.closed.Load() {
		return lease.ListPage{}, errClosed
	}
	big, small := s.idx.sorted()
	big, small = from(big, prefix, after), from(small, prefix, after)
	var out []lease.Lease
	for len(out) <= limit {
		var e *entry
		switch {
		case len(big) > 0 && (len(small) == 0 || big[0].key < small[0].key):
			e, big = big[0], big[1:]
		case len(small) > 0:
			e, small = small[0], small[1:]
		}
		if e == nil || !strings.HasPrefix(e.key, prefix) {
			break // the runs hold no more keys under prefix
		}
		e.mu.Lock()
		if !e.dead && e.held && e.exp > s.now() {
			l := s.lease(e)
			l.ID = lease.ID{}
			out = append(out, l)
		}
		e.mu.Unlock()
	}
	return lease.PageOf(out, limit), nil
}

// current returns the entry of l's key, locked, if l is its current
// unexpired generation at now; ErrNotHeld if it is not, and an error
// matching ErrInvalid if l is malformed. An expired generation is retired on
// the way, handing the key to a waiter. It takes l by pointer: a Lease is
// 88 bytes, which the compiler copies as five 16-byte moves and a sixth
// overlapping the fifth, and copying a copy loads bytes that two stores
// wrote, which cannot be forwarded and stalls (Release's caller has just
// copied l).
func (s *Store) current(l *lease.Lease, now time.Duration) (*entry, error) {
	e := s.idx.byKeyAddr(l.Key)
	if e != nil {
		if e.mu.Lock(); e.dead {
			e.mu.Unlock()
			e = nil
		}
	}
	if e == nil {
		e = s.locked(s.hash(l.Key), l.Key, false)
	}
	if e != nil {
		s.expireLocked(e, now)
		if e.held && e.counter == l.Token && e.id == l.ID {
			return e, nil // a lease the store issued, so well formed
		}
		e.mu.Unlock()
	}
	if err := lease.ValidateLease(*l); err != nil {
		return nil, err
	}
	return nil, lease.ErrNotHeld
}

// expireLocked retires e's lease if it has expired by now, and hands the key
// to the first waiter, so nobody can barge ahead of the queue. The test is
// inlined; expire does the work.
func (s *Store) expireLocked(e *entry, now time.Duration) {
	if e.held && e.exp <= now {
		s.expire(e, now)
	}
}

func (s *Store) expire(e *entry, now time.Duration) {
	e.held = false
	s.publishLocked(e, lease.Expired)
	if e.waiting() > 0 {
		s.grantNextLocked(e, now)
	}
}

// grantLocked makes e's next generation, held by owner.
func (s *Store) grantLocked(e *entry, owner string, ttl, now time.Duration) {
	e.counter++
	e.held = true
	e.exp = now + ttl
	e.owner = owner
	s.newID(&e.id)
	e.ttl = ttl
	if s.publishLocked(e, lease.Acquired); e.watched {
		s.armLocked(e, now)
	}
}

// grantNextLocked hands the free key to the first waiter.
func (s *Store) grantNextLocked(e *entry, now time.Duration) {
	p := e.p
	w := p.waiters[0]
	p.waiters[0] = nil
	p.waiters = p.waiters[1:]
	s.grantLocked(e, w.owner, w.ttl, now)
	w.ch <- s.lease(e)
	s.armLocked(e, now)
	e.settle()
}

// armLocked makes sure an expiry check is pending, no later than the
// current expiry, while anyone waits on a held key or watches it, so waiters
// are served and watchers told at expiry without polling.
func (s *Store) armLocked(e *entry, now time.Duration) {
	if !e.held || (e.waiting() == 0 && !e.watched) || (e.timer() != nil && e.p.timerAt <= e.exp) {
		return
	}
	if s.closed.Load() {
		return // Close stops the checks, and no new one starts
	}
	if old := e.timer(); old != nil {
		old.Stop()
	}
	var t lease.Timer
	t = s.afterFunc(e.exp-now, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.timer() != t || s.closed.Load() {
			return // replaced by an earlier check, or the store closed
		}
		e.p.timer = nil
		if !s.watch.Active() {
			e.watched = false // nobody to tell: no more checks for them
		}
		s.expireLocked(e, s.now())
		s.armLocked(e, s.now())
		e.settle()
	})
	p := e.pend()
	p.timer, p.timerAt = t, e.exp
}

func (s *Store) heldError(e *entry) error {
	return &lease.HeldError{Key: e.key, Owner: e.owner, Token: e.counter, Expires: s.base.Add(e.exp)}
}
