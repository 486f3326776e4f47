package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehq/lease/internal/dueheap"
)

// Hold is a lease the Client holds and renews in the background, at about a
// third of its TTL with jitter (or a little earlier, together with the
// Client's other holds that fall due close by: one batch through the
// backend's RenewBatch where it has one; or later, in its turn, while the
// Client has as many batches unanswered as it allows), retrying failed
// renewals. Its Context is cancelled, with cause matching ErrLost, as soon
// as the client can no longer be sure it holds the lease: when the backend
// says it is gone, or when the safe deadline — send time of the last
// successful acquire or of the request (or batch) that last renewed it +
// TTL − drift margin (I5) — passes without a successful renewal. A failed renewal of another hold in
// the same batch does not touch it. After Release the cause is ErrReleased.
// A Hold has no goroutine of its own: the Client's scheduler renews it.
//
// Pass Token with every write to the protected resource, and stop working
// when Done is closed.
type Hold struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelCauseFunc
	key    string        // fixed for the Hold's life, read without the lock
	token  Token         // likewise: renewal never changes it (I2)
	ttl    time.Duration // the TTL asked for; every renewal asks for it again

	mu sync.Mutex
	// ended is set as ctx is cancelled (just before: see finish), so that
	// the renewal path reads it beside mu instead of calling ctx.Err on a
	// context allocated elsewhere, a cache miss a renewal on a Client of
	// many holds.
	ended    atomic.Bool
	lease    Lease
	deadline time.Time // on the client's clock
	released bool
	orphaned atomic.Bool // Orphan: never renewed again; set under mu, read also under the scheduler's lock

	// The renewal scheduler's, under its lock: the Hold's window for its
	// next renewal, from early to next.Due, and its place in the queue (not
	// queued while a renewal is in flight, or once lost or released); and
	// its deadline (dl.Due, a copy of deadline) in the queue of deadlines
	// whose one timer ends the holds that reach theirs.
	next  dueheap.Entry
	early time.Time
	dl    dueheap.Entry
}

// hold starts renewing l, acquired by a request sent at sent, for ttl.
//
// If the safe deadline has already passed — the backend's answer came too
// late for the lease to be vouched for — hold releases the lease and
// returns an error instead of a Hold lost from birth: the caller learns
// it has nothing before it starts any work, and the key is free for the
// next contender at once rather than at expiry.
func (c *Client) hold(ctx context.Context, l Lease, sent time.Time, ttl time.Duration) (*Hold, error) {
	hctx, cancel := context.WithCancelCause(context.Background())
	h := &Hold{c: c, ctx: hctx, cancel: cancel, key: l.Key, token: l.Token, ttl: ttl, lease: l}
	h.mu.Lock()
	h.setDeadlineLocked(sent, c.clock.Now(), nil)
	if !h.ended.Load() {
		c.sched.schedule(h, sent, h.grantedTTLLocked()/3, c.rand(), nil)
	}
	h.mu.Unlock()
	if h.ended.Load() {
		c.giveBack(ctx, l, ttl)
		return nil, fmt.Errorf("%w: lease: %q was granted (token %d), but the answer came %v after the request, past the safe deadline of a %v lease; released it",
			ErrUnavailable, l.Key, l.Token, c.clock.Now().Sub(sent), ttl)
	}
	return h, nil
}

// Token returns the lease's fencing token. It never changes (I2).
func (h *Hold) Token() Token { return h.token }

// Key returns the key the lease is on.
func (h *Hold) Key() string { return h.key }

// Lease returns the lease as the backend last granted or renewed it.
func (h *Hold) Lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// Deadline returns the client's safe deadline on its own clock: the latest
// instant it still considers the lease held.
func (h *Hold) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// Context returns a context that is cancelled when the lease is lost or
// released; context.Cause tells which (ErrLost or ErrReleased).
func (h *Hold) Context() context.Context { return h.ctx }

// Done is closed when the lease is lost or released.
func (h *Hold) Done() <-chan struct{} { return h.ctx.Done() }

// Err returns nil while the lease is held, and afterwards an error matching
// ErrLost or ErrReleased. It judges the safe deadline against the client's
// clock itself, so it reports the loss as soon as the deadline has passed,
// even if the deadline timer has not run yet (after a pause of the process,
// its goroutine and the caller's race to run); it then cancels the context.
func (h *Hold) Err() error {
	if h.ctx.Err() == nil {
		h.mu.Lock()
		if h.ctx.Err() == nil && !h.c.clock.Now().Before(h.deadline) {
			h.loseLocked()
		}
		h.mu.Unlock()
		if h.ctx.Err() == nil {
			return nil
		}
	}
	return context.Cause(h.ctx)
}

// Release stops renewal, cancels the Hold's context with cause ErrReleased
// — before the backend is told, so that work under the lease stops first — and
// releases the lease on the backend. If the lease had already been lost it
// returns that loss (matching ErrLost). Calling it again returns nil.
func (h *Hold) Release(ctx context.Context) error { return h.end(ctx, ErrReleased) }

