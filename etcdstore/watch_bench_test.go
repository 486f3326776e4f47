package etcdstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// BenchmarkWatchRenewCost measures what Watch costs Renew, watched or not:
// Renew as it is (a read-only Txn, a keep-alive and a Txn that writes the
// holder key, so that watchers see it) beside the renewal as it was before
// (the read-only Txn and the keep-alive), interleaved. Each client renews a
// lease of its own.
func BenchmarkWatchRenewCost(b *testing.B) {
	cli := etcdtest.NewClient(b, etcdtest.Start(b))
	s, err := New(cli, WithPrefix(testPrefix()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const ttl = 10 * time.Second
	keepAliveOnly := func(l lease.Lease) error {
		resp, err := s.txn(ctx, &txnReq{key: l.Key, then: []clientv3.Op{s.firstEntry(l.Key)}})
		if err != nil {
			return err
		}
		if !stillOurs(l, kvOf(resp, 0)) {
			return notHeld(l)
		}
		s.mu.Lock()
		el := s.held[l.ID]
		s.mu.Unlock()
		return s.keepAlive(ctx, el)
	}
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			written, kept := make([]lease.Lease, clients), make([]lease.Lease, clients)
			for w := range clients {
				var err1, err2 error
				written[w], err1 = s.Acquire(ctx, fmt.Sprintf("written/%d/%d", clients, w), "bench", ttl)
				kept[w], err2 = s.Acquire(ctx, fmt.Sprintf("kept/%d/%d", clients, w), "bench", ttl)
				if err1 != nil || err2 != nil {
					b.Fatal(err1, err2)
				}
			}
			benchutil.Interleave(b, clients, []benchutil.Impl{
				{Name: "renew-written", Op: func(w int) error {
					l, err := s.Renew(ctx, written[w], ttl)
					written[w] = l
					return err
				}},
				{Name: "keep-alive-only", Op: func(w int) error { return keepAliveOnly(kept[w]) }},
			})
		})
	}
}
