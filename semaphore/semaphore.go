// Package semaphore lets at most N holders run at once under one name, on
// any lease.Backend, and gives every slot its own fencing token.
//
// A semaphore of N slots is N leases, on the keys NAME/slots/0 to
// NAME/slots/N-1: at most one holder per key (I3) makes at most N holders,
// each slot's tokens rise by themselves (I1 per slot), and a holder that
// dies frees its slot when its lease expires, so no slot leaks. A slot is a
// lease.Hold, renewed in the background and lost as a Hold is (I5); guard
// what a slot's holder writes per slot, with the slot's token.
//
// Acquire waits in line: waiters first take the lease NAME/queue (for at
// most MaxLineTTL, so that a waiter that dies at the head holds up the line
// no longer), which the backend hands out first come, first served where
// it can (lease.WaitAcquirer), and only the one at the head of the line
// looks for a free slot, woken by the backend's watch (lease.Follow, which
// watches again after a break: the waiter does not fail with it) or, without
// one or with one refused as unsupported, at the slots' expiries and the
// Client's backoff (lease.WithBackoff; 5 to 500 ms by default). A waiter
// whose turn at the head is lost (its renewals failed, or it paused past
// the line's TTL) queues again. TryAcquire does not wait in line: it
// takes any free slot at once, or fails.
//
// The limit N is stored with the slots: each is held under its holder's
// owner with the limit appended ("worker-7 #limit=3"), and a process whose
// N differs admits nobody while such holders remain and gets an error
// matching lease.ErrConflict; WithResize changes the limit explicitly.
// Admission lists the holders (its slots alone, not other keys under
// NAME/slots/) before it takes a slot and again after, and
// gives the slot up if they disagree or number more than N, so processes
// that disagree never have more than the stored N admitted at once. An
// idle semaphore (no slot held) stores no limit: the first holder's N is
// the limit from then on.
package semaphore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/wait"
)

// MaxSlots is the most slots a semaphore may have.
const MaxSlots = 1024

// MaxLineTTL bounds the TTL of the lease NAME/queue that the head of the
// line holds while it looks for a slot: a waiter that dies at the head
// (and so cannot give the turn back) holds up the line at most this long,
// not a slot's TTL. Slots shorter than it use their own TTL.
const MaxLineTTL = 2 * time.Second

// Semaphore is N slots under one name on a backend.
type Semaphore struct {
	client *lease.Client // takes the turn, and lists
	slots  *lease.Client // takes slots, under the owner with the limit
	name   string
	n      int
	ttl    time.Duration
	resize bool // WithResize

	skipCheck bool // a broken semaphore for negative controls (export_test.go)

	rmu sync.Mutex // rng is not safe for concurrent use
	rng *rand.Rand // nil: math/rand/v2's global source
}

// config is what the Options set before the Semaphore is built.
type config struct {
	src    rand.Source
	resize bool
}

// Option configures a Semaphore in New.
type Option func(*config) error

// WithRand makes the semaphore draw its random choices — the slot
// TryAcquire and Acquire try first, and the jitter of a polled wait — from
// src, instead of math/rand/v2's global source (the slot) and the Client's
// jitter (lease.WithJitter; the wait), so that a seeded src makes them
// repeat with no other user of the source in between (the simulator
// replays a seed this way). The semaphore uses src under a lock of its
// own; nobody else may use it.
func WithRand(src rand.Source) Option {
	return func(c *config) error {
		if src == nil {
			return fmt.Errorf("%w: semaphore: WithRand(nil)", lease.ErrInvalid)
		}
		c.src = src
		return nil
	}
}

