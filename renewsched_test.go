package lease_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// batchCounter is a backend with RenewBatch (each renewal made as Renew
// makes it) that counts its calls and records, for each lease, the send
// times of its renewals; failKey, when set, has its renewals refused with
// ErrNotHeld while the rest of the batch is renewed.
type batchCounter struct {
	lease.Backend
	mu      sync.Mutex
	batches int
	singles int
	largest int
	sent    map[string][]time.Time
	failKey string
}

func newBatchCounter(b lease.Backend) *batchCounter {
	return &batchCounter{Backend: b, sent: map[string][]time.Time{}}
}

func (b *batchCounter) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	b.mu.Lock()
	b.singles++
	b.sent[l.Key] = append(b.sent[l.Key], time.Now())
	b.mu.Unlock()
	return b.Backend.Renew(ctx, l, ttl)
}

func (b *batchCounter) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.batches++
	b.largest = max(b.largest, len(renewals))
	for _, r := range renewals {
		b.sent[r.Lease.Key] = append(b.sent[r.Lease.Key], time.Now())
	}
	fail := b.failKey
	b.mu.Unlock()
	out := make([]lease.RenewResult, len(renewals))
	for i, r := range renewals {
		if r.Lease.Key == fail {
			out[i].Err = fmt.Errorf("%w: refused for the test", lease.ErrNotHeld)
			continue
		}
		out[i].Lease, out[i].Err = b.Backend.Renew(ctx, r.Lease, r.TTL)
	}
	return out, nil
}

// TestClientCoalescesRenewals: one Client holding 1,000 leases at TTL 3 s,
// acquired over a second, keeps them all alive for 9 s with at most 200
// batches (one each per lease and third of a TTL would be about 9,000
// renewals), never through a Renew of its own, with no batch over
// MaxRenewBatch, and with no lease renewed later after its last renewal
// than a lone hold's schedule allows (1.1 × TTL/3).
func TestClientCoalescesRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBatchCounter(memtest.New(t))
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		const n, ttl = 1000, 3 * time.Second
		holds := make([]*lease.Hold, n)
		acquired := make(map[string]time.Time, n)
		for i := range holds {
			h, err := c.TryAcquire(ctx, fmt.Sprintf("shard/%04d", i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			holds[i] = h
			acquired[h.Key()] = time.Now()
			time.Sleep(time.Millisecond)
		}
		b.mu.Lock()
		b.batches, b.singles = 0, 0
		b.mu.Unlock()
		time.Sleep(9 * time.Second)
		synctest.Wait()
		for _, h := range holds {
			if err := h.Err(); err != nil {
				t.Fatalf("%s lost while renewing normally: %v", h.Key(), err)
			}
		}
		b.mu.Lock()
		batches, singles, largest := b.batches, b.singles, b.largest
		latest := time.Duration(0)
		for key, sent := range b.sent {
			prev := acquired[key]
			for _, at := range sent {
				latest = max(latest, at.Sub(prev))
				prev = at
			}
		}
		b.mu.Unlock()
		t.Logf("%d batches in 9 s, the largest %d renewals; the longest gap between renewals %v", batches, largest, latest)
		if singles != 0 {
			t.Errorf("%d renewals by Renew alone, want every one in a batch", singles)
		}
		if batches > 200 || batches == 0 {
			t.Errorf("%d batches in 9 s for %d holds, want 1 to 200", batches, n)
		}
		if largest > lease.MaxRenewBatch {
			t.Errorf("a batch of %d renewals, over MaxRenewBatch", largest)
		}
		if bound := ttl / 3 * 11 / 10; latest > bound {
			t.Errorf("a lease renewed %v after its last renewal, later than a lone hold (%v)", latest, bound)
		}
		for _, h := range holds {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestBatchFailureIsPerHold: a renewal the backend refuses within a batch
// loses that hold alone; the others in the same batch stay held, renewed.
func TestBatchFailureIsPerHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBatchCounter(memtest.New(t))
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		var holds []*lease.Hold
		for i := range 8 {
			h, err := c.TryAcquire(ctx, fmt.Sprintf("shard/%d", i), 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			holds = append(holds, h)
		}
		b.mu.Lock()
		b.failKey = "shard/3"
		b.mu.Unlock()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		for i, h := range holds {
			err := h.Err()
			defer h.Release(ctx)
			if i == 3 {
				if !errors.Is(err, lease.ErrLost) {
					t.Errorf("the refused hold: Err = %v, want ErrLost", err)
				}
				continue
			}
			if err != nil {
				t.Errorf("hold %s, renewed in the same batches as the refused one: %v", h.Key(), err)
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.batches == 0 || b.singles != 0 {
			t.Errorf("%d batches and %d lone renewals; want batches only", b.batches, b.singles)
		}
	})
}

// TestBatchUnavailableRetries: a batch the backend fails as a whole
// (ErrUnavailable) is retried; holds survive a short outage.
func TestBatchUnavailableRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &outage{batchCounter: newBatchCounter(memtest.New(t))}
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		h, err := c.TryAcquire(ctx, "job", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		b.down(true)
		time.Sleep(1500 * time.Millisecond) // the first renewal (about 1 s) fails
		b.down(false)
		time.Sleep(5 * time.Second)
		if err := h.Err(); err != nil {
			t.Fatalf("lost after a 1.5 s outage of a 3 s lease: %v", err)
		}
		if b.failed == 0 {
			t.Error("no batch failed during the outage")
		}
	})
}

type outage struct {
	*batchCounter
	mu     sync.Mutex
	isDown bool
	failed int
}

func (o *outage) down(d bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.isDown = d
}

func (o *outage) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	o.mu.Lock()
	if o.isDown {
		o.failed++
		o.mu.Unlock()
		return nil, fmt.Errorf("%w: connection refused", lease.ErrUnavailable)
	}
	o.mu.Unlock()
	return o.batchCounter.RenewBatch(ctx, renewals)
}

// TestHoldsCostNoGoroutineAndLittleMemory: a Client with 100,000 holds
// keeps no goroutine per hold and at most 1 KB of heap per hold, the
// backend's own record of each lease included.
func TestHoldsCostNoGoroutineAndLittleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 holds")
	}
	const n = 100_000
	ctx := context.Background()
	store := memtest.New(t)
	c := newClient(t, store, "worker-a")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant/%06d", i)
	}
	holds := make([]*lease.Hold, 0, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	for _, k := range keys {
		h, err := c.TryAcquire(ctx, k, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	extra := runtime.NumGoroutine() - goroutines
	perHold := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d holds: %.0f bytes of heap and %.3f goroutines per hold", n, perHold, float64(extra)/n)
	if perHold > 1024 {
		t.Errorf("%.0f bytes of heap per hold, want at most 1 KB", perHold)
	}
	if extra > 0 {
		t.Errorf("%d goroutines more with %d holds, want none", extra, n)
	}
	for _, h := range holds {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
