package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
)

// Group commit on the client side. Acquire, Renew and Release each go
// through a batcher of their own. An operation that arrives when nothing
// is queued and no batch is in flight is sent at once, alone, by the
// goroutine that asked — up to loneSlots of them side by side: no timer, no
// hand-off, so a lone client pays nothing for batching (bbolt's Batch waits
// 10 ms for company: ANCHORS.md), and two clients commit side by side, as
// PostgreSQL flushes the WAL of concurrent commits together. Otherwise the
// operation queues, and when a statement ends the queue leaves as one
// statement over arrays (unnest) holding up to maxBatch operations on
// distinct keys, in arrival order. One batch is in flight at a time, so
// under load a batch holds everything that arrived while the previous one
// waited for its WAL flush: N acquisitions cost one round trip, one
// transaction and one flush instead of N of each. (Two batches side by side
// halve the batches and, on the machine of ANCHORS.md, need 1.5–2× the WAL
// flushes per acquisition.)
//
// Rules:
//   - operations on one key never share a statement: a later one on a key
//     already in the batch stays queued for the next (an upsert cannot
//     touch a row twice, and each operation must see the others' effects
//     as if it ran alone);
//   - a batch's statement has the body of the lone operation's (queries.go),
//     so a batch answers each operation exactly as it would have been
//     answered alone, in some order;
//   - a statement that fails fails every operation in it with its error;
//     whether it took effect is unknown, as for a lone statement;
//   - an operation whose context ends while queued leaves the queue and was
//     never sent; one whose context ends while its statement is in flight
//     returns at once, its outcome unknown. The statement runs until every
//     operation in it has given up (then it is cancelled) or it ends;
//     except an acquire's (a detached batcher), which no caller cancels: it
//     runs until it ends (or its bound, or the Store's Close), and a lease
//     it grants to a caller that left is released (Store.orphaned);
//   - the queue is never left waiting: it is not empty only while a batch
//     or loneSlots statements are in flight, and each statement's end
//     looks at it.

// loneSlots is how many operations of one kind (acquire, renew, release) a
// Store sends alone side by side while no batch is in flight.
const loneSlots = 2

// maxBatch bounds the operations in one statement: 64 keys of 512 bytes
// make 32 KiB of parameters, and one transaction's row locks stay few.
const maxBatch = 64

// batcher sends the operations of one kind, alone or in batches.
type batcher[Req, Res any] struct {
	slots, max int // loneSlots, maxBatch
	// detached, if set, makes the statements outlive their callers: each
	// runs on the context detached returns (not the callers'), from a
	// goroutine of its own, and a caller whose context ends while its
	// statement is in flight returns at once, leaving the answer to
	// orphaned. Acquire's batcher is detached: a statement that grants a
	// lease must be heard out, or the lease is held by nobody until its
	// TTL.
	detached func(calls []*call[Req, Res]) (context.Context, context.CancelFunc)
	// orphaned is given each call of a detached batcher whose caller left
	// before its statement answered, with what the statement answered
	// (res and err), once it has. It must not block.
	orphaned func(c *call[Req, Res])
	// exec sends one statement for calls (distinct keys, at least one) and
	// sets each call's res and err; an error it returns fails them all.
	exec func(ctx context.Context, calls []*call[Req, Res]) error
	// sent, if set (by tests), is called with the keys of every statement
	// before it is sent.
	sent atomic.Pointer[func(keys []string)]

	mu       sync.Mutex
	inflight int               // statements in flight, lone ones and the batch
	batching bool              // a batch from the queue is in flight
	queue    []*call[Req, Res] // waiting for a statement, in arrival order
	inBatch  map[string]bool   // scratch for take, under mu
}

// call is one operation in a batcher.
type call[Req, Res any] struct {
	ctx  context.Context
	key  string
	req  Req
	res  Res
	err  error
	done chan struct{} // closed once res and err are set; nil when sent alone from the caller's goroutine
	sent bool          // under batcher.mu: taken into a statement
	left bool          // under batcher.mu: its caller gave up once it was sent (detached batchers)
}

func newBatcher[Req, Res any](slots, max int, exec func(context.Context, []*call[Req, Res]) error) *batcher[Req, Res] {
	return &batcher[Req, Res]{slots: slots, max: max, exec: exec, inBatch: make(map[string]bool, max)}
}

// endedError is the error of an operation whose context ended before its
// answer came. It unwraps to the context's error.
type endedError struct {
	sent  bool // its statement was sent: the outcome is unknown
	cause error
}

