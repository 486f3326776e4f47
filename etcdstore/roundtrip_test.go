package etcdstore

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// rpcCounter counts a client's gRPC calls and streams by method.
type rpcCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *rpcCounter) add(method string) {
	c.mu.Lock()
	c.counts[method]++
	c.mu.Unlock()
}

func (c *rpcCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.counts)
	clear(c.counts)
	return out
}

func countingClient(t *testing.T, endpoints []string) (*clientv3.Client, *rpcCounter) {
	t.Helper()
	c := &rpcCounter{counts: make(map[string]int)}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, c
}

// TestHotPathRoundTrips: a lone client's acquire+release is two Txns and
// nothing else — no Grant once an etcd lease is pooled, and a keep-alive
// only when a pooled etcd lease idled for about a second — the same number
// of round trips as concurrency.Mutex's Lock+Unlock.
func TestHotPathRoundTrips(t *testing.T) {
	eps := etcdtest.Start(t)
	cli, rpcs := countingClient(t, eps)
	s := newTestStore(t, cli, testPrefix())
	ctx := testCtx(t)
	pair := func() {
		l, err := s.Acquire(ctx, "k", "o", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	pair() // grants the etcd lease the pool then reuses
	rpcs.take()
	const n = 50
	start := time.Now()
	for range n {
		pair()
	}
	elapsed := time.Since(start)
	got := rpcs.take()
	if got["/etcdserverpb.KV/Txn"] != 2*n {
		t.Errorf("%d acquire+release pairs sent %d Txns, want %d", n, got["/etcdserverpb.KV/Txn"], 2*n)
	}
	// A pooled etcd lease vouches for the TTL for a second after its last
	// refresh (etcdTTL adds one): at most one keep-alive per second.
	if ka, most := got["/etcdserverpb.Lease/LeaseKeepAlive"], 1+int(elapsed/time.Second); ka > most {
		t.Errorf("%d keep-alives in %v, want at most %d", ka, elapsed.Round(time.Millisecond), most)
	}
	delete(got, "/etcdserverpb.KV/Txn")
	delete(got, "/etcdserverpb.Lease/LeaseKeepAlive")
	if len(got) != 0 {
		t.Errorf("acquire+release sent other requests too: %v", got)
	}
}
