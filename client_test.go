package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasetest/fakeclock"
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
		store := memtest.New(t)
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
				store := memtest.New(t)
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
		store := memtest.New(t)
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
		store := memtest.New(t)
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

// heldForever answers every Acquire with a holder whose lease expires 10 ms
// from now — a holder that keeps renewing — and counts the calls. It hides
// the backend's optional interfaces, so Client.Acquire polls. After limit
// calls it fails with errRunaway, so that a hot loop ends the test instead
// of spinning in the bubble forever.
type heldForever struct {
	lease.Backend
	calls atomic.Int64
	limit int64
}

var errRunaway = errors.New("test: too many Acquire calls")

func (b *heldForever) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if b.calls.Add(1) > b.limit {
		return lease.Lease{}, errRunaway
	}
	return lease.Lease{}, &lease.HeldError{Key: key, Owner: "holder", Token: 1, Expires: time.Now().Add(10 * time.Millisecond)}
}

// TestPollingBackoffWithAHugeMaximum: WithBackoff accepts any max >= min,
// "no cap to speak of" included. The backoff doubles on every poll even while
// the HeldError's expiry hint keeps each wait short, so with such a maximum it
// must not overflow into a negative or zero backoff: that turns the poll into
// a hot loop hammering the backend.
func TestPollingBackoffWithAHugeMaximum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &heldForever{Backend: memtest.New(t), limit: 100_000}
		c := newClient(t, b, "waiter", lease.WithBackoff(time.Millisecond, time.Duration(math.MaxInt64)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Acquire(ctx, "job", time.Second)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire = %v, want DeadlineExceeded after 10s of polling", err)
		}
		// Each poll waits about the 11 ms the hint allows: ~910 in 10 s.
		if n := b.calls.Load(); n > 2000 {
			t.Errorf("%d Acquire calls in 10s against a holder expiring every 10ms: the poll is a hot loop", n)
		}
	})
}

// A lease granted after a long FIFO wait is renewed at once, so its deadline
// counts from a recent send time rather than from the start of the wait.
func TestLongWaitRenewsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
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

// TestLongWaitRenewalWithAnotherTokenFails: after a long queue wait the
// Client renews at once; answered with another token, Acquire fails (the
// backend is not to be trusted) and releases what it was granted.
func TestLongWaitRenewalWithAnotherTokenFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		ctx := context.Background()
		if _, err := store.Acquire(ctx, "job", "worker-a", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		c := newClient(t, retokenRenew{store}, "worker-b")
		h, err := c.Acquire(ctx, "job", 3*time.Second) // queues for 3 s, a whole TTL
		if err == nil {
			h.Release(ctx)
			t.Fatal("Acquire succeeded although the renewal right after the wait came back with another token")
		}
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("err = %v, want ErrUnavailable", err)
		}
		if l, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("after the failed Acquire the key is %+v, %v; want it released", l, err)
		}
	})
}

// slowAcquire answers every acquisition after calling delay, which sleeps
// in the test's synctest bubble: a backend, or a network, slower than the
// lease's safe window.
type slowAcquire struct {
	lease.Backend
	delay func()
}

func (b slowAcquire) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, owner, ttl)
	b.delay()
	return l, err
}

// TestAcquireAnsweredPastTheDeadlineFails: an acquisition whose answer came
// after the safe deadline (the lease may already have expired and gone to
// someone else) yields no Hold, lost from birth, but an error; and the
// lease, still held by the backend, is released for the next contender.
func TestAcquireAnsweredPastTheDeadlineFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		const ttl = 10 * time.Second
		c := newClient(t, slowAcquire{store, func() { time.Sleep(ttl - 100*time.Millisecond) }}, "worker-a")
		ctx := context.Background()
		for name, acquire := range map[string]func(context.Context, string, time.Duration) (*lease.Hold, error){
			"TryAcquire": c.TryAcquire, "Acquire": c.Acquire,
		} {
			h, err := acquire(ctx, "job", ttl)
			if err == nil {
				err := h.Err()
				h.Release(ctx)
				t.Fatalf("%s returned a Hold (Err %v) for a lease answered after its safe deadline", name, err)
			}
			if !errors.Is(err, lease.ErrUnavailable) {
				t.Errorf("%s: err = %v, want ErrUnavailable", name, err)
			}
			if l, err := store.Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("%s: the lease is %+v, %v; want it released", name, l, err)
			}
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
	store := memtest.New(t)
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
	store := memtest.New(t)
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

