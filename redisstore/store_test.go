package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasetest"
	"github.com/leasehq/lease/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testNamespace returns a namespace of its own for a test, so that tests
// never see each other's keys, nor those of an earlier run on a server named
// by LEASE_TEST_REDIS_ADDR.
func testNamespace() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:])
}

// open returns a store on srv in a fresh namespace (unless opts set one),
// closed in t.Cleanup.
func open(t testing.TB, srv *redistest.Server, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	return openURL(t, "redis://"+srv.Addr+"/0", opts...)
}

func openURL(t testing.TB, url string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	opts = append([]redisstore.Option{redisstore.WithNamespace(testNamespace())}, opts...)
	s, err := redisstore.Open(ctxFor(t), url, opts...)
	if err != nil {
		t.Fatalf("redisstore.Open(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	ns := redisstore.WithNamespace(testNamespace()) // the same across Reopen
	leasetest.TestBackend(t,
		func(t *testing.T) lease.Backend { return open(t, srv, ns) },
		leasetest.Reopen(func(t *testing.T, old lease.Backend) lease.Backend {
			if err := old.(*redisstore.Store).Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			srv.Restart(t)
			return open(t, srv, ns)
		}),
		watchBound)
}

// TestCloseTwice: Close is idempotent, as every store's is: a second
// Close of a store that Open made does not close its client again.
func TestCloseTwice(t *testing.T) {
	s := open(t, redistest.Start(t))
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
}

// watchBound is the expiry bound the suite's Watch section checks: a few
// milliseconds (watch.go), generously for a busy test machine.
var watchBound = leasetest.WatchExpiryBound(250 * time.Millisecond)

// TestConformanceCluster runs the suite through a ClusterClient against a
// cluster-mode server, which refuses any script whose keys span two hash
// slots: it passes only if each lease and its counter share a hash tag.
func TestConformanceCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.Cluster())
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
		s, err := redisstore.New(c, redisstore.WithNamespace(testNamespace()))
		if err != nil {
			t.Fatalf("redisstore.New on a cluster: %v", err)
		}
		t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
		return s
	}, watchBound)
}
