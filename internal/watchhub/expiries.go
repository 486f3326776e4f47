package watchhub

import (
	"container/heap"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// Expiries times the Expired events of a backend that keeps expired leases
// until their key is next written (or never learns of an expiry at all),
// so that a watcher hears of one without anybody touching the key. It
// keeps the leases watchers were told are held, and calls due, from one
// timer on the backend's clock set for the earliest expiry, with the keys
// whose expiry the clock has reached. The backend then checks each against
// its own state, as a renewal may have come in between: it reports the
// Expired of a lease that is no longer live (Take tells it whether a
// watcher still waits for that), and calls Track again for one that is
// still live (its clock may lag the timer's). Safe for concurrent use.
type Expiries struct {
	clock lease.Clock
	due   func(keys []string)

	mu      sync.Mutex
	leases  map[string]tracked
	byTime  expiryHeap // may hold stale entries: a key's live one matches leases
	timer   lease.Timer
	timerAt time.Time
	gen     uint64 // identifies the arming, so a stale firing is ignored
	stopped bool
}

type tracked struct {
	token   lease.Token
	expires time.Time
}

// NewExpiries returns an Expiries on clock that calls due in the timer's
// goroutine.
func NewExpiries(clock lease.Clock, due func(keys []string)) *Expiries {
	return &Expiries{clock: clock, due: due, leases: map[string]tracked{}}
}

// Track notes that watchers were told l is held until l.Expires,
// replacing what was noted for l.Key.
func (x *Expiries) Track(l lease.Lease) {
	x.mu.Lock()
	defer x.mu.Unlock()
	tr := tracked{token: l.Token, expires: l.Expires}
	if x.stopped || x.leases[l.Key] == tr {
		return
	}
	x.leases[l.Key] = tr
	heap.Push(&x.byTime, expiryAt{key: l.Key, at: l.Expires})
	x.compactLocked()
	x.armLocked()
}

// Take forgets key's lease and reports whether the one noted had token
// tok: whether its end is still to be reported.
func (x *Expiries) Take(key string, tok lease.Token) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	tr, ok := x.leases[key]
	if !ok || tr.token != tok {
		return false
	}
	delete(x.leases, key)
	x.compactLocked()
	return true
}

// Forget forgets key's lease, whatever its token: nobody waits for its
// end.
func (x *Expiries) Forget(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.leases, key)
	x.compactLocked()
}

// Len returns how many leases are tracked.
func (x *Expiries) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.leases)
}

// Stop forgets every lease and stops the timer; a firing under way
// finishes.
func (x *Expiries) Stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopped = true
	if x.timer != nil {
		x.timer.Stop()
		x.timer = nil
	}
	x.leases, x.byTime = nil, nil
}

// compactLocked drops the heap's stale entries once they outnumber the
// live ones, so that leases released or renewed many times before their
// expiry do not keep an entry each until then.
func (x *Expiries) compactLocked() {
	if len(x.byTime) <= 2*len(x.leases)+64 {
		return
	}
	h := x.byTime[:0]
	for _, e := range x.byTime {
		if tr, ok := x.leases[e.key]; ok && tr.expires.Equal(e.at) {
			h = append(h, e)
		}
	}
	clear(x.byTime[len(h):])
	x.byTime = h
	heap.Init(&x.byTime)
}

// armLocked makes sure the timer fires no later than the earliest expiry.
func (x *Expiries) armLocked() {
	if len(x.byTime) == 0 {
		return
	}
	at := x.byTime[0].at
	if x.timer != nil && !x.timerAt.After(at) {
		return
	}
	if x.timer != nil {
		x.timer.Stop()
	}
	x.gen++
	gen := x.gen
	x.timerAt = at
	x.timer = x.clock.AfterFunc(at.Sub(x.clock.Now()), func() { x.fire(gen) })
}

func (x *Expiries) fire(gen uint64) {
	x.mu.Lock()
	if x.stopped || gen != x.gen {
		x.mu.Unlock()
		return
	}
	x.timer = nil
	now := x.clock.Now()
	var keys []string
	for len(x.byTime) > 0 && !x.byTime[0].at.After(now) {
		e := heap.Pop(&x.byTime).(expiryAt)
		if tr, ok := x.leases[e.key]; ok && tr.expires.Equal(e.at) {
			keys = append(keys, e.key)
		}
	}
	x.armLocked()
	x.mu.Unlock()
	if len(keys) > 0 {
		x.due(keys)
	}
}

type expiryAt struct {
	key string
	at  time.Time
}

type expiryHeap []expiryAt

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryAt)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