// TestDriftMarginThatCannotFit: a drift margin larger than any TTL, or a NaN
// fraction, must be refused as invalid, not accepted and then turned into
// acquisitions that are granted, given back at once and reported as a late
// answer (ErrUnavailable). 2×margin overflowed in check, so a huge minimum
// passed it.
func TestDriftMarginThatCannotFit(t *testing.T) {
	store := memtest.New(t)
	if _, err := lease.NewClient(store, lease.WithDriftMargin(math.NaN(), 0)); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("NewClient with a NaN drift fraction: err = %v, want ErrInvalid", err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		fraction float64
		min      time.Duration
	}{
		{"min 2^62", 0, 1 << 62},
		{"min MaxInt64", 0, math.MaxInt64},
		{"fraction and min MaxInt64", 0.01, math.MaxInt64},
		{"min 3h", 0, 3 * time.Hour},
	} {
		c := newClient(t, store, "w", lease.WithDriftMargin(tc.fraction, tc.min))
		for _, acquire := range []func() (*lease.Hold, error){
			func() (*lease.Hold, error) { return c.TryAcquire(ctx, "k", time.Hour) },
			func() (*lease.Hold, error) { return c.Acquire(ctx, "k", time.Hour) },
		} {
			h, err := acquire()
			if h != nil {
				_ = h.Release(ctx)
			}
			if !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("%s: acquiring a 1h lease: err = %v, want ErrInvalid", tc.name, err)
			}
		}
		if got, err := store.Get(ctx, "k"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("%s: key held after refused acquisitions: %+v, %v", tc.name, got, err)
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

// cancelRacesCommit wraps a real backend whose Acquire, like a statement
// that commits just as its context is cancelled (pgx, go-redis), grants the
// lease once gate opens but answers ctx's error if ctx ended meanwhile. It
// hides the backend's optional interfaces, so Acquire polls.
type cancelRacesCommit struct {
	lease.Backend
	sent    chan struct{} // told of each request, as it reaches the backend
	gate    chan struct{}
	granted chan struct{} // told of each grant, once the backend made it
}

func (b cancelRacesCommit) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	select {
	case b.sent <- struct{}{}:
	default:
	}
	<-b.gate
	l, err := b.Backend.Acquire(context.Background(), key, owner, ttl)
	if err == nil {
		select {
		case b.granted <- struct{}{}:
		default:
		}
	}
	if ctx.Err() != nil {
		return lease.Lease{}, ctx.Err()
	}
	return l, err
}

// TestCancelledAcquireLeavesNoPhantom: an Acquire or TryAcquire whose
// context ends while its request is in flight returns at once, and a grant
// the backend makes as the request ends is given back, not left held by
// nobody until its TTL (a cancelled Campaign's phantom term, which the
// recipe suite found on PostgreSQL; TryAcquire passed its ctx straight to
// the backend and left it so).
func TestCancelledAcquireLeavesNoPhantom(t *testing.T) {
	for _, name := range []string{"Acquire", "TryAcquire"} {
		t.Run(name, func(t *testing.T) {
			b := cancelRacesCommit{Backend: memtest.New(t), sent: make(chan struct{}, 1), gate: make(chan struct{}), granted: make(chan struct{}, 1)}
			c, err := lease.NewClient(b)
			if err != nil {
				t.Fatal(err)
			}
			acquire := c.Acquire
			if name == "TryAcquire" {
				acquire = c.TryAcquire
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := acquire(ctx, "job", time.Minute)
				done <- err
			}()
			<-b.sent // the request is in flight
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("%s after cancel = %v, want context.Canceled", name, err)
				}
			case <-time.After(10 * time.Second):
				close(b.gate)
				t.Fatalf("%s did not return when its context ended with its request in flight", name)
			}
			close(b.gate)
			<-b.granted // the grant made as the call was cancelled
			// The give-back runs in the background.
			poll.Until(t, 10*time.Second, func() error {
				if _, err := b.Backend.Get(t.Context(), "job"); !errors.Is(err, lease.ErrNotFound) {
					return fmt.Errorf("Get(job) = %v, want ErrNotFound: the grant made as the %s was cancelled is still held", err, name)
				}
				return nil
			})
		})
	}
}

