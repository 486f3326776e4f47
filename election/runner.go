package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/wait"
)

// Lead is the leader's work for one term: it runs while the term lasts,
// under a context that ends when the term is lost or Run's context ends
// (with cause lease.ErrLost or the context's own), and passes t.Token()
// with every write so that a guard refuses the term's late writes. It
// returns when its context ends. Returning nil earlier gives the term up
// (the next candidate leads at once) and Run campaigns again; returning an
// error gives the term up and ends Run with that error.
type Lead func(ctx context.Context, t *Term) error

// RunOption configures Run.
type RunOption func(*runConfig) error

type runConfig struct {
	onNewLeader      func(Leader)
	onStoppedLeading func(t *Term, cause error)
	minBackoff       time.Duration
	maxBackoff       time.Duration
	keepOnCancel     bool
}

// OnNewLeader makes Run call f with each leader of the key as Observe
// reports it (this process's terms too, and a zero Leader while there is
// none), one call at a time, from its own goroutine, until Run returns.
// A slow f delays only later calls of f. If Observe ends with an error
// that observing again cannot mend (a refused credential, a server's
// limit of watchers reached) the calls end there, the last with a zero
// Leader: no leader is known from then on.
func OnNewLeader(f func(Leader)) RunOption {
	return func(c *runConfig) error {
		if f == nil {
			return fmt.Errorf("%w: election: OnNewLeader(nil)", lease.ErrInvalid)
		}
		c.onNewLeader = f
		return nil
	}
}

// OnStoppedLeading makes Run call f after each of its terms ends, once
// Lead has returned (so f never runs while this process still acts as the
// leader), with why it ended: lease.ErrLost, lease.ErrReleased (Lead gave
// it up), or the cause of Run's context.
func OnStoppedLeading(f func(t *Term, cause error)) RunOption {
	return func(c *runConfig) error {
		if f == nil {
			return fmt.Errorf("%w: election: OnStoppedLeading(nil)", lease.ErrInvalid)
		}
		c.onStoppedLeading = f
		return nil
	}
}

// WithRequeueBackoff sets how long Run waits before it campaigns again
// after a term was lost or a campaign failed: a backoff that doubles from
// min to max, and starts again from min after each term, jittered from the
// Elector's Client's source and timed on its clock. The default is 50 ms
// to 5 s. A term Lead gave up campaigns again at once.
func WithRequeueBackoff(min, max time.Duration) RunOption {
	return func(c *runConfig) error {
		if min <= 0 || max < min {
			return fmt.Errorf("%w: election: requeue backoff %v to %v; want 0 < min <= max", lease.ErrInvalid, min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// KeepTermOnCancel makes Run leave a term running when its context ends,
// to expire at its TTL, instead of resigning it at once (the default, as
// client-go's ReleaseOnCancel): it is renewed no more (lease.Hold.Orphan),
// its Context ends with lease.ErrLost at its safe deadline, and the next
// candidate is elected once the backend has expired it. Only for leaders whose side effects are not
// all fenced and that must not overlap a successor even briefly: resigning
// hands over at once, and the successor's token fences the old term's late
// writes either way.
func KeepTermOnCancel() RunOption {
	return func(c *runConfig) error {
		c.keepOnCancel = true
		return nil
	}
}

// Run is the leader loop every service would otherwise write by hand, as
// client-go's leaderelection.RunOrDie and Curator's LeaderSelector with
// auto-requeue: it campaigns for key announcing value, runs lead under the
// term's context while it leads, and when the term ends (lost, or given up
// by lead) it waits for lead to return, calls OnStoppedLeading, and
// campaigns again, after a jittered backoff if the term was lost. When ctx
// ends it stops lead, waits for it, resigns the term at once (unless
// KeepTermOnCancel), and returns nil. It returns lead's error, or an error
// that campaigning again cannot mend: any but one matching
// lease.ErrUnavailable (bad arguments, lease.ErrConflict, a credential the
// server refuses), which it campaigns again after.
//
// A process that restarts with the same value campaigns like anyone else:
// its old term, which it can no longer renew or resign (the lease's ID was
// in the old process's memory), ends at the TTL, and only then may it lead
// again, with a new token. Taking the term back sooner is safe only when
// nothing can still be acting under it, which the backend cannot know from
// a value alone: two processes may share a value by mistake, and a
// process that merely seems dead (paused, cut off) would lead alongside.
// So Run never does it; a term resigned on shutdown (the default) is
// handed over at once, which is what a restart needs.
//
// There is no Proclaim (etcd's change of the leader's value within a
// term): the value is the lease's owner, and no backend operation changes
// a held lease's owner. A leader announces a new value by returning nil
// from lead and campaigning again with it (a new term, with a new token).
func (e *Elector) Run(ctx context.Context, key, value string, lead Lead, opts ...RunOption) error {
	if lead == nil {
		return fmt.Errorf("%w: election: Run with a nil Lead", lease.ErrInvalid)
	}
	cfg := runConfig{minBackoff: 50 * time.Millisecond, maxBackoff: 5 * time.Second}
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: election: nil RunOption", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return err
		}
	}
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	if err := lease.ValidateOwner(value); err != nil {
		return err
	}
	if cfg.onNewLeader != nil {
		octx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.notifyLeaders(octx, key, cfg.onNewLeader)
		}()
		defer func() { stop(); <-done }()
	}
	requeue := e.loop(wait.NewPacer(cfg.minBackoff, cfg.maxBackoff, e.client.Jitter))
	// Made now, off the hand-off's path: Run resigns on shutdown once.
	shutdown := resignContext(ctx)
	for {
		t, err := e.Campaign(ctx, key, value)
		switch {
		case ctx.Err() != nil:
			if err == nil { // won as ctx ended
				e.stop(ctx, t, &cfg, shutdown)
			}
			return nil
		case err != nil && permanent(err):
			return err
		case err != nil:
			if requeue.Wait(ctx, time.Time{}) != nil {
				return nil
			}
			continue
		}
		end, err := e.lead(ctx, t, lead, &cfg)
		if end == endShutdown {
			// Resigning is Run's last act: on an in-process backend the
			// successor runs only once this goroutine is done (see the
			// hand-off's costs below).
			e.stop(ctx, t, &cfg, shutdown)
			return nil
		}
		// After the term rather than before it: not on the path of the
		// next term's start.
		requeue.Pacer.Reset()
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return nil
		case end != endGivenUp && requeue.Wait(ctx, time.Time{}) != nil:
			return nil
		}
	}
}

