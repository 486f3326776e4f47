// Package fakeclock forwards to leasetest/fakeclock, where the fake clock
// now lives. It stays only for boltstore's tests, which import this path
// and are being changed on another branch at the time of the move; once they
// import github.com/leasehq/lease/leasetest/fakeclock, delete this package.
package fakeclock

import (
	"time"

	"github.com/leasehq/lease/leasetest/fakeclock"
)

// Clock is leasetest/fakeclock's Clock.
type Clock = fakeclock.Clock

// New returns a clock reading start: leasetest/fakeclock.New.
func New(start time.Time) *Clock { return fakeclock.New(start) }