// New returns the semaphore name of n slots (1 to MaxSlots) taken through
// c, whose slots are held for ttl between renewals. n is checked against
// the limit that the semaphore's holders were admitted under (see
// checkLimit): a process that disagrees admits nobody and gets an error
// matching lease.ErrConflict, unless WithResize makes its n the new limit.
//
// c's options reach everything the semaphore does: it takes its turn in
// line as c's owner, and its slots under c's owner with the limit appended
// (lease.Client.WithOwner), renewed with c's other holds; a polled wait
// runs on c's clock, at c's backoff (lease.WithClock, lease.WithBackoff).
func New(c *lease.Client, name string, n int, ttl time.Duration, opts ...Option) (*Semaphore, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: semaphore: client is nil", lease.ErrInvalid)
	}
	if n < 1 || n > MaxSlots {
		return nil, fmt.Errorf("%w: semaphore: %d slots, want 1 to %d", lease.ErrInvalid, n, MaxSlots)
	}
	s := &Semaphore{name: name, n: n, ttl: ttl}
	// The longest key it uses must be a valid key.
	if err := lease.ValidateKey(s.slotKey(n - 1)); err != nil {
		return nil, fmt.Errorf("semaphore: name %q: %w", name, err)
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: semaphore: nil Option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s.client, s.resize = c, cfg.resize
	var err error
	if s.slots, err = c.WithOwner(slotOwner(c.Owner(), n)); err != nil {
		return nil, fmt.Errorf("semaphore: the owner with its limit: %w", err)
	}
	if cfg.src != nil {
		s.rng = rand.New(cfg.src)
	}
	return s, nil
}

