package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/semaphore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends are the ways election and semaphore must work on a backend.
var backends = memtest.Ways

// newClient is a Client on b, made with opts.
func newClient(t *testing.T, b lease.Backend, opts ...lease.Option) *lease.Client {
	t.Helper()
	c, err := lease.NewClient(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSem is the semaphore "jobs" on a Client of its own on b.
func newSem(t *testing.T, b lease.Backend, n int, ttl time.Duration, opts ...semaphore.Option) *semaphore.Semaphore {
	t.Helper()
	return newSemAs(t, b, lease.DefaultOwner(), n, ttl, opts...)
}

// newSemAs is newSem on a Client that acquires as owner.
func newSemAs(t *testing.T, b lease.Backend, owner string, n int, ttl time.Duration, opts ...semaphore.Option) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(newClient(t, b, lease.WithOwner(owner)), "jobs", n, ttl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTryAcquireTakesEverySlotOnce(t *testing.T) {
	ctx := ctxFor(t)
	s := newSem(t, memtest.New(t), 3, time.Minute)
	seen := map[int]*semaphore.Slot{}
	for range 3 {
		slot, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[slot.Number()] != nil || slot.Number() < 0 || slot.Number() > 2 {
			t.Fatalf("slot %d given twice or out of range", slot.Number())
		}
		seen[slot.Number()] = slot
		defer slot.Release(ctx)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("a fourth TryAcquire of 3 slots: %v, want ErrHeld", err)
	}
	if hs, err := s.Holders(ctx); err != nil || len(hs) != 3 {
		t.Fatalf("Holders = %d leases, %v; want 3", len(hs), err)
	}
	old := seen[1]
	if err := old.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	if again.Number() != 1 || again.Token() <= old.Token() {
		t.Errorf("the freed slot came back as slot %d token %d; want slot 1 with a token above %d", again.Number(), again.Token(), old.Token())
	}
}

// TestAcquireInLine: waiters get slots in the order they came. In a
// synctest bubble, so that synctest.Wait tells when a waiter has reached
// the line (is blocked in it).
func TestAcquireInLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := ctxFor(t)
		store := memtest.New(t) // queues the line FIFO (lease.WaitAcquirer)
		holder := newSem(t, store, 1, time.Minute)
		first, err := holder.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 2)
		var slots sync.Map
		for _, name := range []string{"w1", "w2"} {
			s := newSemAs(t, store, name, 1, time.Minute)
			go func() {
				slot, err := s.Acquire(ctx)
				if err != nil {
					t.Error(err)
					got <- ""
					return
				}
				slots.Store(name, slot)
				got <- name
			}()
			// Each is in line before the next comes: w1 at its head,
			// holding the queue, w2 waiting for the queue behind it.
			synctest.Wait()
		}
		if l, err := store.Get(ctx, "jobs/queue"); err != nil || l.Owner != "w1" {
			t.Fatalf("the line's lease is %+v, %v; want it held by w1", l, err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if name := <-got; name != "w1" {
			t.Fatalf("%q got the slot first, want w1", name)
		}
		w1, _ := slots.Load("w1")
		if err := w1.(*semaphore.Slot).Release(ctx); err != nil {
			t.Fatal(err)
		}
		if name := <-got; name != "w2" {
			t.Fatalf("%q got the slot second, want w2", name)
		}
		w2, _ := slots.Load("w2")
		_ = w2.(*semaphore.Slot).Release(ctx)
	})
}

// TestNeverMoreThanN: many workers taking and giving back slots never
// hold more than N at once, as they count it and as the backend lists it.
func TestNeverMoreThanN(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := ctxFor(t)
				const n, workers, rounds = 3, 8, 10
				b := be.New(t)
				var inside, most atomic.Int32
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						s := newSem(t, b, n, time.Minute)
						for range rounds {
							slot, err := s.Acquire(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							now := inside.Add(1)
							for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
							}
							if hs, err := s.Holders(ctx); err != nil || len(hs) > n {
								t.Errorf("the backend lists %d holders (%v), more than %d", len(hs), err, n)
							}
							time.Sleep(time.Millisecond)
							inside.Add(-1)
							if err := slot.Release(ctx); err != nil {
								t.Error(err)
							}
						}
					})
				}
				wg.Wait()
				if m := most.Load(); m > n || m < 2 {
					t.Errorf("at most %d held at once; want between 2 and %d", m, n)
				}
			})
		})
	}
}

