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