// Orphan stops renewing the lease without releasing it, as etcd's
// concurrency.Session.Orphan does: the lease expires on the backend at its
// TTL, as if this process had died, and nobody else gets the key before
// then. The Hold goes on answering for its own deadline: its Context ends
// with cause ErrLost at the safe deadline of the last renewal (a renewal in
// flight as Orphan is called still counts), and Release still frees the
// lease at once before then. For a leader that must not overlap its
// successor even briefly (election.KeepTermOnCancel), or a lease handed to
// a process that will go on with it by other means.
func (h *Hold) Orphan() {
	h.mu.Lock()
	h.orphaned.Store(true)
	h.mu.Unlock()
	h.c.sched.dequeue(h)
}

// end is Release with why as the context's cause (ErrReleased, or a
// Session's loss for the holds that die with it). It returns the cause
// the context had first, if not why, or the backend's error.
func (h *Hold) end(ctx context.Context, why error) error {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return nil
	}
	h.released = true
	h.c.sched.unwatch(h)
	// Cancel under the lock, so that a renewal finishing now cannot move the
	// deadline or queue the hold again; and judge by the cause whether the lease
	// was lost first (the renewal loop may have said so a moment ago).
	h.finish(why)
	cause := context.Cause(h.ctx)
	lease := h.lease
	h.mu.Unlock()
	h.c.sched.remove(h)

	// A renewal in flight is cancelled (alone) or its answer ignored (in a
	// batch); the backend refuses it if it arrives after the release.
	err := h.c.backend.Release(ctx, lease)
	if cause != why {
		return cause
	}
	return err
}

// grantedTTLLocked is the TTL the lease is judged by: the TTL the backend
// says it granted when that is shorter than the one asked for (a backend or
// server that caps TTLs), else the one asked for.
func (h *Hold) grantedTTLLocked() time.Duration {
	if g := h.lease.TTL; g > 0 && g < h.ttl {
		return g
	}
	return h.ttl
}

// setDeadlineLocked moves the safe deadline to sent + TTL − margin, and
// watches it, or with mark marks it to be watched (requeueLocked). A
// deadline already past at now, when the reply came back, ends the lease
// at once rather than through a timer, so nothing can observe it as held.
func (h *Hold) setDeadlineLocked(sent, now time.Time, mark *uint8) {
	ttl := h.grantedTTLLocked()
	h.deadline = sent.Add(ttl - h.c.margin(ttl))
	if h.deadline.After(now) {
		if mark != nil {
			*mark |= requeueDeadline
			return
		}
		h.c.sched.watch(h, h.deadline)
		return
	}
	h.loseLocked()
}

func (h *Hold) loseLocked() {
	h.lose(fmt.Errorf("%w: no successful renewal of %q (token %d) before the safe deadline",
		ErrLost, h.key, h.token))
}

// lose ends the Hold with cause why (matching ErrLost) and takes it out of
// the scheduler's queues.
func (h *Hold) lose(why error) {
	h.finish(why)
	h.c.sched.remove(h)
}

// finish cancels h's context with cause why (the first cause stands) and
// sets ended, before it, so that whoever sees the context cancelled sees
// ended too.
func (h *Hold) finish(why error) {
	h.ended.Store(true)
	h.cancel(why)
}

// checkDeadline runs when the scheduler's deadline timer finds h's deadline
// reached on the client's clock: h is lost, unless a renewal has moved the
// deadline in the meantime (and queued it again) or it has ended.
func (h *Hold) checkDeadline(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended.Load() && !now.Before(h.deadline) {
		h.loseLocked()
	}
}

// errOtherGeneration marks a renewal answered with another lease than the
// one renewed.
var errOtherGeneration = fmt.Errorf("%w: renewal answered with another lease", ErrUnavailable)

// sameGeneration checks that renewed, a backend's answer to renewing cur,
// is still cur's generation: a lease keeps its key, token and ID for life
// (I2). A backend that answers otherwise is broken or confused (a proxy
// mixing up answers, say), and cur can no longer be vouched for: the token
// writes are fenced with would not be the one the backend holds.
func sameGeneration(cur, renewed Lease) error {
	if renewed.Key == cur.Key && renewed.Token == cur.Token && renewed.ID == cur.ID {
		return nil
	}
	id := "its ID"
	if renewed.ID != cur.ID {
		id = "another ID" // never print an ID: it is the holder's secret
	}
	return fmt.Errorf("%w: renewing %q token %d, the backend answered key %q token %d with %s (a lease keeps its key, token and ID: I2)",
		errOtherGeneration, cur.Key, cur.Token, renewed.Key, renewed.Token, id)
}

// giveBack releases l, acquired for ttl and not to be used, on ctx's
// values but not its cancellation (ctx may be what ended the wait), for at
// most ttl: by then the lease has expired anyway.
func (c *Client) giveBack(ctx context.Context, l Lease, ttl time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	_ = c.backend.Release(rctx, l)
}
