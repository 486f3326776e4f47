package semaphore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehq/lease"
)

// The limit is stored in the slots themselves: every slot's lease is held
// under its holder's owner with limitMark and the limit it was admitted
// under appended ("worker-7 #limit=3"). It so lives exactly as long as
// anyone holds a slot, needs no record of its own that could outlive or
// contradict the holders, and is read with the one List that counts them.
const limitMark = " #limit="

// slotOwner is the owner a slot is held under by owner with limit n.
func slotOwner(owner string, n int) string { return owner + limitMark + strconv.Itoa(n) }

// limitOf reads the limit from a slot's owner; false for an owner without
// one (a holder from before limits were stored).
func limitOf(owner string) (int, bool) {
	i := strings.LastIndex(owner, limitMark)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(owner[i+len(limitMark):])
	return n, err == nil && n >= 1
}

// WithResize makes this semaphore's N the limit even while holders
// admitted under another limit hold slots: it admits only while all
// holders, whatever their limit, number fewer than N. Without it, a
// semaphore whose N differs from its holders' refuses to admit anyone
// (lease.ErrConflict). Once a holder under the new N is in, processes
// still using the old one are refused in turn, so the change is made by
// one explicit step and never admits more than the new N (nor, until the
// first holder under it, more than the old).
func WithResize() Option {
	return func(c *config) error {
		c.resize = true
		return nil
	}
}

// checkLimit lists the holders and checks them against the semaphore's
// limit: an error matching lease.ErrConflict when one was admitted under
// another limit (unless WithResize), and one matching lease.ErrHeld when
// they number more than the limit.
//
// Admission checks before taking a slot, so that a disagreeing process is
// told without disturbing anyone, and again after, while holding it: two
// processes that each took a slot and then listed cannot both miss the
// other's slot, so a slot is only ever handed out while every holder
// agrees on one limit, and at most that many hold.
func (s *Semaphore) checkLimit(ctx context.Context) error {
	if s.skipCheck {
		return nil
	}
	held := 0
	for l, err := range s.slotsHeld(ctx) {
		if err != nil {
			return err
		}
		held++
		if n, ok := limitOf(l.Owner); ok && n != s.n && !s.resize {
			return fmt.Errorf("%w: semaphore %q has a limit of %d (slot %s is held by %q under it); this process says %d: use the same limit, or change it with WithResize",
				lease.ErrConflict, s.name, n, l.Key, strings.TrimSuffix(l.Owner, limitMark+strconv.Itoa(n)), s.n)
		}
	}
	if held > s.n {
		return fmt.Errorf("%w: semaphore %q: %d slots held, more than its limit of %d", lease.ErrHeld, s.name, held, s.n)
	}
	return nil
}
