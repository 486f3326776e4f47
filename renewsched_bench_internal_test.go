package lease

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"
)

// instantRenewer answers at once and keeps nothing: a backend that costs
// nothing, so that a benchmark over it measures the Client's own work.
type instantRenewer struct{}

func (instantRenewer) Acquire(_ context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	l := Lease{Key: key, Owner: owner, Token: 1, Expires: time.Now().Add(ttl), TTL: ttl}
	_, _ = rand.Read(l.ID[:])
	return l, nil
}

func (instantRenewer) Renew(_ context.Context, l Lease, ttl time.Duration) (Lease, error) {
	l.Expires, l.TTL = time.Now().Add(ttl), ttl
	return l, nil
}

func (instantRenewer) Release(context.Context, Lease) error { return nil }

func (instantRenewer) Get(context.Context, string) (Lease, error) { return Lease{}, ErrNotFound }

func (instantRenewer) List(context.Context, string, Page) (ListPage, error) { return ListPage{}, nil }

func (instantRenewer) RenewBatch(_ context.Context, renewals []Renewal) ([]RenewResult, error) {
	res := make([]RenewResult, len(renewals))
	now := time.Now()
	for i, r := range renewals {
		l := r.Lease
		l.Expires, l.TTL = now.Add(r.TTL), r.TTL
		res[i].Lease = l
	}
	return res, nil
}

// BenchmarkRenewBookkeeping measures what the Client does per renewal
// around a RenewBatch call that costs nothing: taking a batch of
// MaxRenewBatch holds from the queue, sending it, and recording each
// answer (the deadline, the next renewal), with holds holds in the Client.
// One op is one hold renewed. Issue 31's ScaleRenew row runs client and
// server on the same two cores, so this work is taken from the server's.
func BenchmarkRenewBookkeeping(b *testing.B) {
	for _, holds := range []int{16384, 131072} {
		b.Run(fmt.Sprintf("holds=%d", holds), func(b *testing.B) {
			c, err := NewClient(instantRenewer{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			hs := make([]*Hold, holds)
			for i := range hs {
				if hs[i], err = c.TryAcquire(ctx, fmt.Sprintf("k/%06d", i), time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			defer func() {
				for _, h := range hs {
					_ = h.Release(ctx)
				}
			}()
			s := c.sched
			b.ResetTimer()
			for done := 0; done < b.N; {
				s.mu.Lock()
				batch := make([]*Hold, 0, MaxRenewBatch)
				for len(batch) < MaxRenewBatch && s.queue.Len() > 0 {
					batch = append(batch, s.queue.Pop())
				}
				s.inFlight++
				s.mu.Unlock()
				s.renewBatch(batch)
				done += len(batch)
			}
		})
	}
}
