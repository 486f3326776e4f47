// Command seed replays, line by line, the scenario test of the TypeScript
// code this project grew from (shared/seed/fencing-token.ts): a LeaseStore,
// a FencedResource, worker A acquiring at t=0 with a 100 ms TTL, worker B
// acquiring at t=101, B's write accepted and A's late write rejected.
//
// One difference from the seed, by design: the seed's resource rejects a
// second write with the same token; fence.AtLeast (the default) accepts it,
// so a holder can write many times. fence.Strict is the seed's rule. The last
// lines show both.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "seed:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	t0 := time.Unix(0, 0)
	clock := fakeclock.New(t0) // the seed passes `now` explicitly; this clock plays that part
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		return err
	}
	defer store.Close()
	resource := fence.NewResource("job", "initial", fence.Strict) // the seed's FencedResource

	// const leaseA = store.acquire("job", "worker-a", 0, 100);
	leaseA, err := store.Acquire(ctx, "job", "worker-a", 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("a should acquire the lease: %w", err)
	}
	fmt.Printf("A acquired job at t=0: token %d\n", leaseA.Token)

	// const leaseB = store.acquire("job", "worker-b", 101, 100);
	clock.Set(t0.Add(101 * time.Millisecond))
	leaseB, err := store.Acquire(ctx, "job", "worker-b", 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("b should acquire after expiry: %w", err)
	}
	fmt.Printf("B acquired job at t=101: token %d\n", leaseB.Token)
	if leaseA.Token >= leaseB.Token {
		return errors.New("token must increase")
	}

	// resource.write(leaseB.token, "written-by-b");
	if err := resource.Write(leaseB.Token, "written-by-b"); err != nil {
		return err
	}
	fmt.Println("B wrote written-by-b")

	// resource.write(leaseA.token, "late-write-by-a") must throw "stale".
	err = resource.Write(leaseA.Token, "late-write-by-a")
	if !errors.Is(err, lease.ErrStaleToken) {
		return fmt.Errorf("stale owner must be rejected, got %v", err)
	}
	fmt.Println("A's late write rejected:", err)

	// console.log(resource.read());
	value, lastToken := resource.Read()
	fmt.Printf("{ value: %q, lastToken: %d }\n", value, lastToken)

	// Where this project differs from the seed: a second write with the same token.
	for _, mode := range []fence.Mode{fence.Strict, fence.AtLeast} {
		r := fence.NewResource("job", "initial", mode)
		_ = r.Write(leaseB.Token, "written-by-b")
		verdict := "accepted"
		if err := r.Write(leaseB.Token, "written-again-by-b"); err != nil {
			verdict = "rejected"
		}
		fmt.Printf("%s: B's second write with token %d is %s\n", mode, leaseB.Token, verdict)
	}
	return nil
}