// failRenew makes renewals fail, as for a holder cut off from the backend.
type failRenew struct{ lease.Backend }

func (failRenew) Renew(context.Context, lease.Lease, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, lease.ErrUnavailable
}

// TestDeadHolderFreesItsSlot: a holder that stops renewing loses its slot,
// and the backend frees it at its TTL for the next in line.
func TestDeadHolderFreesItsSlot(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := ctxFor(t)
			b := be.New(t)
			const ttl = 200 * time.Millisecond
			// Before the dead holder's grant, whose lease expires a TTL
			// after it: timed from after it, a slow TryAcquire (a loaded
			// host) left the slot free sooner than ttl/2 after start.
			start := time.Now()
			dead, err := newSem(t, failRenew{b}, 1, ttl).TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			slot, err := newSem(t, b, 1, ttl).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer slot.Release(ctx)
			if time.Since(start) < ttl/2 {
				t.Errorf("the slot came free after %v, before the dead holder's lease could expire", time.Since(start))
			}
			if !errors.Is(dead.Err(), lease.ErrLost) {
				t.Errorf("the dead holder's slot: %v, want ErrLost", dead.Err())
			}
			if slot.Token() <= dead.Token() {
				t.Errorf("the slot's next token %d is not above %d", slot.Token(), dead.Token())
			}
		})
	}
}

func TestAcquireEndsWithItsContext(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			b := be.New(t)
			s := newSem(t, b, 1, time.Minute)
			slot, err := s.TryAcquire(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			defer slot.Release(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if _, err := s.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire while the only slot is held: %v, want DeadlineExceeded", err)
			}
			// The line is free again for the next waiter.
			if _, err := b.Get(context.Background(), "jobs/queue"); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("the queue lease after Acquire gave up: %v, want it released", err)
			}
		})
	}
}

func TestNewRefusesNonsense(t *testing.T) {
	b := memtest.New(t)
	if _, err := semaphore.New(nil, "jobs", 1, time.Second); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New with a nil Client: %v, want ErrInvalid", err)
	}
	for _, tc := range []struct {
		name string
		n    int
		ttl  time.Duration
	}{
		{"jobs", 0, time.Second},
		{"jobs", semaphore.MaxSlots + 1, time.Second},
		{"jobs", 1, time.Nanosecond},
		{"bad\x00name", 1, time.Second},
		{strings.Repeat("k", lease.MaxKeyLen), 1, time.Second},
	} {
		if _, err := semaphore.New(newClient(t, b), tc.name, tc.n, tc.ttl); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New(%.20q, %d, %v): %v, want ErrInvalid", tc.name, tc.n, tc.ttl, err)
		}
	}
}

// TestWithRandRepeats: the slots TryAcquire takes, in order, are the same
// for the same seed, and differ for another one.
func TestWithRandRepeats(t *testing.T) {
	ctx := ctxFor(t)
	const n = 64
	order := func(seed uint64) []int {
		s := newSem(t, memtest.New(t), n, time.Minute, semaphore.WithRand(rand.NewPCG(seed, 1)))
		var got []int
		for range n / 2 {
			slot, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, slot.Number())
			defer slot.Release(ctx)
		}
		return got
	}
	a, b, other := order(7), order(7), order(8)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7 took slots %v, then %v", a, b)
	}
	if slices.Equal(a, other) {
		t.Errorf("seeds 7 and 8 both took slots %v: the source is not used", a)
	}
}

func TestNewRefusesNilOptions(t *testing.T) {
	for _, opt := range []semaphore.Option{nil, semaphore.WithRand(nil)} {
		if _, err := semaphore.New(newClient(t, memtest.New(t)), "jobs", 1, time.Second, opt); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New with a nil option or source: %v, want ErrInvalid", err)
		}
	}
}

// breakOnce is a backend whose first watch breaks right after its Synced,
// as a restarting server's stream does; its later watches are the store's.
type breakOnce struct {
	lease.Backend
	watches atomic.Int32
}

func (b *breakOnce) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		first := b.watches.Add(1) == 1
		for ev, err := range b.Backend.(lease.Watcher).Watch(ctx, prefix) {
			if !yield(ev, err) {
				return
			}
			if first && ev.Kind == lease.Synced {
				yield(lease.Event{}, fmt.Errorf("%w: breakOnce: the watch breaks", lease.ErrUnavailable))
				return
			}
		}
	}
}

