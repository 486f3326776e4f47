package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// refuseKey refuses the renewals of one key with ErrNotHeld, as a backend
// that lost that lease would.
type refuseKey struct {
	lease.Backend
	key atomic.Pointer[string]
}

func (b *refuseKey) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if k := b.key.Load(); k != nil && *k == l.Key {
		return lease.Lease{}, fmt.Errorf("%w: refused for the test", lease.ErrNotHeld)
	}
	return b.Backend.Renew(ctx, l, ttl)
}

// TestSessionDiesTogether: when one hold of a session is lost, the session
// ends with that loss, and every other hold in it is released at once (its
// key free for others) with a cause matching ErrLost.
func TestSessionDiesTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		b := &refuseKey{Backend: store}
		c := newClient(t, b, "worker-a")
		ctx := context.Background()
		s := c.NewSession()
		var holds []*lease.Hold
		for _, k := range []string{"shard/a", "shard/b", "shard/c"} {
			h, err := s.TryAcquire(ctx, k, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			holds = append(holds, h)
		}
		time.Sleep(5 * time.Second)
		if err := s.Err(); err != nil {
			t.Fatalf("session ended while every renewal succeeded: %v", err)
		}
		lost := "shard/b"
		b.key.Store(&lost)
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Error("session still live 5 s after one of its holds was refused")
		}
		synctest.Wait()
		if err := s.Err(); !errors.Is(err, lease.ErrLost) {
			t.Errorf("session's Err = %v, want ErrLost", err)
		}
		for _, h := range holds {
			if err := h.Err(); !errors.Is(err, lease.ErrLost) {
				t.Errorf("%s: Err = %v after its session lost %s, want ErrLost", h.Key(), err, lost)
			}
			if h.Key() == lost {
				continue
			}
			if _, err := store.Get(ctx, h.Key()); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("%s still held on the backend after its session ended: %v", h.Key(), err)
			}
		}
		if _, err := s.TryAcquire(ctx, "shard/d", 3*time.Second); !errors.Is(err, lease.ErrLost) {
			t.Errorf("TryAcquire in an ended session: %v, want its ErrLost", err)
		}
		if _, err := store.Get(ctx, "shard/d"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("an ended session acquired shard/d: %v", err)
		}
		for _, h := range holds {
			_ = h.Release(ctx)
		}
	})
}

// gateRelease holds back the releases of one key until open is closed.
type gateRelease struct {
	lease.Backend
	key  string
	open chan struct{}
}

func (b *gateRelease) Release(ctx context.Context, l lease.Lease) error {
	if l.Key == b.key {
		select {
		case <-b.open:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return b.Backend.Release(ctx, l)
}

// TestSessionCloseAfterALossWaitsForItsReleases: a session ended by a loss
// releases its other holds in a goroutine of its own; a Close meanwhile
// returns only once they are released, so that the program can take the
// same keys again at once (it used to return at once, with the leases still
// held: a TryAcquire of the same key right after was refused by the
// program's own lease), and with ctx's cause if ctx ends first.
func TestSessionCloseAfterALossWaitsForItsReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		refuse := &refuseKey{Backend: store}
		gate := &gateRelease{Backend: refuse, key: "b", open: make(chan struct{})}
		c := newClient(t, gate, "worker-a")
		ctx := context.Background()
		s := sessionHolding(t, c, "a", "b")
		lost := "a"
		refuse.key.Store(&lost)
		<-s.Done()
		synctest.Wait() // b's release has started, and waits at the gate

		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := s.Close(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close while b's release is held back, ctx ending = %v, want its cause", err)
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		synctest.Wait()
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while b's release was still held back", err)
			close(gate.open)
			synctest.Wait()
			return
		default:
		}
		close(gate.open)
		if err := <-closed; err != nil {
			t.Errorf("Close after a loss = %v, want nil (the loss is Err's)", err)
		}
		if _, err := store.Get(ctx, "b"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("b still held after Close returned: %v", err)
		}
		h, err := c.TryAcquire(ctx, "b", time.Second)
		if err != nil {
			t.Fatalf("TryAcquire of b right after Close: %v", err)
		}
		_ = h.Release(ctx)
	})
}

