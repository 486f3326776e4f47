// Package watchhub fans a backend's lease changes out to its watchers: the
// in-process half of lease.Watcher, for any backend to feed.
//
// A backend publishes each change (Publish) at the point where it orders
// that key's changes: under the key's lock, or from its single writer. A
// watch subscribes (Subscribe) and takes its snapshot (Sub.Held, Sub.Free)
// in the same order: a backend with one writer does both where it
// publishes, so no change falls between them; a backend that locks per key
// records each key's snapshot under that key's lock while changes to other
// keys keep arriving, and the hub drops, per key, the changes that came
// before the key's snapshot (they are in it). Either way, for each key the
// watcher gets its state once and then exactly the changes after it.
//
// Each watcher has a buffer of at most DefaultBuffer unread events. A
// publisher never waits for a reader: a watcher that falls further behind
// is cut off, and reads its buffered events and then one error matching
// lease.ErrUnavailable, so it knows to watch again. Nothing is dropped
// silently. Watch turns a subscription into the iter.Seq2 of
// lease.Watcher.Watch; Expiries times the Expired events of a backend that
// does not announce expiry itself.
//
// A hub with no watchers costs a publisher one atomic load (Active).
package watchhub

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasehq/lease"
)

// DefaultBuffer is how many events a watcher may leave unread before it is
// cut off.
const DefaultBuffer = 1024

// Hub is a backend's set of watchers. It is safe for concurrent use.
type Hub struct {
	name   string // the backend's package name, which starts its errors
	buffer int

	// subs is copied on every change, so that publishers read it without a
	// lock; nil when nobody watches.
	subs atomic.Pointer[[]*Sub]

	mu     sync.Mutex // serialises changes to subs and closed
	closed error      // set by Close: later subscriptions fail with it
}

// New returns a hub whose errors start with name (the backend's package
// name) and whose watchers may leave buffer events unread. buffer must be
// positive.
func New(name string, buffer int) *Hub {
	if buffer < 1 {
		panic(fmt.Sprintf("watchhub: buffer %d is not positive", buffer))
	}
	return &Hub{name: name, buffer: buffer}
}

// Active reports whether anybody watches: a publisher that finds nobody
// need not build its event.
func (h *Hub) Active() bool { return h.subs.Load() != nil }

// Scope is what one watch follows: the keys starting with Prefix, or,
// Exact, the key Prefix alone (lease.KeyWatcher), so that the changes to
// keys that merely start with it never enter the watcher's buffer.
type Scope struct {
	Prefix string
	Exact  bool
}

// Matches reports whether key is in the scope.
func (sc Scope) Matches(key string) bool {
	if sc.Exact {
		return key == sc.Prefix
	}
	return strings.HasPrefix(key, sc.Prefix)
}

// Publish gives the event to every watcher whose scope holds l.Key,
// with a zero ID (I4), and reports whether there was any. It never waits
// for a reader. The caller orders Publish calls for one key as the backend
// ordered the changes.
func (h *Hub) Publish(kind lease.EventKind, l lease.Lease) bool {
	subs := h.subs.Load()
	if subs == nil {
		return false
	}
	l.ID = lease.ID{}
	matched := false
	for _, s := range *subs {
		if s.scope.Matches(l.Key) {
			s.push(lease.Event{Kind: kind, Lease: l})
			matched = true
		}
	}
	return matched
}

// Watched reports whether any watcher's scope holds key.
func (h *Hub) Watched(key string) bool {
	subs := h.subs.Load()
	if subs == nil {
		return false
	}
	for _, s := range *subs {
		if s.scope.Matches(key) {
			return true
		}
	}
	return false
}

// Subscribe adds a watcher of the keys under prefix: SubscribeScope of
// Scope{Prefix: prefix}.
func (h *Hub) Subscribe(prefix string) (*Sub, error) { return h.SubscribeScope(Scope{Prefix: prefix}) }

