// Package fakeclock is a lease.Clock that moves only when told, for tests
// and examples. It imports no testing package.
//
// Two moves: Advance (and Set) is time passing — every timer that falls due
// fires synchronously inside the call, in deadline order (ties in the order
// they were set), each with the clock reading its deadline, so runs are
// reproducible. Jump (and JumpTo) is a process waking from a pause (GC,
// SIGSTOP, a suspended VM): the clock reads later at once, but no timer has
// run yet; those that fell due run at the next Advance or Set.
//
// The clock itself is internal/vclock, which `lease demo` also runs on: the
// lease binary links no package under leasetest.
package fakeclock

import (
	"time"

	"github.com/leasehq/lease/internal/vclock"
)

// Clock is a manual lease.Clock. It is safe for concurrent use; Now takes no
// lock, so it costs what reading a variable does. Its methods: Now,
// AfterFunc, Advance, Set, Jump, JumpTo and Pending.
type Clock = vclock.Clock

// New returns a clock reading start.
func New(start time.Time) *Clock { return vclock.New(start) }
