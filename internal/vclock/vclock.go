// Package vclock is a lease.Clock that moves only when told: the virtual
// clock of `lease demo` and, re-exported as leasetest/fakeclock, of tests
// and examples. It lives here, not under the test kit's path, because the
// lease binary links it; it imports no testing package.
//
// Two moves: Advance (and Set) is time passing — every timer that falls due
// fires synchronously inside the call, in deadline order (ties in the order
// they were set), each with the clock reading its deadline, so runs are
// reproducible. Jump (and JumpTo) is a process waking from a pause (GC,
// SIGSTOP, a suspended VM): the clock reads later at once, but no timer has
// run yet; those that fell due run at the next Advance or Set.
package vclock

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehq/lease"
)

// Clock is a manual lease.Clock. It is safe for concurrent use; Now takes no
// lock, so it costs what reading a variable does (memstore reads the clock on
// every call, and its benchmarks run on this clock).
type Clock struct {
	now atomic.Pointer[time.Time] // written only with mu held

	mu     sync.Mutex
	seq    uint64
	timers []*timer // pending: neither fired nor stopped
}

type timer struct {
	c    *Clock
	at   time.Time
	seq  uint64
	f    func()
	done bool
}

var _ lease.Clock = (*Clock)(nil)

// New returns a clock reading start.
func New(start time.Time) *Clock {
	c := &Clock{}
	c.now.Store(&start)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return *c.now.Load() }

// AfterFunc schedules f to run during the Advance or Set that reaches now+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, at: c.Now().Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop implements lease.Timer: it reports whether it stopped the timer
// before it fired.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *timer) bool { return x == t })
	return true
}

// Advance moves the clock forward by d, running every timer that falls due
// on the way (a timer a callback sets within reach included), each with the
// clock reading its deadline; a timer a Jump left overdue runs first, with
// the clock as it reads. The clock never moves back: a negative d counts as
// 0.
func (c *Clock) Advance(d time.Duration) {
	end := c.Now().Add(max(d, 0))
	for c.fireNext(end) {
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moveLocked(end)
}

// Set moves the clock to t if t is later, like Advance.
func (c *Clock) Set(t time.Time) { c.Advance(t.Sub(c.Now())) }

// Jump moves the clock forward by d without running any timer. Timers that
// fall due stay pending (Stop still stops them) until the next Advance or
// Set. A negative d counts as 0.
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moveLocked(c.Now().Add(max(d, 0)))
}

// JumpTo moves the clock to t if t is later, like Jump.
func (c *Clock) JumpTo(t time.Time) { c.Jump(t.Sub(c.Now())) }

// Pending returns the deadlines of the timers neither fired nor stopped, in
// the order they will fire.
func (c *Clock) Pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := slices.Clone(c.timers)
	slices.SortFunc(ts, compare)
	at := make([]time.Time, len(ts))
	for i, t := range ts {
		at[i] = t.at
	}
	return at
}

// compare orders timers by deadline, then by the order they were set.
func compare(a, b *timer) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// moveLocked sets the clock to t unless that is earlier than it reads.
func (c *Clock) moveLocked(t time.Time) {
	if t.After(c.Now()) {
		c.now.Store(&t)
	}
}

// fireNext runs the earliest timer due by end, if any, and reports whether
// it ran one. The callback runs without the lock, so it may use the clock.
func (c *Clock) fireNext(end time.Time) bool {
	c.mu.Lock()
	if len(c.timers) == 0 {
		c.mu.Unlock()
		return false
	}
	t := slices.MinFunc(c.timers, compare)
	if t.at.After(end) {
		c.mu.Unlock()
		return false
	}
	t.done = true
	c.timers = slices.DeleteFunc(c.timers, func(x *timer) bool { return x == t })
	c.moveLocked(t.at)
	c.mu.Unlock()
	t.f()
	return true
}