func (e *endedError) Error() string {
	if e.sent {
		return "gave up waiting for the answer, outcome unknown: " + e.cause.Error()
	}
	return "gave up before it was sent, nothing done: " + e.cause.Error()
}

func (e *endedError) Unwrap() error { return e.cause }

// do runs one operation on key and returns what exec set for it, the
// error of its statement, or an *endedError.
func (b *batcher[Req, Res]) do(ctx context.Context, key string, req Req) (Res, error) {
	c := &call[Req, Res]{ctx: ctx, key: key, req: req}
	b.mu.Lock()
	if len(b.queue) == 0 && !b.batching && b.inflight < b.slots {
		// Send alone, now: from this goroutine, or from one of its own
		// that outlives this call if the batcher is detached and the
		// caller could leave (a ctx that cannot end cannot: its statement
		// needs no goroutine to wait for it).
		b.inflight++
		c.sent = true
		if b.detached == nil || ctx.Done() == nil {
			b.mu.Unlock()
			b.send([]*call[Req, Res]{c})
			if batch := b.finish(false); batch != nil {
				go b.run(batch)
			}
			return c.res, c.err
		}
		c.done = make(chan struct{})
		b.mu.Unlock()
		go func() {
			b.send([]*call[Req, Res]{c})
			b.run(b.finish(false))
		}()
	} else {
		c.done = make(chan struct{})
		b.queue = append(b.queue, c)
		b.mu.Unlock()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	sent := c.sent
	if !sent {
		for i, q := range b.queue {
			if q == c {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	if sent {
		// send closes done under mu: either the answer is here, or send
		// will find left set and hand it to orphaned.
		select {
		case <-c.done: // the answer came after all
			b.mu.Unlock()
			return c.res, c.err
		default:
		}
		c.left = b.orphaned != nil
	}
	b.mu.Unlock()
	var zero Res
	return zero, &endedError{sent: sent, cause: ctx.Err()}
}

// send runs one statement for calls and sets their results.
func (b *batcher[Req, Res]) send(calls []*call[Req, Res]) {
	if hook := b.sent.Load(); hook != nil {
		keys := make([]string, len(calls))
		for i, c := range calls {
			keys[i] = c.key
		}
		(*hook)(keys)
	}
	var (
		ctx  context.Context
		stop func()
	)
	if b.detached != nil {
		ctx, stop = b.detached(calls)
	} else {
		ctx, stop = batchContext(calls)
	}
	err := b.exec(ctx, calls)
	stop()
	var orphans []*call[Req, Res]
	b.mu.Lock()
	for _, c := range calls {
		if err != nil {
			c.err = err
		}
		if c.left {
			orphans = append(orphans, c)
		}
		if c.done != nil {
			close(c.done)
		}
	}
	b.mu.Unlock()
	for _, c := range orphans {
		b.orphaned(c)
	}
}

// finish ends a statement (a batch from the queue if wasBatch) and returns
// the next batch, which the caller must run, if one is due to leave.
func (b *batcher[Req, Res]) finish(wasBatch bool) []*call[Req, Res] {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight--
	if wasBatch {
		b.batching = false
	}
	if len(b.queue) == 0 || b.batching || b.inflight >= b.slots {
		return nil
	}
	b.inflight++
	b.batching = true
	return b.take()
}

// run sends batch (none if nil), then the batches that leave when it ends.
func (b *batcher[Req, Res]) run(batch []*call[Req, Res]) {
	for batch != nil {
		b.send(batch)
		batch = b.finish(true)
	}
}

// take removes the next batch from the queue: up to max operations on
// distinct keys, in arrival order; operations on a key already taken stay.
// Called with mu held and the queue not empty.
func (b *batcher[Req, Res]) take() []*call[Req, Res] {
	batch := make([]*call[Req, Res], 0, min(len(b.queue), b.max))
	rest := b.queue[:0]
	for _, c := range b.queue {
		if len(batch) < b.max && !b.inBatch[c.key] {
			b.inBatch[c.key] = true
			c.sent = true
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	clear(b.inBatch)
	clear(b.queue[len(rest):]) // drop references held past the new end
	b.queue = rest
	return batch
}

// state reports statements in flight and operations queued, for tests.
func (b *batcher[Req, Res]) state() (inflight, queued int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight, len(b.queue)
}

// batchContext is the context of one statement: a lone operation's own, or
// for a batch one that ends when every operation's context has ended, so
// that one caller giving up does not cancel the others' statement.
func batchContext[Req, Res any](calls []*call[Req, Res]) (context.Context, func()) {
	if len(calls) == 1 {
		return calls[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var left atomic.Int32
	left.Store(int32(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
