package leasehttp

import (
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/dueheap"
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
// counting; nothing runs while no lease is tracked. A release takes its
// lease out of the deadline heap at once, so the heap holds only the
// leases alive: a busy server that grants and releases many short-lived
// keys under long TTLs keeps nothing for them.
type tracker struct {
	m   *metrics
	now func() time.Time

	mu     sync.Mutex
	leases map[string]*tracked
	dl     dueheap.Heap[*tracked] // the same entries, by deadline
	timer  *time.Timer
	at     time.Time // when timer fires
	closed bool
}

// tracked is the generation of one key last granted or renewed here.
type tracked struct {
	key   string
	token lease.Token
	id    lease.ID  // the generation's secret: only its holder can renew or release it
	at    time.Time // counted as expired then
	// due.Due orders the heap: at, or earlier when a renewal moved at
	// later without moving the entry (a renewal, the common change, then
	// costs no heap work; sweep moves the entry on when due comes).
	due dueheap.Entry
}

func newTracker(m *metrics) *tracker {
	return &tracker{m: m, now: time.Now, leases: map[string]*tracked{},
		dl: dueheap.New(func(e *tracked) *dueheap.Entry { return &e.due })}
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

// renewedBatch records the results of renewals, in order, as renewed
// (for the ones renewed) and notHeld (for the ones refused) would, under
// one lock and one reading of the clock.
func (t *tracker) renewedBatch(renewals []lease.Renewal, results []lease.RenewResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for i, r := range results {
		if r.Err != nil {
			l := renewals[i].Lease
			t.notHeldLocked(l.Key, l.Token, l.ID)
			continue
		}
		t.setAtLocked(r.Lease, now)
	}
}

// released forgets l.
func (t *tracker) released(key string, token lease.Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.leases[key]; ok && cur.token == token {
		t.removeLocked(cur)
	}
}

// notHeld records that the backend refused a renew or release of token
// with secret id: if the tracker still had that generation, it expired
// before the holder came back. A refusal for a wrong ID says nothing of
// the generation (anyone can send a token; only its holder has the ID),
// which stays tracked.
func (t *tracker) notHeld(key string, token lease.Token, id lease.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.notHeldLocked(key, token, id)
}

func (t *tracker) notHeldLocked(key string, token lease.Token, id lease.ID) {
	if cur, ok := t.leases[key]; ok && cur.token == token && cur.id == id {
		t.removeLocked(cur)
		t.m.expirations.Inc()
	}
}

func (t *tracker) setLocked(l lease.Lease) { t.setAtLocked(l, t.now()) }

// setAtLocked tracks l, renewed or granted at now.
func (t *tracker) setAtLocked(l lease.Lease, now time.Time) {
	if t.closed {
		return
	}
	at := now.Add(l.TTL + expiryGrace)
	if e, ok := t.leases[l.Key]; ok {
		e.token, e.id, e.at = l.Token, l.ID, at
		if at.Before(e.due.Due) {
			e.due.Due = at
			t.dl.Fix(e)
		}
	} else {
		e := &tracked{key: l.Key, token: l.Token, id: l.ID, at: at, due: dueheap.Entry{Due: at}}
		t.leases[l.Key] = e
		t.dl.Push(e)
		t.m.active.Set(float64(len(t.leases)))
	}
	t.armLocked()
}

func (t *tracker) removeLocked(e *tracked) {
	t.dl.Remove(e)
	delete(t.leases, e.key)
	t.m.active.Set(float64(len(t.leases)))
	// The timer may now fire for nothing; sweep then arms it anew.
}

// armLocked makes the timer fire at the earliest deadline.
func (t *tracker) armLocked() {
	if t.dl.Len() == 0 || t.closed {
		return
	}
	first := t.dl.Peek().due.Due
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
	for t.dl.Len() > 0 && !t.dl.Peek().due.Due.After(now) {
		if e := t.dl.Peek(); e.at.After(now) {
			e.due.Due = e.at // renewed since it was placed
			t.dl.Fix(e)
			continue
		}
		e := t.dl.Pop()
		delete(t.leases, e.key)
		t.m.expirations.Inc()
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
