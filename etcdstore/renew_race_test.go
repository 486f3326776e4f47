package etcdstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// gatedLease holds up the first KeepAliveOnce made after arm until proceed
// is closed, so that a test can run other operations while a Renew sits
// between its check and its keep-alive.
type gatedLease struct {
	clientv3.Lease
	armed   atomic.Bool
	entered chan struct{}
	proceed chan struct{}
}

func (g *gatedLease) arm() {
	g.entered, g.proceed = make(chan struct{}), make(chan struct{})
	g.armed.Store(true)
}

func (g *gatedLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		select {
		case <-g.proceed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Lease.KeepAliveOnce(ctx, id)
}

func gatedStore(t *testing.T) (*Store, *clientv3.Client, *gatedLease) {
	t.Helper()
	eps := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, eps)
	g := &gatedLease{Lease: cli.Lease}
	cli.Lease = g
	return newTestStore(t, cli, testPrefix()), cli, g
}

func waitEntered(t *testing.T, g *gatedLease) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Renew did not reach its keep-alive within 10 s")
	}
}

func holderLease(t *testing.T, s *Store, cli *clientv3.Client, key string) (clientv3.LeaseID, bool) {
	t.Helper()
	resp, err := cli.Get(testCtx(t), s.entries(key), clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease), true
}

// TestRenewRacingReleaseKeepsPoolApart: a Renew that passed its check
// while a Release of the same lease ran, and whose etcd lease went back to
// the pool and on to another key's generation, must not record that etcd
// lease as its generation's again: the other generation's release would
// then be refused (ErrNotHeld) although it is the current lease.
func TestRenewRacingReleaseKeepsPoolApart(t *testing.T) {
	s, cli, g, g1, cur, renewed := parkedRenew(t, 10*time.Second)
	if err := s.Release(testCtx(t), g1); err != nil {
		t.Fatalf("Release(g1): %v", err)
	}
	g2 := acquireOnPooled(t, s, cli, cur)
	close(g.proceed)
	if err := renewResult(t, renewed); err != nil && !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Renew(g1): %v", err)
	}
	if err := s.Release(testCtx(t), g2); err != nil {
		t.Fatalf("Release of the current lease on k2 after a racing Renew of k1's old one: %v", err)
	}
	if l, err := s.Get(testCtx(t), "k2"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after releasing k2, Get = %+v, %v; want ErrNotFound", l, err)
	}
}

// TestRenewDoesNotPutGenerationOnReusedLease: a Renew that rewrites the
// entry on the etcd lease it read (same etcd TTL, another TTL) must not put
// the generation back on that etcd lease if a concurrent Renew moved it off
// meanwhile: two generations on one etcd lease would end together. The
// etcd lease a move leaves is revoked, not pooled (its ID names the entry),
// so no other generation can be put on it.
func TestRenewDoesNotPutGenerationOnReusedLease(t *testing.T) {
	s, cli, g, g1, cur, renewed := parkedRenew(t, 9500*time.Millisecond) // same etcd TTL, another value
	if _, err := s.Renew(testCtx(t), g1, 20*time.Second); err != nil {   // moves to another etcd lease
		t.Fatalf("Renew(g1, 20s): %v", err)
	}
	if ttl, err := cli.TimeToLive(testCtx(t), cur); err != nil || ttl.TTL != -1 {
		t.Fatalf("the etcd lease the move left: %+v, %v; want it revoked", ttl, err)
	}
	g2, err := s.Acquire(testCtx(t), "k2", "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	close(g.proceed)
	if err := renewResult(t, renewed); err != nil {
		t.Errorf("Renew(g1, 9.5s) of the current lease: %v", err)
	}
	l1, ok1 := holderLease(t, s, cli, "k1")
	l2, ok2 := holderLease(t, s, cli, "k2")
	if !ok1 || !ok2 {
		t.Fatalf("a generation vanished: k1 present %v, k2 present %v", ok1, ok2)
	}
	if l1 == l2 {
		t.Fatalf("k1's and k2's generations share etcd lease %x", l1)
	}
	if err := s.Release(testCtx(t), g2); err != nil {
		t.Fatalf("Release(g2): %v", err)
	}
	_ = s.Close() // revokes the pooled etcd leases
	if _, ok := holderLease(t, s, cli, "k1"); !ok {
		t.Fatal("k1's generation ended with k2's release and the Store's Close")
	}
}

// parkedRenew acquires "k1" on a gated Store and starts a Renew of it for
// ttl, parked by the gate after its check: the generation g1, its etcd
// lease cur, and where the Renew's error will come.
func parkedRenew(t *testing.T, ttl time.Duration) (s *Store, cli *clientv3.Client, g *gatedLease, g1 lease.Lease, cur clientv3.LeaseID, renewed <-chan error) {
	t.Helper()
	s, cli, g = gatedStore(t)
	g1, err := s.Acquire(testCtx(t), "k1", "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cur, _ = holderLease(t, s, cli, "k1")
	g.arm()
	done := make(chan error, 1)
	go func() {
		_, err := s.Renew(testCtx(t), g1, ttl)
		done <- err
	}()
	waitEntered(t, g)
	return s, cli, g, g1, cur, done
}

// renewResult is the parked Renew's error, once the test let it go on.
func renewResult(t *testing.T, renewed <-chan error) error {
	t.Helper()
	select {
	case err := <-renewed:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Renew did not return")
		return nil
	}
}

// acquireOnPooled acquires "k2" and checks that its generation went on the
// pooled etcd lease cur, the precondition of the race tests.
func acquireOnPooled(t *testing.T, s *Store, cli *clientv3.Client, cur clientv3.LeaseID) lease.Lease {
	t.Helper()
	g2, err := s.Acquire(testCtx(t), "k2", "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := holderLease(t, s, cli, "k2"); l != cur {
		t.Fatalf("precondition: k2's generation is on etcd lease %x, not the pooled %x", l, cur)
	}
	return g2
}
