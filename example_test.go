package lease_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/memstore"
)

// A worker holds a lease while it works and writes through a guard with its
// token; a worker whose lease was superseded is refused by the resource.
func ExampleClient() {
	ctx := context.Background()
	store, err := memstore.New() // or boltstore, pgstore, redisstore, etcdstore, leasehttp
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	report := fence.NewResource("nightly-report", "", fence.AtLeast)

	// An earlier worker took the lease (token 1), then stalled past its TTL.
	stalled, _ := store.Acquire(ctx, "nightly-report", "worker-z", lease.MinTTL)

	client, err := lease.NewClient(store, lease.WithOwner("worker-a"))
	if err != nil {
		panic(err)
	}
	hold, err := client.Acquire(ctx, "nightly-report", 10*time.Second) // waits for the expiry
	if err != nil {
		panic(err)
	}
	defer hold.Release(ctx)

	// Work under hold.Context(): it is cancelled the moment the lease may be lost.
	if err := report.Write(hold.Token(), "report by worker-a"); err != nil {
		panic(err)
	}
	// The stalled worker wakes and writes with its old token: refused.
	err = report.Write(stalled.Token, "stale report by worker-z")
	fmt.Println(errors.Is(err, lease.ErrStaleToken))
	value, token := report.Read()
	fmt.Printf("%s (token %d)\n", value, token)
	// Output:
	// true
	// report by worker-a (token 2)
}

// A cache of the leases under a prefix, kept by Follow: a Resync (after a
// break, the watch started again) drops it, and the Held events after it
// rebuild it.
func ExampleFollow() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	if _, err := store.Acquire(ctx, "jobs/a", "worker-a", time.Minute); err != nil {
		panic(err)
	}
	holders := map[string]string{}
	for ev, err := range lease.Follow(ctx, store, "jobs/") {
		if err != nil {
			fmt.Println(err) // one that watching again cannot mend
			return
		}
		switch ev.Kind {
		case lease.Resync:
			clear(holders)
		case lease.Held, lease.Acquired:
			holders[ev.Lease.Key] = ev.Lease.Owner
		case lease.Released, lease.Expired:
			delete(holders, ev.Lease.Key)
		case lease.Synced:
			fmt.Println("synced:", holders)
			cancel() // an example ends here; a cache goes on
		}
	}
	// Output: synced: map[jobs/a:worker-a]
}
