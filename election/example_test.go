package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/memstore"
)

// An Elector runs on a lease.Client, as etcd's Election on a session: the
// Client's options (clock, backoff, jitter) reach its waits, and the
// Client renews its terms. The term is held under the announced value,
// not the Client's owner.
func ExampleNew() {
	store, err := memstore.New() // or boltstore, pgstore, redisstore, etcdstore, leasehttp
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	client, err := lease.NewClient(store, lease.WithOwner("billing-7"))
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := election.New(client, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	term, err := e.Campaign(ctx, "billing/leader", "10.0.0.7:8080")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer term.Resign(ctx)
	leader, err := e.Leader(ctx, "billing/leader")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(leader.Value, leader.Token == term.Token())
	// Output: 10.0.0.7:8080 true
}
