package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/poll"
)

// TestAcquireGivenUpAsLeaderDies: an Acquire whose ctx ends while the etcd
// leader is killed fails with its outcome unknown, and whatever it
// created is revoked once the cluster has a leader again, not left held by
// nobody for its TTL. The Store revoked such an etcd lease once, for a
// second: tried during the election, the revoke failed, and the key stayed
// held for its minute (the kill 2 ms after the Acquire did it every run).
func TestAcquireGivenUpAsLeaderDies(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	s, err := etcdstore.New(c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const trials = 20
	failed := 0
	for trial := range trials {
		k := fmt.Sprintf("given-up/%d", trial)
		leader := c.Leader(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		done := make(chan error, 1)
		go func() { _, err := s.Acquire(ctx, k, "quitter", time.Minute); done <- err }()
		time.Sleep(time.Duration(trial%10) * time.Millisecond) // real time: the kill lands at moments spread over the Txn
		c.Kill(t, leader)
		err := <-done
		cancel()
		c.Restart(t, leader)
		c.Leader(t)
		if err == nil {
			continue // granted and answered: the key is held by a caller that knows it
		}
		failed++
		// The revoke is retried in the background: the key must come free.
		poll.Until(t, 10*time.Second, func() error {
			l, err := s.Acquire(context.Background(), k, "next", time.Minute)
			if err == nil {
				if err := s.Release(context.Background(), l); err != nil {
					t.Fatal(err)
				}
				return nil
			}
			if !errors.Is(err, lease.ErrHeld) && !errors.Is(err, lease.ErrUnavailable) {
				t.Fatal(err)
			}
			return fmt.Errorf("trial %d: %q still held after its Acquire failed as the leader died: %w", trial, k, err)
		})
	}
	if failed == 0 {
		t.Fatalf("no Acquire of %d failed as the leader died: the test did not cut one off", trials)
	}
	t.Logf("%d of %d Acquires failed as the leader died; each left the key free", failed, trials)
}