// SubscribeScope adds a watcher of sc, which receives every Publish in its
// scope from now on, and takes its snapshot (Held, Free) before Watch reads
// it; snapshot entries outside the scope are ignored. It fails with the
// error Close was given once the hub is closed.
func (h *Hub) SubscribeScope(sc Scope) (*Sub, error) {
	s := &Sub{h: h, scope: sc, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed != nil {
		return nil, h.closed
	}
	var subs []*Sub
	if old := h.subs.Load(); old != nil {
		subs = slices.Clone(*old)
	}
	subs = append(subs, s)
	h.subs.Store(&subs)
	return s, nil
}

// Close cuts off every watcher with err, which must match
// lease.ErrUnavailable, and fails later subscriptions with it. The first
// Close's error stands.
func (h *Hub) Close(err error) {
	h.mu.Lock()
	if h.closed == nil {
		h.closed = err
	}
	old := h.subs.Swap(nil)
	h.mu.Unlock()
	if old != nil {
		for _, s := range *old {
			s.fail(err)
		}
	}
}

func (h *Hub) remove(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.subs.Load()
	if old == nil {
		return
	}
	subs := slices.DeleteFunc(slices.Clone(*old), func(x *Sub) bool { return x == s })
	if len(subs) == 0 {
		h.subs.Store(nil)
		return
	}
	h.subs.Store(&subs)
}

// Sub is one watcher's subscription.
type Sub struct {
	h     *Hub
	scope Scope
	wake  chan struct{} // one token: something to read

	mu     sync.Mutex
	q      []item // q[head:] waits for the reader
	head   int
	seq    uint64 // orders pushes and snapshot marks
	marks  []mark // the snapshot, until synced
	synced bool
	err    error // the break, read once q is empty
	closed bool
}

type item struct {
	ev  lease.Event
	seq uint64
}

// mark is one key's state in the snapshot, at seq in the order of the
// events pushed meanwhile.
type mark struct {
	l    lease.Lease // l.Key always; the rest if held
	held bool
	seq  uint64
}

// Prefix returns the prefix watched (the key, for an exact scope).
func (s *Sub) Prefix() string { return s.scope.Prefix }

// Matches reports whether key is in the watch's scope.
func (s *Sub) Matches(key string) bool { return s.scope.Matches(key) }

// Held records in the snapshot that l is held. Called for a key in the
// order the backend publishes that key's changes (under its lock), so that
// the changes published for it before are known to be in the snapshot.
func (s *Sub) Held(l lease.Lease) {
	l.ID = lease.ID{}
	s.addMark(mark{l: l, held: true})
}

// Free records in the snapshot that key is not held, as Held does. A
// backend whose snapshot is taken where it publishes, with no change in
// between, need not call it.
func (s *Sub) Free(key string) { s.addMark(mark{l: lease.Lease{Key: key}}) }

func (s *Sub) addMark(m mark) {
	if !s.scope.Matches(m.l.Key) {
		return // a key that extends an exact scope's: not watched
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced {
		panic("watchhub: snapshot recorded after it was read")
	}
	s.seq++
	m.seq = s.seq
	s.marks = append(s.marks, m)
}

func (s *Sub) push(ev lease.Event) {
	s.mu.Lock()
	switch {
	case s.err != nil || s.closed:
		s.mu.Unlock()
		return
	case len(s.q)-s.head >= s.h.buffer:
		s.err = fmt.Errorf("%w: %s: a watch of %q fell more than %d events behind; watch again", lease.ErrUnavailable, s.h.name, s.scope.Prefix, s.h.buffer)
	default:
		if s.head > 0 && len(s.q) == cap(s.q) { // reuse what the reader has taken
			n := copy(s.q, s.q[s.head:])
			clear(s.q[n:])
			s.q, s.head = s.q[:n], 0
		}
		s.seq++
		s.q = append(s.q, item{ev: ev, seq: s.seq})
	}
	s.mu.Unlock()
	s.signal()
}

func (s *Sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fail cuts the watcher off with err, after what it has buffered.
func (s *Sub) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

// sync ends the snapshot: it returns the leases held, in key order, and
// drops the changes buffered for each key before its snapshot.
func (s *Sub) sync() []lease.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = true
	at := make(map[string]uint64, len(s.marks))
	for _, m := range s.marks {
		at[m.l.Key] = max(at[m.l.Key], m.seq)
	}
	var held []lease.Lease
	for _, m := range s.marks {
		if m.held && at[m.l.Key] == m.seq {
			held = append(held, m.l)
		}
	}
	s.marks = nil
	slices.SortFunc(held, func(a, b lease.Lease) int { return cmp.Compare(a.Key, b.Key) })
	kept := s.q[:s.head]
	for _, it := range s.q[s.head:] {
		if seq, ok := at[it.ev.Lease.Key]; !ok || it.seq > seq {
			kept = append(kept, it)
		}
	}
	clear(s.q[len(kept):])
	s.q = kept
	return held
}

// next returns the next buffered event, or, with ok false, the break
// (nil while the watch is unbroken and nothing waits).
func (s *Sub) next() (ev lease.Event, err error, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == len(s.q) {
		return lease.Event{}, s.err, false
	}
	ev = s.q[s.head].ev
	s.q[s.head] = item{}
	s.head++
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	}
	return ev, nil, true
}

// Close ends the subscription: the hub forgets it and publishers skip it.
// It is idempotent.
func (s *Sub) Close() {
	s.mu.Lock()
	s.closed = true
	s.q, s.head, s.marks = nil, 0, nil
	s.mu.Unlock()
	s.h.remove(s)
}
