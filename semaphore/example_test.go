package semaphore_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/memstore"
	"github.com/leasehq/lease/semaphore"
)

// A Semaphore runs on a lease.Client: it waits in line as the Client's
// owner, holds its slots under that owner with the limit appended, and its
// polls keep the Client's clock and backoff.
func ExampleNew() {
	store, err := memstore.New() // or boltstore, pgstore, redisstore, etcdstore, leasehttp
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	client, err := lease.NewClient(store, lease.WithOwner("render-3"))
	if err != nil {
		fmt.Println(err)
		return
	}
	sem, err := semaphore.New(client, "render", 2, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	slot, err := sem.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer slot.Release(ctx)
	holders, err := sem.Holders(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(holders), strings.HasPrefix(holders[0].Owner, "render-3"))
	// Output: 1 true
}
