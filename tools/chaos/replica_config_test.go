package chaos_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/leasehttp"
)

// TestReplicasOfAnotherPrefix runs two replicas that look alike to an
// operator, `--backend etcd://HOST` and `--backend etcd://HOST/lease`, but
// use the prefixes "lease/" and "/lease/": two sets of leases. A client
// listing both acquires through the first; when the first dies, the
// second must not answer for the key as if it were free (it did: the key
// was granted again, two holders at once); the client refuses its answers
// as another store's (Lease-Store), while a replica of the same store is
// used as before.
func TestReplicasOfAnotherPrefix(t *testing.T) {
	cluster := etcdtest.StartCluster(t, 1)
	host := strings.TrimPrefix(cluster.Endpoint(0), "http://")
	plain := startReplicasOf(t, 2, "etcd://"+host)
	slashed := startReplicasOf(t, 1, "etcd://"+host+"/lease")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, tc := range []struct {
		name    string
		second  string
		refused bool
	}{
		{"same store", plain.url(1), false},
		{"another prefix", slashed.url(0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := leasehttp.NewClient(plain.url(0)+","+tc.second, leasehttp.WithAuthToken(replicaToken), leasehttp.WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			key := "k/" + strings.ReplaceAll(tc.name, " ", "-")
			l, err := c.Acquire(ctx, key, "first", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, key)
			if err != nil || got.Token != l.Token {
				t.Fatalf("Get through the first: %+v, %v", got, err)
			}
			plain.kill(t, 0)
			defer func() {
				if err := plain.start(0); err != nil {
					t.Fatal(err)
				}
			}()
			got, err = c.Get(ctx, key)
			if !tc.refused {
				if err != nil || got.Token != l.Token {
					t.Errorf("Get through a replica of the same store: %+v, %v; want the lease", got, err)
				}
				return
			}
			if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "another store") {
				t.Errorf("Get through the replica of another prefix: %+v, %v; want ErrUnavailable saying it serves another store", got, err)
			}
			if l2, err := c.Acquire(ctx, key, "second", time.Minute); err == nil {
				t.Errorf("the replica of another prefix granted %q (token %d) while the first holds it (token %d): two holders", key, l2.Token, l.Token)
			}
		})
	}
}
