package redisstore_test

import (
	"testing"

	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasetest"
)

// TestWatchBreaksWhenSubscriptionKilled: the server drops the subscription
// (CLIENT KILL), so changes may go unheard; every watch must say so with
// ErrUnavailable rather than go quiet, and a new watch must start from the
// current state, changes made meanwhile included.
func TestWatchBreaksWhenSubscriptionKilled(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv)
	leasetest.TestWatchBreak(t, s, func(t *testing.T) { killPubSub(t, srv) }, nil)
}
