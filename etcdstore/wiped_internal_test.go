package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// wipe empties the one member of c and starts it again on the same
// endpoints: a new cluster, its revision from 1, as an operator's wipe of
// the data dir (or a cluster made anew) leaves it.
func wipe(t *testing.T, c *etcdtest.Cluster) {
	t.Helper()
	c.Stop(t, 0)
	if err := os.RemoveAll(c.DataDir(0)); err != nil {
		t.Fatal(err)
	}
	c.Restart(t, 0)
}

// writePast writes keys of another application outside every Store's
// prefix until the cluster's revision is above rev.
func writePast(t *testing.T, ctx context.Context, cli *clientv3.Client, rev int64) {
	t.Helper()
	for i := 0; ; i++ {
		resp, err := cli.Put(ctx, fmt.Sprintf("other-app/%d", i), "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision > rev {
			return
		}
	}
}

// refusesWiped fails t unless err is the refusal of a Store whose data was
// wiped under it.
func refusesWiped(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "wiped") {
		t.Fatalf("%s after the data was wiped under the Store: %v; want ErrUnavailable saying it was wiped", what, err)
	}
}

// stoppedByWipe fails t unless err is the answer of a Store stopped by the
// wipe: its refusal, or ErrRevisionBehind when it read the new cluster
// before it was written past the revisions it had seen.
func stoppedByWipe(t *testing.T, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrRevisionBehind) {
		return
	}
	refusesWiped(t, what, err)
}

// TestWipedAndWrittenPastUnderARunningStore: etcd's data wiped under two
// running Stores of one prefix, then written past the revisions the idle
// one had seen (other applications' keys): that one's revision check
// passes, and it granted k at 152 after the other had granted it up to
// 403 (I1). Its grants must be refused, and AcquireWait must leave no
// entry in the new data.
func TestWipedAndWrittenPastUnderARunningStore(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(map[bool]string{false: "Acquire", true: "AcquireWait"}[wait], func(t *testing.T) {
			c := etcdtest.StartCluster(t, 1)
			cli := c.Client(t)
			ctx := testCtx(t)
			prefix := testPrefix()
			idle := newTestStore(t, cli, prefix)
			busy := newTestStore(t, cli, prefix)
			var top lease.Token
			for range 100 {
				l, err := busy.Acquire(ctx, "k", "busy", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				top = l.Token
				if err := busy.Release(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			if seen := idle.maxRev.Load(); seen >= int64(top) {
				t.Fatalf("the idle Store saw revision %d, not below the busy one's token %d", seen, top)
			}
			wipe(t, c)
			writePast(t, ctx, cli, idle.maxRev.Load()+10)
			var l lease.Lease
			var err error
			if wait {
				l, err = idle.AcquireWait(ctx, "k", "idle", time.Minute)
			} else {
				l, err = idle.Acquire(ctx, "k", "idle", time.Minute)
			}
			if err == nil {
				t.Fatalf("k granted at token %d after the data was wiped; %d had been issued", l.Token, top)
			}
			refusesWiped(t, "the grant", err)
			_, err = idle.Get(ctx, "k")
			refusesWiped(t, "Get", err)
			// The refused grant leaves nothing in the new data (AcquireWait's
			// entry is revoked with its etcd lease).
			if err := pollEntries(ctx, cli, idle, "k"); err != nil {
				t.Fatal(err)
			}
			fresh := newTestStore(t, cli, prefix)
			if fresh.StoreID() == idle.StoreID() {
				t.Fatalf("a Store made on the wiped data has the old StoreID %q", idle.StoreID())
			}
		})
	}
}

// pollEntries waits until key has no entries under s's prefix.
func pollEntries(ctx context.Context, cli *clientv3.Client, s *Store, key string) error {
	for {
		resp, err := cli.Get(ctx, s.entries(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d entries of %q left in the new data by the refused grant", resp.Count, key)
		case <-time.After(20 * time.Millisecond): // real time: etcd revokes in the background
		}
	}
}

// TestWipedEndsRunningWatches: a watch running when etcd's data is wiped,
// and written past its revision, hears etcd's progress again and showed
// the holder the wipe took for good (its entry went without a delete
// event); or, when the writes came after its 5 s of silence, it broke and
// the next watch (lease.Follow's) showed the new data as the Store's. It
// must end with the Store's refusal, whether another Store made the prefix
// anew (its store id's write is under the prefix) or only other keys were
// written; and the Store refuses from then on, a new watch too.
func TestWipedEndsRunningWatches(t *testing.T) {
	for _, anew := range []bool{false, true} {
		t.Run(map[bool]string{false: "other keys written", true: "made anew by a Store"}[anew], func(t *testing.T) {
			c := etcdtest.StartCluster(t, 1)
			cli := c.Client(t)
			ctx := testCtx(t)
			prefix := testPrefix()
			s := newTestStore(t, cli, prefix)
			for range 20 {
				l, err := s.Acquire(ctx, "k", "o", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Release(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			held, err := s.Acquire(ctx, "k", "o", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			wctx, stop := context.WithCancel(ctx)
			ended := make(chan error, 1)
			synced := make(chan struct{})
			go func() {
				for ev, err := range s.Watch(wctx, "") {
					if err != nil {
						ended <- err
						return
					}
					if ev.Kind == lease.Synced {
						close(synced)
					}
				}
				ended <- nil
			}()
			defer func() { stop(); <-ended }()
			select {
			case <-synced:
			case <-ctx.Done():
				t.Fatal("the watch never synced")
			}
			wipe(t, c)
			writePast(t, ctx, cli, s.maxRev.Load()+10)
			if anew {
				newTestStore(t, cli, prefix)
			}
			select {
			case err := <-ended:
				ended <- err // for the deferred wait
				// The Store's refusal, or a break for etcd's silence
				// while it restarted: the next watch must then be refused.
				if !errors.Is(err, lease.ErrUnavailable) {
					t.Fatalf("a watch running when the data was wiped ended with %v; want ErrUnavailable", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("a watch running when the data was wiped still runs 15 s later, showing k held at token %d", held.Token)
			}
			for ev, err := range s.Watch(ctx, "") {
				if err == nil {
					err = fmt.Errorf("it began with a %v event", ev.Kind)
				}
				stoppedByWipe(t, "a new Watch", err)
				break
			}
			_, err = s.Acquire(ctx, "other", "o", time.Minute)
			stoppedByWipe(t, "Acquire", err)
		})
	}
}
