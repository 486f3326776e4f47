package leasehttp

import (
	"container/heap"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// expiryGrace is how long past a lease's TTL (on this server's clock) the
// tracker waits before it counts the lease as expired: room for a backend
// whose clock runs a little behind, and for the answer to a renewal sent just
// in time.
const expiryGrace = 250 * time.Millisecond

// tracker follows the leases granted or renewed through this server, to
// count the ones that expire without a release (lease_expirations_total)
// and those alive (lease_active_leases). It sees only this server's
// traffic: leases handled by another server in front of the same backend,
// or held before this process started and never renewed through it, are
// not counted. One timer, armed for the earliest deadline, does the
// counting; nothing runs while no lease is tracked.
type tracker struct {
	m   *metrics
	now func() time.Time

	mu     sync.Mutex
	leases map[string]tracked
	dl     deadlines
	seq    uint64
	timer  *time.Timer
	at     time.Time // when timer fires
	closed bool
}

type tracked struct {
	token lease.Token
	seq   uint64 // of the deadline entry that is current
}

type deadline struct {
	at  time.Time
	key string
	seq uint64
}

// deadlines is a min-heap by time. Entries replaced by a renewal stay in it
// until their time comes and are then dropped, as their seq is stale.
type deadlines []deadline

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

func newTracker(m *metrics) *tracker {
	return &tracker{m: m, now: time.Now, leases: map[string]tracked{}}
}

// granted records a new generation on l.Key. A previous generation still
// tracked was neither released through this server nor renewed in time, so
// it expired.
func (t *tracker) granted(l lease.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if prev, ok := t.leases[l.Key]; ok && prev.token != l.Token {
		t.m.expirations.Inc()
	}
	t.setLocked(l)
}

// renewed moves l's deadline; a lease unknown to the tracker (renewed here
// for the first time) starts being tracked.
func (t *tracker) renewed(l lease.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setLocked(l)
}

// released forgets l.
func (t *tracker) released(key string, token lease.Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.leases[key]; ok && cur.token == token {
		delete(t.leases, key)
		t.m.active.Set(float64(len(t.leases)))
	}
}

// notHeld records that the backend refused a renew or release of token: if
// the tracker still had that generation, it expired before the holder came
// back.
func (t *tracker) notHeld(key string, token lease.Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.leases[key]; ok && cur.token == token {
		delete(t.leases, key)
		t.m.expirations.Inc()
		t.m.active.Set(float64(len(t.leases)))
	}
}

func (t *tracker) setLocked(l lease.Lease) {
	if t.closed {
		return
	}
	t.seq++
	t.leases[l.Key] = tracked{token: l.Token, seq: t.seq}
	at := t.now().Add(l.TTL + expiryGrace)
	heap.Push(&t.dl, deadline{at: at, key: l.Key, seq: t.seq})
	t.m.active.Set(float64(len(t.leases)))
	t.armLocked()
}

// armLocked makes the timer fire at the earliest deadline.
func (t *tracker) armLocked() {
	if len(t.dl) == 0 || t.closed {
		return
	}
	first := t.dl[0].at
	if t.timer != nil && !t.at.After(first) {
		return // already due no later
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.at = first
	t.timer = time.AfterFunc(max(first.Sub(t.now()), 0), t.sweep)
}

// sweep counts the leases whose deadline has passed.
func (t *tracker) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	now := t.now()
	for len(t.dl) > 0 && !t.dl[0].at.After(now) {
		d := heap.Pop(&t.dl).(deadline)
		if cur, ok := t.leases[d.key]; ok && cur.seq == d.seq {
			delete(t.leases, d.key)
			t.m.expirations.Inc()
		}
	}
	t.m.active.Set(float64(len(t.leases)))
	t.armLocked()
}

func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}
