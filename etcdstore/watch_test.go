package etcdstore_test

import (
	"context"
	"iter"
	"testing"
	"time"

	"github.com/leasehq/lease"

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

// TestQuietWatchStaysOpen: a watch of a prefix where nothing changes hears
// nothing from etcd but the progress it asks for, which keeps it open past
// the silence limit after which a watch on a silent link breaks; a change
// then still reaches it. (tools/chaos TestReplicaCutFromEtcd cuts the
// link.)
func TestQuietWatchStaysOpen(t *testing.T) {
	s := open(t, etcdtest.Start(t), etcdstore.WithPrefix(uniquePrefix(t)))
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	next, stop := iter.Pull2(s.Watch(ctx, "quiet/"))
	defer stop()
	if ev, err, ok := next(); !ok || err != nil || ev.Kind != lease.Synced {
		t.Fatalf("first event %+v, %v, %v; want Synced", ev, err, ok)
	}
	type item struct {
		ev  lease.Event
		err error
		ok  bool
	}
	got := make(chan item, 1)
	go func() { ev, err, ok := next(); got <- item{ev, err, ok} }()
	// real time: etcd's silence is what is tested, past the real limit.
	select {
	case it := <-got:
		t.Fatalf("a quiet watch got %+v, %v (open %v) within %v", it.ev, it.err, it.ok, etcdstore.WatchSilenceLimit+2*time.Second)
	case <-time.After(etcdstore.WatchSilenceLimit + 2*time.Second):
	}
	if _, err := s.Acquire(ctx, "quiet/a", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	if it := <-got; !it.ok || it.err != nil || it.ev.Kind != lease.Acquired || it.ev.Lease.Key != "quiet/a" {
		t.Fatalf("after the quiet: %+v, %v (open %v); want quiet/a Acquired", it.ev, it.err, it.ok)
	}
}
