package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// TestHoldOutlivesAReplicaCutFromEtcd holds a lease through a client
// listing two replicas, the first of which then loses its link to etcd
// (blackholed: it takes requests and never answers them). The hold's
// renewals must go on through the second replica: the lease is still held
// several TTLs after the cut, with the client's default timeout (10 s),
// longer than the TTL.
func TestHoldOutlivesAReplicaCutFromEtcd(t *testing.T) {
	px, cut, whole := startCutAndWhole(t, "holdcut")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	hc, err := leasehttp.NewClient(cut.url(0)+","+whole.url(0), leasehttp.WithAuthToken(replicaToken))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	c, err := lease.NewClient(hc)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	h, err := c.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	blackhole(t, px)
	holed := time.Now()
	select {
	case <-h.Done():
		t.Fatalf("the hold was lost %v after the cut: %v", time.Since(holed).Round(time.Millisecond), h.Err())
	case <-time.After(4 * ttl): // real time: the hold's renewals run on the real clock against real processes
	}
	l, err := leasehttp.NewClient(whole.url(0), leasehttp.WithAuthToken(replicaToken))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Get(ctx, "k")
	if err != nil || got.Token != h.Lease().Token {
		t.Fatalf("Get through the whole replica: %+v, %v; want the hold's lease (token %d)", got, err, h.Lease().Token)
	}
}
