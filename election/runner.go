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
// A slow f delays only later calls of f.
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
// client-go's ReleaseOnCancel). Only for leaders whose side effects are not
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
// that campaigning again cannot mend (bad arguments, lease.ErrConflict).
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
	for {
		t, err := e.Campaign(ctx, key, value)
		switch {
		case ctx.Err() != nil:
			if err == nil { // won as ctx ended
				e.stop(ctx, t, &cfg)
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
		requeue.Pacer.Reset()
		gaveUp, err := e.lead(ctx, t, lead, &cfg)
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return nil
		case !gaveUp && requeue.Wait(ctx, time.Time{}) != nil:
			return nil
		}
	}
}

// lead runs one term: lead under the term's context, until it returns or
// the term or ctx ends. gaveUp says lead returned nil of itself; err is
// lead's error when it returned one of itself.
func (e *Elector) lead(ctx context.Context, t *Term, lead Lead, cfg *runConfig) (gaveUp bool, err error) {
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
		e.stop(ctx, t, cfg)
		return false, nil
	case ended:
		cfg.stopped(t, context.Cause(t.Context()))
		return false, nil
	}
	// lead gave the term up: hand over at once.
	rerr := t.Resign(context.WithoutCancel(ctx))
	cfg.stopped(t, lease.ErrReleased)
	if err != nil {
		return false, err
	}
	if rerr != nil && !errors.Is(rerr, lease.ErrNotHeld) && !errors.Is(rerr, lease.ErrLost) {
		// Not resigned: the term ends at its TTL, and campaigning again
		// now would only queue behind it.
		return false, nil
	}
	return true, nil
}

// stop ends a term because ctx ended: resigned at once unless
// KeepTermOnCancel, then OnStoppedLeading with ctx's cause.
func (e *Elector) stop(ctx context.Context, t *Term, cfg *runConfig) {
	if !cfg.keepOnCancel {
		_ = resignOnEnd(ctx, t)
	}
	cfg.stopped(t, context.Cause(ctx))
}

func (cfg *runConfig) stopped(t *Term, cause error) {
	if cfg.onStoppedLeading != nil {
		cfg.onStoppedLeading(t, cause)
	}
}

// notifyLeaders calls f with each leader Observe reports (which follows
// the watch across its breaks) until ctx ends, or until Observe meets an
// error that observing again cannot mend.
func (e *Elector) notifyLeaders(ctx context.Context, key string, f func(Leader)) {
	for l, err := range e.Observe(ctx, key) {
		if err != nil {
			return
		}
		f(l)
	}
}

// permanent says whether a campaign's error is one that campaigning again
// cannot mend.
func permanent(err error) bool {
	return errors.Is(err, lease.ErrInvalid) || errors.Is(err, lease.ErrConflict)
}