// TestSessionClose: Close releases every hold with ErrReleased; a hold
// released by itself before just leaves the session.
func TestSessionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		c := newClient(t, store, "worker-a")
		ctx := context.Background()
		s := c.NewSession()
		a, err := s.TryAcquire(ctx, "a", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(ctx, "b", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if err := s.Err(); err != nil {
			t.Fatalf("a hold released by itself ended the session: %v", err)
		}
		if err := b.Err(); err != nil {
			t.Fatalf("b: %v", err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Err(); !errors.Is(err, lease.ErrReleased) {
			t.Errorf("session's Err after Close = %v, want ErrReleased", err)
		}
		if err := b.Err(); !errors.Is(err, lease.ErrReleased) {
			t.Errorf("b's Err after Close = %v, want ErrReleased", err)
		}
		if _, err := store.Get(ctx, "b"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("b still held after Close: %v", err)
		}
		if err := s.Close(ctx); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
}

// TestSessionErrReportsALossOnceADeadlinePassed: after a pause past one
// hold's safe deadline, before any timer has run, the session's Err must
// report the loss, as Hold.Err does (I5): the application checks it right
// before it writes under the group. The session's context ends with it,
// a new hold is refused, and the session's other holds are released.
func TestSessionErrReportsALossOnceADeadlinePassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		clk := fakeclock.New(time.Now())
		c := newClient(t, store, "worker-a", lease.WithClock(clk))
		ctx := context.Background()
		s := c.NewSession()
		short, err := s.TryAcquire(ctx, "short", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		long, err := s.TryAcquire(ctx, "long", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The process was paused: the clock is past short's deadline, no
		// timer ran.
		clk.JumpTo(short.Deadline().Add(time.Millisecond))
		if err := s.Err(); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("session's Err after a hold's safe deadline passed (timer not yet run) = %v, want ErrLost", err)
		}
		select {
		case <-s.Done():
		default:
			t.Error("the session's Err reported a loss but Done is not closed")
		}
		if h, err := s.TryAcquire(ctx, "more", time.Minute); !errors.Is(err, lease.ErrLost) {
			t.Errorf("TryAcquire in a session whose Err reported a loss: %v, want ErrLost", err)
			if h != nil {
				_ = h.Release(ctx)
			}
		}
		// What an application does on hearing it: Close, which has nothing
		// more to say of a session ended by a loss, and leaves the loss as
		// the cause of the other holds' end.
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close after the session's Err reported a loss = %v, want nil (the loss is Err's)", err)
		}
		if err := s.Err(); !errors.Is(err, lease.ErrLost) {
			t.Errorf("session's Err after Close = %v, want the loss", err)
		}
		synctest.Wait()
		if err := long.Err(); !errors.Is(err, lease.ErrLost) {
			t.Errorf("long's Err after its session lost short = %v, want ErrLost", err)
		}
		if _, err := store.Get(ctx, "long"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("long still held on the backend after its session ended: %v", err)
		}
	})
}

// TestSessionEndEndsAWaitingAcquire: an Acquire waiting for a key held
// elsewhere when its session ends — by a loss, or by Close — returns at
// once with the session's cause, and is never granted the key for a
// session already over. It used to wait on until the key freed (a minute
// here), take it for the dead session and only then give it back; and
// Close returned nil while that wait was still in line.
func TestSessionEndEndsAWaitingAcquire(t *testing.T) {
	for _, tc := range []struct{ how, wait string }{{"loss", "polled"}, {"Close", "polled"}, {"loss", "AcquireWait"}, {"Close", "AcquireWait"}} {
		how := tc.how
		t.Run(tc.how+"/"+tc.wait, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memtest.New(t)
				b := &refuseKey{Backend: store}
				var backend lease.Backend = b
				if tc.wait == "AcquireWait" {
					backend = waitingRefuseKey{b}
				}
				c := newClient(t, backend, "worker-a")
				other := newClient(t, store, "worker-b")
				ctx := context.Background()
				s := c.NewSession()
				if _, err := s.TryAcquire(ctx, "a", 3*time.Second); err != nil {
					t.Fatal(err)
				}
				busy, err := other.TryAcquire(ctx, "b", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = busy.Release(ctx) }()
				got := make(chan error, 1)
				go func() {
					h, err := s.Acquire(ctx, "b", 3*time.Second)
					if h != nil {
						_ = h.Release(ctx)
					}
					got <- err
				}()
				synctest.Wait() // in line for b
				want := lease.ErrReleased
				if how == "loss" {
					lost := "a"
					b.key.Store(&lost)
					<-s.Done()
					want = lease.ErrLost
				} else if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-got:
					if !errors.Is(err, want) {
						t.Errorf("the waiting Acquire returned %v, want the session's cause (%v)", err, want)
					}
				case <-time.After(10 * time.Second):
					t.Error("Session.Acquire still waiting 10 s after its session ended")
					_ = busy.Release(ctx)
					<-got
				}
				_ = busy.Release(ctx)
				synctest.Wait()
				if l, err := store.Get(ctx, "b"); err == nil {
					t.Errorf("b granted to %q after the session ended", l.Owner)
				}
			})
		})
	}
}

