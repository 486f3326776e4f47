package sqlguardtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// paused is worker A's view of the backend while its process is frozen: its
// renewals never get through (they block until the Hold gives up on them).
type paused struct{ lease.Backend }

func (paused) Renew(ctx context.Context, _ lease.Lease, _ time.Duration) (lease.Lease, error) {
	<-ctx.Done()
	return lease.Lease{}, context.Cause(ctx)
}

// Resource is the row a scenario writes: "job", holding "initial" with no
// token before the first write.
type Resource interface {
	// Write writes value under token through the guard under test.
	Write(ctx context.Context, token lease.Token, value string) error
	// Read returns the committed value and token.
	Read(ctx context.Context) (string, lease.Token, error)
}

// ttlA is worker A's TTL: short, as in the seed (100 ms there), but long
// enough for the store's answer on a loaded machine. A Client gives up an
// acquisition whose answer comes later than its TTL, and PostgreSQL's took
// over 100 ms on a loaded machine (two suites and other work on two cores).
const ttlA = time.Second

// SeedScenario is the failure a TTL lock alone cannot stop, end to end: on
// store, worker A acquires "job" with a short TTL (ttlA) and pauses past it; B,
// already waiting, acquires and writes to res; A wakes and writes late with
// its old token — and the guard rejects A, naming B's token, and B's write
// is what stays. The guard must admit tokens by fence.Strict, the seed's
// rule; store must be fresh (tokens 1 and 2).
func SeedScenario(t *testing.T, store lease.Backend, res Resource) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clientA, err := lease.NewClient(paused{store}, lease.WithOwner("worker-a"))
	if err != nil {
		t.Fatal(err)
	}
	clientB, err := lease.NewClient(store, lease.WithOwner("worker-b"))
	if err != nil {
		t.Fatal(err)
	}

	// 0. The store makes its tables (pgstore, sqlfence's stores do so at
	// their first call), not under A's acquisition.
	if _, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of the fresh store's job: %v, want ErrNotFound", err)
	}
	// 1. A acquires.
	holdA, err := clientA.TryAcquire(ctx, "job", ttlA)
	if err != nil {
		t.Fatal(err)
	}
	t1 := holdA.Token()
	// 2. A pauses; B is already waiting for the lease.
	type acquired struct {
		h   *lease.Hold
		err error
	}
	bGot := make(chan acquired, 1)
	go func() {
		h, err := clientB.Acquire(ctx, "job", time.Minute)
		bGot <- acquired{h, err}
	}()
	// 3. A's lease runs out: its Hold says so (A is frozen and cannot
	// look, but the signal is there when it wakes)...
	select {
	case <-holdA.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("A's Hold not cancelled 10 s after its %v TTL", ttlA)
	}
	if err := holdA.Err(); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A's Hold.Err = %v, want ErrLost", err)
	}
	// ...and B gets the lease with a newer token, and writes.
	var b acquired
	select {
	case b = <-bGot:
	case <-time.After(10 * time.Second):
		t.Fatal("B did not get the lease within 10 s")
	}
	if b.err != nil {
		t.Fatalf("B's Acquire: %v", b.err)
	}
	defer b.h.Release(ctx)
	t2 := b.h.Token()
	if t2 <= t1 {
		t.Fatalf("B's token %d is not above A's %d", t2, t1)
	}
	if err := res.Write(ctx, t2, "written-by-b"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// 4. A wakes and writes late with its old token: rejected.
	err = res.Write(ctx, t1, "written-by-a")
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != t1 || se.Highest != t2 {
		t.Fatalf("A's late write: err = %v, want a StaleTokenError for token %d with highest %d", err, t1, t2)
	}
	value, token, err := res.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Per-key tokens start at 1 and rise by one per acquisition.
	if value != "written-by-b" || token != t2 || t1 != 1 || t2 != 2 {
		t.Fatalf("final row value=%q token=%d (A had %d, B %d); want written-by-b with token 2", value, token, t1, t2)
	}
	if err := holdA.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("A's Release after the loss: %v, want ErrLost", err)
	}
	if got, err := store.Get(ctx, "job"); err != nil || got.Owner != "worker-b" || got.Token != t2 {
		t.Fatalf("A's late release disturbed B: Get = %+v, %v", got, err)
	}
}