// The hand-off's costs. A graceful hand-off (Run's ctx ends, the next
// candidate queued) is compared with the same leader loop written by hand
// with Campaign and Resign (tools/linebench BenchmarkCompareRunnerHandoff,
// byHand). On memstore the whole hand-off takes 45-70 µs here, nearly all
// of it goroutine wake-ups and cache misses: after the benchmark's 30 ms
// queue the path's code and data are out of the caches of this shared
// machine, and byHand's leader takes about 11 µs from its wake-up to the
// backend's Release for a few hundred instructions. So what Run adds costs
// by the cache lines it touches, not by its instructions. And the successor,
// woken by a Release in this process, waits on this goroutine's processor
// until this goroutine blocks or ends: what Run does after the Release is
// on the path too (on a network backend it overlaps the round trip).
//
// Measured on 2026-12-06 (issue 29) with the hand-off cut in five at the
// leader's wake-up, the backend's Release (entry and return), the
// successor's AcquireWait returning and its Lead starting: medians of 150
// rounds of each, runner and byHand interleaved with a second copy of each
// (the copies agreed within 0.2 µs per segment), on a 2-core KVM guest
// shared with other builds. Before this work Run took 1.8 µs more than
// byHand from the wake-up to the Release and 1.1 µs more from the Release
// to the successor's return from AcquireWait; the other segments were
// equal. Levers, with what each saved:
//
//   - The shutdown's resignation context (a lazyTimeout and a
//     WithoutCancel, two objects) made at the shutdown: now made when Run
//     starts (resignContext), the wake-up-to-Release gap went to 0-1 µs
//     (it moves by that much between builds of the same code). Kept.
//     Made on the path as one object (the lazyTimeout doing
//     WithoutCancel's work) it still cost 0.5 µs there and 0.3 µs more
//     after: dropped.
//   - context.Cause(ctx) for an OnStoppedLeading nobody set: skipped.
//   - The resignation inside lead, its return, deferred calls and Run's
//     checks after it: the resignation is now Run's last act (lead
//     returns endShutdown), the Release-to-successor gap from 1.6 µs to
//     0.9 µs. Kept.
//   - A third defer in Run (the resignation context's stop) made all of
//     Run's defers stack-allocated (defers × returns > 15 is not
//     open-coded): 1 µs more after the Release. Dropped: stop is called
//     right after Resign.
//   - The resignation context's stop after Resign (a cold line and a
//     lock): about 0.6 µs, by leaving it out (wrongly: the timeout a
//     backend's asking made must be stopped). Kept, as is.
//   - That context inside runConfig, beside keepOnCancel, padded to 128
//     bytes so that both share a cache line: no gain (0.9 µs and 0.6 µs
//     over byHand). Dropped.
//   - The stack grown by 16 KB before campaigning, in case a stack growth
//     fell on the path: the gap stayed as it was (and both got slower).
//     Not a cause.
//   - The successor's side, from its Campaign's return to its Lead: 0.2 µs
//     over byHand's, with requeue's Pacer reset moved from before the term
//     to after it (not measured apart). Its allocations are byHand's plus
//     the closure that carries the term's loss to Lead's context.
//
// What is left, 0-1 µs before the Release and 0.9 µs after, is Run's own
// code after Lead returns and the context's stop. The memstore rows of
// the benchmark, interleaved with Run before this work and a second byHand
// row, 1000 rounds, twice: byHand 54.5 and 54.5 µs at the median, then
// 57.8 and 56.7; Run 56.1 (1.03×) and 59.7 (1.04× the two rows' mean);
// Run before 57.5 (1.055×) and 60.5 (1.057×). At the 99th percentile the
// two byHand rows differed by up to 7% and Run before was at 0.89-0.98×,
// Run now at 1.04-1.09× (against the first byHand row): noise at that
// resolution, not Run.