// waitingRefuseKey is refuseKey with the store's own FIFO wait.
type waitingRefuseKey struct{ *refuseKey }

func (b waitingRefuseKey) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	return b.Backend.(lease.WaitAcquirer).AcquireWait(ctx, key, owner, ttl)
}

// slowGrant answers Acquire only once gate is closed, as a backend whose
// answer is on its way back when the session ends.
type slowGrant struct {
	lease.Backend
	gate chan struct{}
}

func (b *slowGrant) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, owner, ttl)
	<-b.gate
	return l, err
}

// TestSessionCloseWaitsForAnAcquireInFlight: Close says no lease of the
// session is left held once it returns nil; that takes in a grant that was
// on its way back as Close ran: Close returns once it is given back, and
// the key can be taken again at once.
func TestSessionCloseWaitsForAnAcquireInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		slow := &slowGrant{Backend: store, gate: make(chan struct{})}
		c := newClient(t, slow, "worker-a")
		ctx := context.Background()
		s := c.NewSession()
		got := make(chan error, 1)
		go func() {
			h, err := s.TryAcquire(ctx, "k", 3*time.Second)
			if h != nil {
				_ = h.Release(ctx)
			}
			got <- err
		}()
		synctest.Wait() // granted on the backend; the answer waits at the gate
		closed := make(chan error, 1)
		go func() { closed <- s.Close(ctx) }()
		synctest.Wait()
		close(slow.gate)
		if err := <-closed; err != nil {
			t.Fatalf("Close = %v", err)
		}
		if l, err := store.Get(ctx, "k"); err == nil {
			t.Errorf("k still held by %q (token %d) after Close returned nil", l.Owner, l.Token)
		}
		if err := <-got; !errors.Is(err, lease.ErrReleased) {
			t.Errorf("TryAcquire in flight at Close = %v, want ErrReleased", err)
		}
	})
}

// unreachableRenewals fails the renewals of one key with ErrUnavailable,
// as a backend out of reach for that lease: the client gives the hold up
// at its safe deadline while the backend still holds it.
type unreachableRenewals struct {
	lease.Backend
	key string
}

func (b unreachableRenewals) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if l.Key == b.key {
		return lease.Lease{}, fmt.Errorf("%w: out of reach for the test", lease.ErrUnavailable)
	}
	return b.Backend.Renew(ctx, l, ttl)
}

// failReleaseOf refuses the releases of one key with ErrUnavailable.
type failReleaseOf struct {
	lease.Backend
	key string
}

func (b failReleaseOf) Release(ctx context.Context, l lease.Lease) error {
	if l.Key == b.key {
		return fmt.Errorf("%w: release refused for the test", lease.ErrUnavailable)
	}
	return b.Backend.Release(ctx, l)
}

// TestSessionReleasesItsLostHold: the hold whose loss ends a session is
// released too, as election.Term.Resign frees a term after a loss: the
// client gave it up at its safe deadline while the backend still held it
// (for the drift margin, or longer after a renewal that arrived late), and
// Close's "no lease of the session is left held" takes it in. It used to
// be left to expire.
func TestSessionReleasesItsLostHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		c := newClient(t, unreachableRenewals{store, "a"}, "worker-a")
		ctx := context.Background()
		s := sessionHolding(t, c, "a", "b")
		<-s.Done()
		if err := s.Close(ctx); err != nil {
			t.Fatalf("Close after the loss = %v", err)
		}
		for _, k := range []string{"a", "b"} {
			if l, err := store.Get(ctx, k); err == nil {
				t.Errorf("%s still held (token %d, %v more on the backend) after the session's Close returned nil", k, l.Token, time.Until(l.Expires))
			}
		}
	})
}

// TestSessionCloseAfterALossReportsAFailedRelease: Close after a loss
// returns nil only when the session's other holds are released; a release
// the backend refused (the lease left to its TTL) is Close's error. It used
// to return nil whatever became of the releases.
func TestSessionCloseAfterALossReportsAFailedRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		refuse := &refuseKey{Backend: store}
		c := newClient(t, failReleaseOf{refuse, "b"}, "worker-a")
		ctx := context.Background()
		s := sessionHolding(t, c, "a", "b")
		lost := "a"
		refuse.key.Store(&lost)
		<-s.Done()
		if err := s.Close(ctx); !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("Close after a loss, b's release refused = %v, want ErrUnavailable", err)
		}
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close again = %v, want nil", err)
		}
	})
}

// sessionHolding is a new session of c holding keys, each for 3 s.
func sessionHolding(t *testing.T, c *lease.Client, keys ...string) *lease.Session {
	t.Helper()
	s := c.NewSession()
	for _, k := range keys {
		if _, err := s.TryAcquire(context.Background(), k, 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
