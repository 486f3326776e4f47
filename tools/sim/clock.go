package sim

import (
	"time"

	"github.com/leasehq/lease"
)

// driftClock is a client's clock running at rate × the backend's (rate < 1:
// slow). Inside the bubble the backend's clock is time.Now. It is not a fake
// clock but a skew of one: the testing/synctest bubble the simulation runs
// in already makes time virtual, so leasetest/fakeclock has no part here.
type driftClock struct {
	base time.Time
	rate float64
}

func newDriftClock(rate float64) *driftClock { return &driftClock{base: time.Now(), rate: rate} }

func (c *driftClock) Now() time.Time {
	return c.base.Add(time.Duration(float64(time.Since(c.base)) * c.rate))
}

func (c *driftClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	return time.AfterFunc(time.Duration(float64(d)/c.rate), f)
}
