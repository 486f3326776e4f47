package boltstore

import (
	"context"
	"slices"
	"time"

	"github.com/leasehq/lease"
)

// queue is the FIFO of in-process waiters for one key, with the timer that
// hands the key over when the holder's lease expires. Queues live only in
// memory: a restart drops them, and their callers get an error from Close,
// or at once from a failure that stops the store.
type queue struct {
	ws       []*waiter
	timer    lease.Timer // pending expiry check, nil if none
	timerAt  time.Time
	timerGen uint64 // identifies the arming, so a stale firing is ignored
}

type waiter struct {
	owner string
	ttl   time.Duration
	ch    chan result // buffered: the commit loop never blocks on a waiter
}

type result struct {
	l   lease.Lease
	err error
}

func (q *queue) stop() {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
}

// The methods below are called with s.wmu held.

func (s *Store) queueOf(key string) []*waiter {
	if q := s.waiters[key]; q != nil {
		return q.ws
	}
	return nil
}

func (s *Store) enqueue(key string, w *waiter, expires, now time.Time) {
	q := s.waiters[key]
	if q == nil {
		q = &queue{}
		s.waiters[key] = q
	}
	q.ws = append(q.ws, w)
	s.rearm(key, expires, now)
}

// popWaiter removes and returns key's first waiter, or nil.
func (s *Store) popWaiter(key string) *waiter {
	q := s.waiters[key]
	if q == nil || len(q.ws) == 0 {
		return nil
	}
	w := q.ws[0]
	q.ws[0] = nil
	q.ws = q.ws[1:]
	if len(q.ws) == 0 {
		q.stop()
		delete(s.waiters, key)
	}
	return w
}

// dequeue removes w from key's queue and reports whether it was there.
func (s *Store) dequeue(key string, w *waiter) bool {
	q := s.waiters[key]
	if q == nil {
		return false
	}
	i := slices.Index(q.ws, w)
	if i < 0 {
		return false
	}
	q.ws = slices.Delete(q.ws, i, i+1)
	if len(q.ws) == 0 {
		q.stop()
		delete(s.waiters, key)
	}
	return true
}

// failWaiters answers every waiter with err and forgets them, stopping
// their timers.
func (s *Store) failWaiters(err error) {
	for key, q := range s.waiters {
		q.stop()
		for _, w := range q.ws {
			w.ch <- result{err: err}
		}
		delete(s.waiters, key)
	}
}

// rearm makes sure that, while anyone waits for key, an expiry check is
// pending no later than expires, so waiters are served at expiry without
// polling.
func (s *Store) rearm(key string, expires, now time.Time) {
	q := s.waiters[key]
	if q == nil || len(q.ws) == 0 || s.closed {
		return
	}
	if q.timer != nil && !q.timerAt.After(expires) {
		return
	}
	q.stop()
	s.timerGen++
	gen := s.timerGen
	q.timerAt, q.timerGen = expires, gen
	q.timer = s.afterFunc(expires.Sub(now), func() {
		// The commit loop decides; a closed store ends the check.
		_ = s.submit(context.Background(), &op{kind: opExpire, key: key, timer: gen})
	})
}