// TestTryAcquireEndedSendsNothing: a TryAcquire whose context has ended
// before it starts sends no request at all (that it now detaches the
// request from ctx must not turn an ended ctx into a grant and a release).
func TestTryAcquireEndedSendsNothing(t *testing.T) {
	b := cancelRacesCommit{Backend: memtest.New(t), sent: make(chan struct{}, 1), gate: make(chan struct{}), granted: make(chan struct{}, 1)}
	close(b.gate)
	c := newClient(t, b, "worker-a")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if h, err := c.TryAcquire(ctx, "job", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire(ended ctx) = %v, %v; want context.Canceled", h, err)
	}
	select {
	case <-b.sent:
		t.Fatal("TryAcquire with an ended ctx sent an Acquire")
	default:
	}
}

// TestJitterSharedAcrossClients: one WithJitter option given to several
// Clients may carry a source that is not safe for concurrent use; under
// -race, Clients that each locked only their own use of it raced (an
// election.Elector once gave its options to a Client per Campaign).
func TestJitterSharedAcrossClients(t *testing.T) {
	src := rand.New(rand.NewPCG(1, 2))
	opt := lease.WithJitter(src.Float64)
	b := memtest.New(t)
	var wg sync.WaitGroup
	for i := range 4 {
		c, err := lease.NewClient(b, opt)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for j := range 50 {
				h, err := c.TryAcquire(t.Context(), "jitter/"+strconv.Itoa(i)+"/"+strconv.Itoa(j), time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				_ = h.Release(t.Context())
			}
		})
	}
	wg.Wait()
}

// TestClientRefusesANilOption: a nil Option is refused as invalid, as every
// constructor of the module refuses one (options_test.go), not called.
func TestClientRefusesANilOption(t *testing.T) {
	if _, err := lease.NewClient(memtest.New(t), lease.WithOwner("w"), nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("NewClient with a nil option: %v, want ErrInvalid", err)
	}
}

// TestClientWithOwner: a Client made by WithOwner acquires as its owner and
// is its parent in everything else: the parent's clock judges its holds,
// and the parent's scheduler renews them, in the same batches as the
// parent's own. A bad owner is refused as WithOwner refuses it.
func TestClientWithOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBatchCounter(memtest.New(t))
		clk := fakeclock.New(time.Now())
		c := newClient(t, b, "parent", lease.WithClock(clk), lease.WithJitter(func() float64 { return 0 }))
		d, err := c.WithOwner("child")
		if err != nil {
			t.Fatal(err)
		}
		if d.Owner() != "child" || c.Owner() != "parent" {
			t.Fatalf("owners: %q and %q, want child and parent", d.Owner(), c.Owner())
		}
		if d.Clock() != c.Clock() || d.Backend() != c.Backend() {
			t.Fatal("the child's clock or backend is not its parent's")
		}
		for _, bad := range []string{"", "a\nb"} {
			if _, err := c.WithOwner(bad); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("WithOwner(%q): %v, want ErrInvalid", bad, err)
			}
		}
		ctx := context.Background()
		const ttl = 3 * time.Second
		hc, err := c.TryAcquire(ctx, "with-owner/parent", ttl)
		if err != nil {
			t.Fatal(err)
		}
		hd, err := d.TryAcquire(ctx, "with-owner/child", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if hd.Lease().Owner != "child" || hc.Lease().Owner != "parent" {
			t.Fatalf("held as %q and %q, want child and parent", hd.Lease().Owner, hc.Lease().Owner)
		}
		// The fake clock alone moves the holds' schedule: a child on a
		// clock of its own would be neither renewed nor judged by it.
		clk.Advance(ttl / 2)
		synctest.Wait()
		b.mu.Lock()
		batches, largest, singles := b.batches, b.largest, b.singles
		b.mu.Unlock()
		if batches != 1 || largest != 2 || singles != 0 {
			t.Fatalf("renewed in %d batches (the largest of %d) and %d single renewals; want one batch of both holds", batches, largest, singles)
		}
		_ = hc.Release(ctx)
		_ = hd.Release(ctx)
	})
}

// TestClientPacing: Backoff and Jitter give the recipes what WithBackoff
// and WithJitter set.
func TestClientPacing(t *testing.T) {
	c := newClient(t, memtest.New(t), "w", lease.WithBackoff(time.Second, time.Minute), lease.WithJitter(func() float64 { return 0.25 }))
	if lo, hi := c.Backoff(); lo != time.Second || hi != time.Minute {
		t.Errorf("Backoff() = %v, %v; want 1s, 1m0s", lo, hi)
	}
	if j := c.Jitter(); j != 0.25 {
		t.Errorf("Jitter() = %v, want 0.25", j)
	}
}