// termEnd is how a term of Run's ended.
type termEnd int

const (
	endLost     termEnd = iota // lost, or given up but not resigned: campaign again after the backoff
	endGivenUp                 // lead returned nil and the term was resigned: campaign again at once
	endShutdown                // ctx ended: lead has returned, the term is still to be stopped (Elector.stop)
)

// lead runs one term: lead under the term's context, until it returns or
// the term or ctx ends. When ctx ended first it leaves the term to the
// caller to stop; otherwise the term is over when lead returns. err is
// lead's error when it returned one of itself.
func (e *Elector) lead(ctx context.Context, t *Term, lead Lead, cfg *runConfig) (end termEnd, err error) {
	// A child of ctx, so that a shutdown reaches lead in the canceller's
	// own goroutine (the hand-off's path); the term's loss, rarer, through
	// AfterFunc.
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(t.Context(), func() { cancel(context.Cause(t.Context())) })
	defer stop()
	err = lead(tctx, t)
	ended := tctx.Err() != nil // the term or ctx ended first: lead's error is its answer to that
	// Before resigning: Resign ends the term's context, which would start
	// the AfterFunc in a goroutine of its own on the hand-off's path.
	stop()
	cancel(nil)
	switch {
	case ctx.Err() != nil:
		return endShutdown, nil
	case ended:
		cfg.stopped(t, context.Cause(t.Context()))
		return endLost, nil
	}
	// lead gave the term up: hand over at once, within resignTimeout (as
	// at a shutdown), so that a backend that does not answer cannot hold
	// Run, and the shutdown that may come meanwhile, for longer.
	rctx := resignContext(ctx)
	rerr := t.Resign(rctx)
	rctx.stop()
	cfg.stopped(t, lease.ErrReleased)
	if err != nil {
		return endLost, err
	}
	if rerr != nil && !errors.Is(rerr, lease.ErrNotHeld) && !errors.Is(rerr, lease.ErrLost) {
		// Not resigned: the term ends at its TTL, and campaigning again
		// now would only queue behind it.
		return endLost, nil
	}
	return endGivenUp, nil
}

// stop ends a term because ctx ended: resigned at once under rctx (Run's
// resignContext, used once), or with KeepTermOnCancel left unrenewed to
// expire at its TTL; then OnStoppedLeading with ctx's cause.
func (e *Elector) stop(ctx context.Context, t *Term, cfg *runConfig, rctx *lazyTimeout) {
	if cfg.keepOnCancel {
		t.Orphan() // renewed no more: it ends at its TTL
	} else {
		_ = t.Resign(rctx)
		rctx.stop()
	}
	if cfg.onStoppedLeading != nil { // not cfg.stopped: no context.Cause to find for nobody
		cfg.onStoppedLeading(t, context.Cause(ctx))
	}
}

func (cfg *runConfig) stopped(t *Term, cause error) {
	if cfg.onStoppedLeading != nil {
		cfg.onStoppedLeading(t, cause)
	}
}

// notifyLeaders calls f with each leader Observe reports (which follows
// the watch across its breaks) until ctx ends, or until Observe meets an
// error that observing again cannot mend: then, if f was last told of a
// leader, it is told "no leader known" (a zero Leader) once more, so that
// it does not go on believing in that leader past its term.
func (e *Elector) notifyLeaders(ctx context.Context, key string, f func(Leader)) {
	var last Leader
	for l, err := range e.Observe(ctx, key) {
		if err != nil {
			if last.Token != 0 {
				f(Leader{Key: key})
			}
			return
		}
		f(l)
		last = l
	}
}

// permanent says whether a campaign's error is one that campaigning again
// cannot mend: any but the backend's being unavailable (lease.ErrInvalid,
// lease.ErrConflict, a refused credential), as lease.Follow judges a
// watch's break.
func permanent(err error) bool {
	return !errors.Is(err, lease.ErrUnavailable)
}