// TestAcquireOutlivesABrokenWatch: a waiter whose watch of the slots breaks
// watches again (lease.Follow) and takes the slot freed after the break,
// instead of failing with the break's ErrUnavailable.
func TestAcquireOutlivesABrokenWatch(t *testing.T) {
	ctx := ctxFor(t)
	b := &breakOnce{Backend: memtest.New(t)}
	s := newSem(t, b, 1, time.Minute)
	first, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		slot, err := s.Acquire(ctx)
		if err == nil {
			err = slot.Release(ctx)
		}
		got <- err
	}()
	poll.True(t, 10*time.Second, "a second watch of the slots, or Acquire's end", func() bool { return b.watches.Load() >= 2 || len(got) > 0 })
	if len(got) > 0 {
		t.Fatalf("Acquire ended when its watch broke: %v", <-got)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire across a broken watch: %v, want the freed slot", err)
	}
}

// hungRelease is a backend whose releases never answer until their
// context ends, as a server that stopped answering.
type hungRelease struct {
	lease.Backend
	open chan struct{} // closed: answer at last
}

func (b hungRelease) Release(ctx context.Context, l lease.Lease) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-b.open:
		return b.Backend.Release(ctx, l)
	}
}

// TestGivingUpIsBoundedOnAHungBackend: an Acquire whose ctx ends while it
// waits at the head of the line returns within the line's TTL however long
// the backend takes to answer the release of its turn (by then the turn
// has expired anyway); it used to wait for that answer for ever.
func TestGivingUpIsBoundedOnAHungBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		s := newSem(t, store, 1, time.Minute)
		slot, err := s.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b := hungRelease{store, make(chan struct{})}
		hung := newSem(t, b, 1, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := hung.Acquire(ctx)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire gave up with %v, want DeadlineExceeded", err)
			}
		case <-time.After(time.Second + semaphore.MaxLineTTL + time.Millisecond):
			t.Errorf("Acquire still not returned %v after its ctx ended (the backend does not answer the release of its turn)", semaphore.MaxLineTTL+time.Millisecond)
			close(b.open)
			<-done
			_ = slot.Release(context.Background())
			return
		}
		_ = slot.Release(context.Background())
	})
}

// refuseLineRenewals fails the renewals of the line's lease while on is
// set, as a backend that cannot be reached for a while.
type refuseLineRenewals struct {
	lease.Backend
	on atomic.Bool
}

func (b *refuseLineRenewals) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if b.on.Load() && strings.HasSuffix(l.Key, "/queue") {
		return lease.Lease{}, fmt.Errorf("%w: refused for the test", lease.ErrUnavailable)
	}
	return b.Backend.Renew(ctx, l, ttl)
}

// refusing wraps b in a refuseLineRenewals that keeps b's watch and FIFO
// wait, if it has them.
func refusing(b lease.Backend) (*refuseLineRenewals, lease.Backend) {
	r := &refuseLineRenewals{Backend: b}
	type full interface {
		lease.Watcher
		lease.WaitAcquirer
	}
	if f, ok := b.(full); ok {
		return r, struct {
			*refuseLineRenewals
			full
		}{r, f}
	}
	if w, ok := b.(lease.Watcher); ok {
		return r, struct {
			*refuseLineRenewals
			lease.Watcher
		}{r, w}
	}
	return r, r
}

// TestAcquireOutlivesALostTurn: a waiter whose turn at the head of the
// line is lost (its renewals failed past the line's TTL) queues again and
// takes a slot once one frees, as Acquire waits "until it has one or ctx
// ends". It used to fail with the turn's ErrLost.
func TestAcquireOutlivesALostTurn(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, b := refusing(be.New(t))
				holder, err := newSem(t, b, 1, time.Minute).TryAcquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				waiter := newSem(t, b, 1, time.Minute)
				got := make(chan error, 1)
				go func() {
					slot, err := waiter.Acquire(context.Background())
					if err == nil {
						_ = slot.Release(context.Background())
					}
					got <- err
				}()
				time.Sleep(time.Second) // at the head of the line
				r.on.Store(true)
				time.Sleep(2 * semaphore.MaxLineTTL) // its turn lost
				r.on.Store(false)
				select {
				case err := <-got:
					t.Fatalf("Acquire ended with %v when its turn was lost; want it to queue again", err)
				default:
				}
				_ = holder.Release(context.Background())
				select {
				case err := <-got:
					if err != nil {
						t.Errorf("Acquire after the slot freed: %v", err)
					}
				case <-time.After(time.Minute):
					t.Error("Acquire has no slot a minute after the slot freed")
				}
			})
		})
	}
}
