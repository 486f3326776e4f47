package leasehttp

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/wait"
)

// Polling bounds for a backend that offers neither lease.WaitAcquirer nor
// lease.Notifier: the head waiter of a key tries again after a backoff that
// doubles from pollMin to pollMax, or at the holder's expiry if sooner, or
// at once when a release of the key passes through this server.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 500 * time.Millisecond
	// notifyMax bounds one WaitChange, in case a notification is lost.
	notifyMax = 5 * time.Second
)

// queues keeps, per key, the requests waiting for it in arrival order, for
// backends that cannot queue waiters themselves. Only the head of a queue
// talks to the backend, so waiting costs one poll (or one notification
// wait) per key, not per waiter, and nobody behind the head can overtake it.
// Requests that try once (wait_ms 0) and other servers do not queue here,
// so FIFO order holds among the waiters of this server.
type queues struct {
	mu sync.Mutex
	m  map[string][]*queued
}

type queued struct {
	turn chan struct{} // closed when this waiter becomes the head
	poke chan struct{} // buffered: a release of the key passed through here
}

func newQueues() *queues { return &queues{m: map[string][]*queued{}} }

func (q *queues) join(key string) *queued {
	w := &queued{turn: make(chan struct{}), poke: make(chan struct{}, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.m[key] = append(q.m[key], w)
	if len(q.m[key]) == 1 {
		close(w.turn)
	}
	return w
}

func (q *queues) leave(key string, w *queued) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.m[key]
	i := slices.Index(ws, w)
	if i < 0 {
		return
	}
	ws = slices.Delete(ws, i, i+1)
	if len(ws) == 0 {
		delete(q.m, key)
		return
	}
	q.m[key] = ws
	if i == 0 {
		close(ws[0].turn)
	}
}

// released tells the head waiter of key that the key may be free.
func (q *queues) released(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.m[key]; len(ws) > 0 {
		select {
		case ws[0].poke <- struct{}{}:
		default:
		}
	}
}

// acquireQueued waits in key's queue until it acquires the key or ctx ends.
// It then returns the last HeldError seen (for the 409 answer), or ctx's
// cause if it saw none.
// Each try is made with a context that ctx's end does not cut short, so a
// try is never abandoned halfway with its outcome unknown; a lease won as
// ctx ended is returned, and the caller decides what to do with it.
func (s *Server) acquireQueued(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	w := s.queues.join(key)
	defer s.queues.leave(key, w)
	var lastHeld error
	select {
	case <-w.turn:
	case <-ctx.Done():
		return lease.Lease{}, context.Cause(ctx)
	}
	loop := wait.Loop{
		Pacer:     wait.NewPacer(pollMin, pollMax, nil),
		NotifyMax: notifyMax,
		NotifyFailed: func(err error) {
			s.log.Warn("leasehttp: backend notifications failed; polling instead", "err", err)
		},
		Wake: w.poke,
	}
	if s.notifier != nil {
		loop.Notify = func(ctx context.Context) error { return s.notifier.WaitChange(ctx, key) }
	}
	for {
		l, err := s.acquireOnce(ctx, key, owner, ttl)
		if err == nil || !errors.Is(err, lease.ErrHeld) {
			return l, err
		}
		lastHeld = err
		if ctx.Err() != nil || loop.Wait(ctx, lease.HolderExpires(err)) != nil {
			return lease.Lease{}, lastHeld
		}
	}
}