// intN is rand.IntN from the semaphore's source.
func (s *Semaphore) intN(n int) int {
	if s.rng == nil {
		return rand.IntN(n)
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.rng.IntN(n)
}

// float64 is the jitter of a polled wait: from the semaphore's source, or
// else the Client's.
func (s *Semaphore) float64() float64 {
	if s.rng == nil {
		return s.client.Jitter()
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.rng.Float64()
}

func (s *Semaphore) slotKey(i int) string { return s.name + "/slots/" + strconv.Itoa(i) }
func (s *Semaphore) queueKey() string     { return s.name + "/queue" }
func (s *Semaphore) slotsPrefix() string  { return s.name + "/slots/" }

// isSlot reports whether key is one of the semaphore's slots under any
// limit: NAME/slots/I as slotKey spells it, I below MaxSlots. Other keys
// under the prefix — a semaphore named NAME/slots/gpu, its line, any lease
// there — are not its holders.
func (s *Semaphore) isSlot(key string) bool {
	rest, ok := strings.CutPrefix(key, s.slotsPrefix())
	if !ok {
		return false
	}
	i, err := strconv.Atoi(rest)
	return err == nil && i >= 0 && i < MaxSlots && strconv.Itoa(i) == rest
}

// Slot is one of the semaphore's slots, held.
type Slot struct {
	*lease.Hold
	n int
}

// Number returns the slot's number, 0 to N-1.
func (s *Slot) Number() int { return s.n }

// TryAcquire takes a free slot at once, or fails with an error matching
// lease.ErrHeld when all are held. It tries the slots from a random one on,
// so that many callers do not all contend for slot 0.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Slot, error) {
	slot, _, err := s.tryAll(ctx)
	return slot, err
}

// tryAll tries every slot once, checking the limit before and after (see
// checkLimit). When all are held it also returns the earliest expiry among
// their holders, on the backend's clock.
func (s *Semaphore) tryAll(ctx context.Context) (*Slot, time.Time, error) {
	if err := s.checkLimit(ctx); err != nil {
		return nil, time.Time{}, err
	}
	var soonest time.Time
	start := s.intN(s.n)
	for j := range s.n {
		i := (start + j) % s.n
		h, err := s.slots.TryAcquire(ctx, s.slotKey(i), s.ttl)
		if err == nil {
			if err := s.checkLimit(ctx); err != nil {
				release(ctx, h, s.ttl)
				return nil, time.Time{}, err
			}
			return &Slot{Hold: h, n: i}, time.Time{}, nil
		}
		if !errors.Is(err, lease.ErrHeld) {
			return nil, time.Time{}, err
		}
		if at := lease.HolderExpires(err); !at.IsZero() && (soonest.IsZero() || at.Before(soonest)) {
			soonest = at
		}
	}
	return nil, soonest, fmt.Errorf("%w: semaphore %q: all %d slots are held", lease.ErrHeld, s.name, s.n)
}

// release releases h on ctx's values but not its end, for at most ttl
// (h's): by then its lease has expired anyway.
func release(ctx context.Context, h *lease.Hold, ttl time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	_ = h.Release(rctx)
}

// Acquire waits in line for a slot until it has one or ctx ends. Its turn
// in line is given back for at most the line's TTL (MaxLineTTL at most),
// so that it returns within that of ctx's end however slow the backend. A
// turn lost at the head of the line (its renewals failed, or the process
// paused past the line's TTL) is taken again, at the back of the line.
func (s *Semaphore) Acquire(ctx context.Context) (*Slot, error) {
	for {
		slot, lost, err := s.acquireInLine(ctx)
		if lost && ctx.Err() == nil {
			continue // the next in line may be looking now: queue again
		}
		return slot, err
	}
}

// acquireInLine is one turn of Acquire: it waits in line, then looks for a
// slot until it has one, ctx ends or the turn is lost (lost true).
func (s *Semaphore) acquireInLine(ctx context.Context) (_ *Slot, lost bool, _ error) {
	lineTTL := min(s.ttl, MaxLineTTL)
	turn, err := s.client.Acquire(ctx, s.queueKey(), lineTTL)
	if err != nil {
		return nil, false, err
	}
	// Given back on ctx's values, not its end (which may be why it is
	// given back), for at most the line's TTL: by then it has expired
	// anyway, and a backend that does not answer holds Acquire no longer.
	defer release(ctx, turn, lineTTL)
	// Looking for a slot ends when ctx does, or when the turn is lost (the
	// next in line may have it by then).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(turn.Context(), func() { cancel(context.Cause(turn.Context())) })
	defer stop()
	var slot *Slot
	if w, ok := s.client.Backend().(lease.Watcher); ok {
		slot, err = s.awaitWatched(ctx, w)
	} else {
		slot, err = s.awaitPolled(ctx)
	}
	if err != nil && errors.Is(context.Cause(turn.Context()), lease.ErrLost) {
		return nil, true, err
	}
	return slot, false, err
}

// awaitWatched tries the slots whenever the watch says one may have freed:
// at each picture's Synced (a watch that broke is followed again, and a
// slot may have freed during the break) and at each release or expiry. A
// watch refused as unsupported (a leasehttp.Client whose server's backend
// cannot watch) gives way to polling.
func (s *Semaphore) awaitWatched(ctx context.Context, w lease.Watcher) (*Slot, error) {
	for ev, err := range lease.Follow(ctx, w, s.slotsPrefix(), lease.FollowClient(s.client)) {
		if errors.Is(err, errors.ErrUnsupported) {
			return s.awaitPolled(ctx)
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind != lease.Synced && (ev.Kind != lease.Released && ev.Kind != lease.Expired || !s.isSlot(ev.Lease.Key)) {
			continue
		}
		slot, _, err := s.tryAll(ctx)
		if err == nil || !errors.Is(err, lease.ErrHeld) {
			return slot, err
		}
	}
	return nil, fmt.Errorf("semaphore %q: %w", s.name, context.Cause(ctx))
}

// awaitPolled tries the slots at the earliest holder's expiry, or at the
// backoff if sooner, on the Client's clock.
func (s *Semaphore) awaitPolled(ctx context.Context) (*Slot, error) {
	lo, hi := s.client.Backoff()
	clk := s.client.Clock()
	loop := wait.OnClock(wait.NewPacer(lo, hi, s.float64), clk.Now, clk.AfterFunc)
	for {
		slot, soonest, err := s.tryAll(ctx)
		if err == nil || !errors.Is(err, lease.ErrHeld) {
			return slot, err
		}
		if err := loop.Wait(ctx, soonest); err != nil {
			return nil, fmt.Errorf("semaphore %q: %w", s.name, err)
		}
	}
}

// Holders returns the slots held now, with zero IDs, in key order. It walks
// every page of the backend's List: a slot held throughout is listed once.
func (s *Semaphore) Holders(ctx context.Context) ([]lease.Lease, error) {
	var out []lease.Lease
	for l, err := range s.slotsHeld(ctx) {
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// slotsHeld walks the semaphore's slots held now (lease.All over its
// prefix, keeping only its slots: isSlot).
func (s *Semaphore) slotsHeld(ctx context.Context) iter.Seq2[lease.Lease, error] {
	return func(yield func(lease.Lease, error) bool) {
		for l, err := range s.client.All(ctx, s.slotsPrefix()) {
			if err == nil && !s.isSlot(l.Key) {
				continue
			}
			if !yield(l, err) || err != nil {
				return
			}
		}
	}
}
