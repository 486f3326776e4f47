package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/semaphore"
)

// semName is the Semaphore workload's semaphore; its slots are the leases
// under slotsPrefix, each with a register of the same name.
const (
	semName     = "pool"
	slotsPrefix = semName + "/slots/"
	semQueue    = semName + "/queue"
)

// semaphoreWorker is the Semaphore workload's application: take a slot,
// and for a few steps, while the slot holds, write to the slot's register
// with its token; then release it.
//
// Checked: AtMostN at every grant under the slots (S1); HeldIsCurrent each
// time the worker finds its slot's Err nil (S2); TokenOrder per slot key at
// the backend and GuardOrder at each slot's register (S3).
func (s *Sim) semaphoreWorker(c *simClient) {
	defer close(c.done)
	lc, err := lease.NewClient(s.semaphoreBackend(c), append([]lease.Option{lease.WithOwner(c.name())}, c.opts...)...)
	if err != nil {
		panic(err) // valid by construction, as for the worker's Client
	}
	sem, err := semaphore.New(lc, semName, s.cfg.Slots, s.cfg.TTL,
		// The semaphore's own choices come from the seed too, so that a
		// replay is exact.
		semaphore.WithRand(rand.NewPCG(s.cfg.Seed^0x2545f4914f6cdd1d, uint64(c.idx)<<32|uint64(c.gen))))
	if err != nil {
		panic(err) // valid by construction, as for the Client
	}
	who := c.name()
	for {
		if !s.waitStep(c) {
			return
		}
		var h *lease.Hold
		switch {
		case s.cfg.CountingSemaphore:
			h, err = s.countingAcquire(c)
		case c.rng.IntN(3) == 0:
			var slot *semaphore.Slot
			if slot, err = sem.TryAcquire(c.ctx); err == nil {
				h = slot.Hold
			}
		default:
			var slot *semaphore.Slot
			if slot, err = sem.Acquire(c.ctx); err == nil {
				h = slot.Hold
			}
		}
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.stats.Slots++
		s.asideLocked(c.idx, workerLane, "%s holds %s, token %d", who, h.Key(), h.Token())
		s.mu.Unlock()
		for range 1 + c.rng.IntN(3) {
			if !s.waitStep(c) {
				break
			}
			if h.Err() != nil {
				break
			}
			s.checkCurrent(who+" as a holder", h)
			s.writeAs(c, h.Key(), who, h.Token())
		}
		_ = h.Release(context.WithoutCancel(c.ctx))
	}
}

// semaphoreBackend is c's backend for its semaphore: the calls on the
// queue's key travel on a lane of their own, so that the queue's release
// or renewal and a slot's renewal, woken at one instant on two goroutines,
// cannot swap sequence numbers from one replay to the next.
func (s *Sim) semaphoreBackend(c *simClient) lease.Backend {
	q := queueLaned{Backend: s.backend(c, workerLane), queue: s.backend(c, queueLane)}
	if w, ok := q.Backend.(lease.Watcher); ok {
		return queueLanedWatch{q, w}
	}
	return q
}

// queueLaned sends the calls on semQueue through queue, the rest through
// the embedded Backend.
type queueLaned struct {
	lease.Backend
	queue lease.Backend
}

func (q queueLaned) on(key string) lease.Backend {
	if key == semQueue {
		return q.queue
	}
	return q.Backend
}

func (q queueLaned) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	return q.on(key).Acquire(ctx, key, owner, ttl)
}

func (q queueLaned) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	return q.on(l.Key).Renew(ctx, l, ttl)
}

func (q queueLaned) Release(ctx context.Context, l lease.Lease) error {
	return q.on(l.Key).Release(ctx, l)
}

func (q queueLaned) Get(ctx context.Context, key string) (lease.Lease, error) {
	return q.on(key).Get(ctx, key)
}

// queueLanedWatch is queueLaned with the worker lane's watch.
type queueLanedWatch struct {
	queueLaned
	lease.Watcher
}

// countingAcquire is the CountingSemaphore negative control: it admits c
// when a list of the slots finds fewer than N held, by acquiring a key of
// c's own. Between the list and the acquisition, others may be admitted by
// the same count.
func (s *Sim) countingAcquire(c *simClient) (*lease.Hold, error) {
	held := 0
	for _, err := range c.client.All(c.ctx, slotsPrefix) {
		if err != nil {
			return nil, err
		}
		held++
	}
	if held >= s.cfg.Slots {
		return nil, fmt.Errorf("%w: sim: %d of %d slots held", lease.ErrHeld, held, s.cfg.Slots)
	}
	c.seats++
	return c.client.TryAcquire(c.ctx, fmt.Sprintf("%s%s-%d", slotsPrefix, c.name(), c.seats), s.cfg.TTL)
}

// countSlotHoldersLocked checks AtMostN right after a grant under the
// slots: the count rises only at grants, so checking there checks every
// instant. A generation counts from its grant until its expiry (as granted
// or last renewed) or its release, whichever came first.
func (s *Sim) countSlotHoldersLocked() {
	now := time.Now()
	n := 0
	var keys []string
	for g, st := range s.grants {
		if strings.HasPrefix(g.key, slotsPrefix) && !st.released && now.Before(st.expires) {
			n++
			keys = append(keys, fmt.Sprintf("%s token %d", g.key, g.token))
		}
	}
	if n == s.cfg.Slots {
		s.stats.Full++
	}
	if n > s.cfg.Slots {
		slices.Sort(keys)
		s.violateLocked(AtMostN, "%d slot leases unexpired at once on the backend's clock, more than %d: %s",
			n, s.cfg.Slots, strings.Join(keys, ", "))
	}
}
