// Package background runs the work a store does after the call that asked
// for it has returned — the release of a lease granted to a caller that
// gave up, the settling of a grant whose answer was lost — and ends it with
// the store.
package background

import (
	"context"
	"sync"
	"time"
)

// Group is a store's background work. Close ends it: it cancels the
// context of the work running, waits for it, and from its start on Go runs
// nothing. (A sync.WaitGroup would forbid a Go, from a call racing Close,
// while Close waits.) The zero Group is not usable; use New.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	idle   sync.Cond // on mu: signalled when n drops to 0
	n      int
	closed bool
}

// New returns a Group that runs work until Close.
func New() *Group {
	g := &Group{}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.idle.L = &g.mu
	return g
}

// Context returns the context of the Group's work, which Close ends.
func (g *Group) Context() context.Context { return g.ctx }

// Go runs f in a goroutine of its own with the Group's context and reports
// whether it did: not once Close has begun.
func (g *Group) Go(f func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	go func() {
		defer func() {
			g.mu.Lock()
			if g.n--; g.n == 0 {
				g.idle.Broadcast()
			}
			g.mu.Unlock()
		}()
		f(g.ctx)
	}()
	return true
}

// Retry runs try in the background until it reports done, until passes
// (try's context ends then too) or the Group closes, pausing between tries
// from 10 ms, doubling up to a second.
func (g *Group) Retry(until time.Time, try func(ctx context.Context) (done bool)) bool {
	return g.Go(func(ctx context.Context) {
		for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
			tctx, cancel := context.WithDeadline(ctx, until)
			done := try(tctx)
			cancel()
			if done || !time.Now().Add(pause).Before(until) {
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	})
}

// Close cancels the context of the work running, waits for it to return,
// and refuses new work. It is idempotent.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.mu.Lock()
	for g.n > 0 {
		g.idle.Wait()
	}
	g.mu.Unlock()
}
