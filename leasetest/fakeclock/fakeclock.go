// Package fakeclock is a lease.Clock that moves only when told, for the demo,
// tests and the simulator. Timers fire synchronously inside Advance, in
// deadline order (ties in the order they were set), so runs are reproducible.
package fakeclock

import (
	"slices"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// Clock is a manual lease.Clock. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*timer
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
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run during the Advance that reaches now+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) lease.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop implements lease.Timer.
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
// on the way, each with the clock reading its deadline.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for c.fireNext(end) {
	}
	c.mu.Lock()
	if c.now.Before(end) {
		c.now = end
	}
	c.mu.Unlock()
}

// Set moves the clock to t if t is later, like Advance.
func (c *Clock) Set(t time.Time) { c.Advance(t.Sub(c.Now())) }

// NextDeadline returns the earliest pending timer's deadline, if any.
func (c *Clock) NextDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.earliestLocked()
	if t == nil {
		return time.Time{}, false
	}
	return t.at, true
}

func (c *Clock) earliestLocked() *timer {
	var best *timer
	for _, t := range c.timers {
		if best == nil || t.at.Before(best.at) || (t.at.Equal(best.at) && t.seq < best.seq) {
			best = t
		}
	}
	return best
}

func (c *Clock) fireNext(end time.Time) bool {
	c.mu.Lock()
	t := c.earliestLocked()
	if t == nil || t.at.After(end) {
		c.mu.Unlock()
		return false
	}
	t.done = true
	c.timers = slices.DeleteFunc(c.timers, func(x *timer) bool { return x == t })
	if t.at.After(c.now) {
		c.now = t.at
	}
	c.mu.Unlock()
	t.f()
	return true
}
