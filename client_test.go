package lease_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faulty wraps a real backend and can make renewals fail, standing in for a
// network that drops them. It hides the backend's optional interfaces, so
// Acquire polls.
type faulty struct {
	lease.Backend
	renewErr atomic.Pointer[error]
	renews   atomic.Int32
}

func (f *faulty) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	f.renews.Add(1)
	if p := f.renewErr.Load(); p != nil {
		return lease.Lease{}, *p
	}
	return f.Backend.Renew(ctx, l, ttl)
}

func (f *faulty) failRenewals(err error) { f.renewErr.Store(&err) }

func newClient(t *testing.T, b lease.Backend, owner string, opts ...lease.Option) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b, append([]lease.Option{lease.WithOwner(owner)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTryAcquireFailsAtOnceWhenHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		a, b := newClient(t, store, "worker-a"), newClient(t, store, "worker-b")
		ctx := context.Background()
		ha, err := a.TryAcquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer ha.Release(ctx)
		start := time.Now()
		_, err = b.TryAcquire(ctx, "job", time.Second)
		var he *lease.HeldError
		if !errors.As(err, &he) || !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("TryAcquire of a held key: err = %v, want a *HeldError matching ErrHeld", err)
		}
		if he.Owner != "worker-a" || he.Token != ha.Token() {
			t.Errorf("HeldError = %+v, want owner worker-a token %d", he, ha.Token())
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("TryAcquire waited %v", waited)
		}
	})
}

func TestHoldRenewsInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		c := newClient(t, store, "worker-a")
		ctx := context.Background()
		h, err := c.Acquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second) // 30 TTLs
		if err := h.Err(); err != nil {
			t.Fatalf("lease lost while renewing normally: %v", err)
		}
		got, err := store.Get(ctx, "job")
		if err != nil || got.Token != h.Token() {
			t.Fatalf("backend lease = %+v, %v; want token %d", got, err, h.Token())
		}
		if !h.Deadline().After(time.Now()) {
			t.Errorf("deadline %v not in the future", h.Deadline())
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if cause := context.Cause(h.Context()); !errors.Is(cause, lease.ErrReleased) {
			t.Errorf("cause after Release = %v, want ErrReleased", cause)
		}
		if _, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("key still held after Release: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Errorf("second Release = %v, want nil", err)
		}
	})
}

// TestLostAtSafeDeadline: renewals fail without an answer; the context must
// be cancelled at send time + TTL − margin, before the backend's expiry (I5).
func TestLostAtSafeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		f := &faulty{Backend: store}
		c := newClient(t, f, "worker-a", lease.WithDriftMargin(0.01, 2*time.Millisecond))
		ctx := context.Background()
		ttl := time.Second
		sent := time.Now()
		h, err := c.TryAcquire(ctx, "job", ttl)
		if err != nil {
			t.Fatal(err)
		}
		f.failRenewals(errors.Join(lease.ErrUnavailable, errors.New("connection reset")))
		<-h.Done()
		lostAt := time.Now()
		if want := sent.Add(ttl - 12*time.Millisecond); !lostAt.Equal(want) {
			t.Errorf("lost at %v after acquire, want exactly %v", lostAt.Sub(sent), want.Sub(sent))
		}
		if !errors.Is(h.Err(), lease.ErrLost) {
			t.Errorf("Err = %v, want ErrLost", h.Err())
		}
		// The backend still holds it: the client gave up first.
		if got, err := store.Get(ctx, "job"); err != nil || got.Token != h.Token() {
			t.Errorf("backend lease at the client's deadline = %+v, %v; want still held", got, err)
		}
		if n := f.renews.Load(); n < 3 {
			t.Errorf("%d renewal attempts before giving up, want retries", n)
		}
		if err := h.Release(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("Release after loss = %v, want ErrLost", err)
		}
		// Release still frees the key for the next holder.
		if _, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("Release after loss left the key held: %v", err)
		}
	})
}

func TestLostWhenBackendSaysGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		f := &faulty{Backend: store}
		c := newClient(t, f, "worker-a")
		ctx := context.Background()
		h, err := c.TryAcquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		acquired := time.Now()
		f.failRenewals(lease.ErrNotHeld)
		<-h.Done()
		if !errors.Is(h.Err(), lease.ErrLost) {
			t.Fatalf("Err = %v, want ErrLost", h.Err())
		}
		// Lost at the first renewal attempt (about TTL/3), not at the deadline.
		if d := time.Since(acquired); d > 400*time.Millisecond {
			t.Errorf("lost %v after acquire; want at the first renewal", d)
		}
		_ = h.Release(ctx)
	})
}

func TestAcquireWaitsForRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*memstore.Store) lease.Backend
	}{
		{"WaitAcquirer", func(s *memstore.Store) lease.Backend { return s }},
		{"Polling", func(s *memstore.Store) lease.Backend { return &faulty{Backend: s} }},
		{"Notifier", func(s *memstore.Store) lease.Backend { return newNotifying(s) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memstore.New()
				b := tc.wrap(store)
				ctx := context.Background()
				a := newClient(t, b, "worker-a")
				w := newClient(t, b, "worker-b")
				ha, err := a.TryAcquire(ctx, "job", 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					time.Sleep(3 * time.Second)
					_ = ha.Release(ctx)
				}()
				start := time.Now()
				hb, err := w.Acquire(ctx, "job", 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer hb.Release(ctx)
				waited := time.Since(start)
				if waited < 3*time.Second || waited > 3*time.Second+600*time.Millisecond {
					t.Errorf("Acquire returned after %v; the holder released at 3s", waited)
				}
				if hb.Token() <= ha.Token() {
					t.Errorf("token %d not above the previous %d", hb.Token(), ha.Token())
				}
			})
		})
	}
}

func TestAcquireWaitsForExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		ctx := context.Background()
		crashed, err := store.Acquire(ctx, "job", "crashed-worker", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, &faulty{Backend: store}, "worker-b")
		start := time.Now()
		h, err := c.Acquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		if waited := time.Since(start); waited < 2*time.Second || waited > 2*time.Second+10*time.Millisecond {
			t.Errorf("waited %v for a lease that expired at 2s; the HeldError's expiry should bound the poll", waited)
		}
		if h.Token() <= crashed.Token {
			t.Errorf("token %d not above %d", h.Token(), crashed.Token)
		}
	})
}

func TestAcquireHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		for _, b := range []lease.Backend{store, &faulty{Backend: store}} {
			ctx := context.Background()
			holder := newClient(t, b, "holder")
			h, err := holder.TryAcquire(ctx, "job", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = newClient(t, b, "waiter").Acquire(wctx, "job", time.Minute)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%T: Acquire past its context: err = %v, want DeadlineExceeded", b, err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A lease granted after a long FIFO wait is renewed at once, so its deadline
// counts from a recent send time rather than from the start of the wait.
func TestLongWaitRenewsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		ctx := context.Background()
		first, err := store.Acquire(ctx, "job", "holder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(10 * time.Second)
			_ = store.Release(ctx, first)
		}()
		h, err := newClient(t, store, "waiter").Acquire(ctx, "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		if left := time.Until(h.Deadline()); left < 900*time.Millisecond {
			t.Errorf("after a 10s wait the deadline is %v away; want nearly a full TTL", left)
		}
		if h.Err() != nil {
			t.Fatalf("lease lost right after the wait: %v", h.Err())
		}
	})
}

// TestDefaultOwner: the owner name of a Client without WithOwner is
// lease.DefaultOwner(), HOSTNAME-PID, and a valid owner name.
func TestDefaultOwner(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	want := host + "-" + strconv.Itoa(os.Getpid())
	got := lease.DefaultOwner()
	if got != want {
		t.Errorf("DefaultOwner() = %q, want %q", got, want)
	}
	if err := lease.ValidateOwner(got); err != nil {
		t.Errorf("DefaultOwner() = %q is not a valid owner: %v", got, err)
	}
	store := memstore.New()
	c, err := lease.NewClient(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := c.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if l, err := store.Get(ctx, "job"); err != nil || l.Owner != got {
		t.Errorf("a Client without WithOwner acquired as %q (%v), want DefaultOwner() %q", l.Owner, err, got)
	}
}

func TestClientRejectsBadInput(t *testing.T) {
	store := memstore.New()
	if _, err := lease.NewClient(nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("NewClient(nil): %v", err)
	}
	for name, opt := range map[string]lease.Option{
		"empty owner":         lease.WithOwner(""),
		"nil clock":           lease.WithClock(nil),
		"negative drift":      lease.WithDriftMargin(-0.1, 0),
		"drift half the TTL":  lease.WithDriftMargin(0.5, 0),
		"zero backoff":        lease.WithBackoff(0, time.Second),
		"backoff max < min":   lease.WithBackoff(time.Second, time.Millisecond),
		"nil jitter":          lease.WithJitter(nil),
		"owner with newline":  lease.WithOwner("a\nb"),
		"owner over 512 byte": lease.WithOwner(string(make([]byte, 513))),
		"owner not UTF-8":     lease.WithOwner("a\xffb"),
	} {
		if _, err := lease.NewClient(store, opt); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("NewClient with %s: err = %v, want ErrInvalid", name, err)
		}
	}
	c := newClient(t, store, "w", lease.WithDriftMargin(0, 6*time.Millisecond))
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"empty key":                func() error { _, err := c.Acquire(ctx, "", time.Second); return err },
		"ttl below minimum":        func() error { _, err := c.TryAcquire(ctx, "k", time.Millisecond); return err },
		"ttl above maximum":        func() error { _, err := c.Acquire(ctx, "k", 25*time.Hour); return err },
		"ttl too short for margin": func() error { _, err := c.TryAcquire(ctx, "k", 11*time.Millisecond); return err },
	} {
		if err := call(); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// notifying is memstore seen through the Notifier interface only: releases
// wake WaitChange callers.
type notifying struct {
	*faulty
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

func newNotifying(s *memstore.Store) *notifying {
	return &notifying{faulty: &faulty{Backend: s}, waiters: map[string][]chan struct{}{}}
}

func (n *notifying) Release(ctx context.Context, l lease.Lease) error {
	err := n.faulty.Release(ctx, l)
	n.mu.Lock()
	for _, ch := range n.waiters[l.Key] {
		close(ch)
	}
	delete(n.waiters, l.Key)
	n.mu.Unlock()
	return err
}

func (n *notifying) WaitChange(ctx context.Context, key string) error {
	ch := make(chan struct{})
	n.mu.Lock()
	n.waiters[key] = append(n.waiters[key], ch)
	n.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
