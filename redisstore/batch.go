package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Concurrent script calls of one Store share round trips. Each call to
// Redis costs the server a read and a write system call on top of the
// script, and the client as much again; on a small machine those, not the
// scripts, bound the throughput of many clients, and with appendfsync always
// each event-loop turn of the server costs an fsync. So once maxUnits calls
// or pipelines are on the wire, later calls join a queue, and the next unit
// to come back sends the whole queue as one pipeline (one write and one read
// on each side, one fsync for all of it), like a group commit. A lone
// caller never waits: with nothing in flight it sends its own call at once,
// on its own context, exactly as without the queue; two callers both go
// direct. Two units keep the server busy with one while the other's replies
// travel back and its callers prepare their next calls.
//
// After handing out a pipeline's replies the flusher yields the processor a
// few times (no timer) while fewer calls have queued than it just answered:
// the callers it woke usually call again at once, and waiting for them
// keeps them together in the next pipeline instead of scattering them over
// many small ones.
//
// Every call keeps its own meaning: a pipeline is not a transaction, each
// script in it is atomic by itself, and go-redis retries a pipeline after a
// dropped connection as it retries a single call (see Acquire and Release
// for why a retry is safe).
const (
	// maxUnits is how many direct calls and pipelines may be on the wire.
	maxUnits = 2
	// maxBatch bounds one pipeline, so a long queue goes out in chunks.
	maxBatch = 128
	// maxYields bounds the flusher's yields between pipelines.
	maxYields = 4
)

// call is one script call through the batcher.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any

	// Set by the goroutine that runs the call, then ready is closed.
	cmd   *redis.Cmd
	ready chan struct{}

	state callState // guarded by batcher.mu
}

type callState int

const (
	queued callState = iota
	sent             // taken into a pipeline
)

type batcher struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	units    int // direct calls and flushers on the wire
	queue    []*call
	flushers int       // flush goroutines running
	idle     sync.Cond // on mu: signalled when flushers drops to 0
}

// run runs script on keys and args, alone or in a pipeline with other
// calls, and returns its reply.
func (b *batcher) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return b.call(ctx, ctx, false, script, keys, args...)
}

// errNotSent is the error of a call whose context ended before it was
// sent: it had no effect.
var errNotSent = errors.New("redisstore: not sent")

// call is run with the contexts apart: ctx bounds the wait in the queue
// (a call still queued when it ends leaves, never sent, with an error
// matching errNotSent and ctx's), wire is the context of a call sent
// alone, and awaitReply says a call that was sent, alone or in a pipeline,
// is waited for until its reply, whatever ctx (acquireOnce: a grant must
// be heard).
func (b *batcher) call(ctx, wire context.Context, awaitReply bool, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	b.mu.Lock()
	if b.units < maxUnits {
		b.units++
		b.mu.Unlock()
		cmd := script.Run(wire, b.rdb, keys, args...)
		b.done()
		return cmd
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, ready: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case <-c.ready:
		return c.cmd
	case <-ctx.Done():
		select {
		case <-c.ready: // both at once: the reply is worth more
			return c.cmd
		default:
		}
	}
	// Still queued: it is never sent. Already sent: it may take effect
	// although the caller has gone, as a single call cancelled mid-flight
	// may, and its reply is dropped.
	b.mu.Lock()
	wasQueued := c.state == queued
	if wasQueued {
		for i, q := range b.queue {
			if q == c {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	b.mu.Unlock()
	if !wasQueued && awaitReply {
		<-c.ready
		return c.cmd
	}
	cmd := redis.NewCmd(ctx)
	if wasQueued {
		cmd.SetErr(fmt.Errorf("%w: %w", errNotSent, ctx.Err()))
	} else {
		cmd.SetErr(ctx.Err())
	}
	return cmd
}

// done ends a direct call: the queue, if any, goes out in the unit just
// freed.
func (b *batcher) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if batch := b.takeLocked(); batch != nil {
		b.flushers++
		go b.flush(batch)
		return
	}
	b.units--
}

// takeLocked removes up to maxBatch calls from the queue.
func (b *batcher) takeLocked() []*call {
	n := min(len(b.queue), maxBatch)
	if n == 0 {
		return nil
	}
	batch := make([]*call, n)
	copy(batch, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	if len(b.queue) == 0 {
		b.queue = nil // let a burst's backing array go
	}
	for _, c := range batch {
		c.state = sent
	}
	return batch
}

// flush sends batch as one pipeline, then the queue that formed meanwhile,
// until the queue is empty.
func (b *batcher) flush(batch []*call) {
	for {
		b.exec(batch)
		for range maxYields {
			b.mu.Lock()
			n := len(b.queue)
			b.mu.Unlock()
			if n >= len(batch) {
				break
			}
			runtime.Gosched()
		}
		b.mu.Lock()
		batch = b.takeLocked()
		if batch == nil {
			b.units--
			if b.flushers--; b.flushers == 0 {
				b.idle.Broadcast()
			}
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
}

// exec runs the calls of batch in one pipeline and hands each its reply.
// The pipeline's context is no caller's, so that one caller giving up does
// not fail the others' calls; go-redis' read and write timeouts bound it.
func (b *batcher) exec(batch []*call) {
	ctx := context.Background()
	live := batch[:0:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd = redis.NewCmd(c.ctx)
			c.cmd.SetErr(fmt.Errorf("%w: %w", errNotSent, err))
			close(c.ready)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range live {
			c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	for _, c := range live {
		// A pipelined EVALSHA cannot fall back to EVAL by itself: after a
		// restart or SCRIPT FLUSH, run the call again alone, which loads it.
		// The script did not run, so running it again is its first run.
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.cmd = c.script.Run(ctx, b.rdb, c.keys, c.args...)
		}
		close(c.ready)
	}
}

// wait returns when no flusher is running. Calls finishing meanwhile may
// start flushers (a sync.WaitGroup forbids such an Add during its Wait):
// wait returns at a moment when none runs.
func (b *batcher) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.flushers > 0 {
		b.idle.Wait()
	}
}

func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{rdb: rdb}
	b.idle.L = &b.mu
	return b
}
