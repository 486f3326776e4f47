package etcdstore_test

import (
	"testing"

	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/leasetest"
)

// TestWatchBreaksWhenMemberLosesLeader: the member a watch is connected
// to loses its leader (the other two are killed), so it can no longer tell
// what the cluster commits; the watch must say so with ErrUnavailable
// rather than go quiet, and once the cluster is whole again a new watch
// must start from the current state.
func TestWatchBreaksWhenMemberLosesLeader(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	other := (leader + 2) % 3
	s := open(t, []string{c.Endpoint(follower)}, etcdstore.WithPrefix(uniquePrefix(t)))
	leasetest.TestWatchBreak(t, s, func(t *testing.T) {
		c.Kill(t, leader)
		c.Kill(t, other)
	}, func(t *testing.T) {
		c.Restart(t, leader)
		c.Restart(t, other)
		c.Leader(t)
	})
}
