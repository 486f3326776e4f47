// Package wait is how everything in this module waits for a held key: the
// root lease.Client polling a backend, leasehttp's per-key queue on the
// server, and leasehttp.Client pacing a server that answers at once. One
// Pacer decides how long to wait after a try found the key held, and one
// Loop waits that long, woken early by the backend's notifications (falling
// back to polling when they fail) or by a poke.
//
// It imports only the standard library and knows nothing of lease's types,
// so that the root package can use it: callers pass the holder's expiry as a
// time and their clock as functions.
package wait

import (
	"context"
	"time"
)

// Pacer paces the tries of one waiter: a backoff that doubles from Min to
// Max, jittered when asked, shortened to the holder's expiry when that is
// known. The expiry is on the backend's clock and the waiter compares it
// with its own, so it is a hint, never a promise: when the two clocks
// disagree so much that the expiry has already passed on the waiter's clock
// while the key is still held, the backoff alone paces the tries, or the
// waiter would try every Min for as long as the skew lasts.
//
// A Pacer is not safe for concurrent use; each waiter has its own.
type Pacer struct {
	min, max time.Duration
	jitter   func() float64
	backoff  time.Duration
}

// NewPacer returns a Pacer whose backoff doubles from min to max. jitter,
// when not nil, returns values in [0, 1) and spreads each wait over
// [b/2, b) for a backoff b, so that waiters started together do not try
// together; nil waits exactly the backoff. It needs 0 < min <= max.
func NewPacer(min, max time.Duration, jitter func() float64) *Pacer {
	return &Pacer{min: min, max: max, jitter: jitter, backoff: min}
}

// Held returns how long to wait after a try found the key held, and doubles
// the backoff for the next time. now is the waiter's clock; expires is the
// holder's expiry on the backend's clock, zero when unknown.
func (p *Pacer) Held(now, expires time.Time) time.Duration {
	wait := p.backoff
	if p.jitter != nil {
		wait = wait/2 + time.Duration(p.jitter()*float64(wait/2))
	}
	p.grow()
	return p.hinted(now, expires, wait)
}

// Bound returns how long to wait for a notification after a try found the
// key held: at most limit, which only bounds a lost notification, or
// shorter when the holder's expiry is near (or the clocks disagree; see
// Pacer), and grows the backoff as Held does.
func (p *Pacer) Bound(now, expires time.Time, limit time.Duration) time.Duration {
	wait := limit
	if !expires.IsZero() && expires.Sub(now)+time.Millisecond <= 0 {
		wait = min(wait, p.backoff)
	}
	p.grow()
	return p.hinted(now, expires, wait)
}

// Reset starts the backoff again from min: something said the key may be
// free, so the next wait should be short.
func (p *Pacer) Reset() { p.backoff = p.min }

// grow doubles the backoff up to max, without overflowing for any max.
func (p *Pacer) grow() {
	if p.backoff <= p.max/2 {
		p.backoff *= 2
	} else {
		p.backoff = p.max
	}
}

// hinted shortens wait to the holder's expiry (plus a millisecond, so the
// try lands after it), but never below min.
func (p *Pacer) hinted(now, expires time.Time, wait time.Duration) time.Duration {
	if expires.IsZero() {
		return wait
	}
	if until := expires.Sub(now) + time.Millisecond; until > 0 && until < wait {
		return max(until, p.min)
	}
	return wait
}

// Loop waits between the tries of one waiter for a held key.
type Loop struct {
	// Pacer paces the tries; required.
	Pacer *Pacer
	// Now reads the waiter's clock; nil means time.Now.
	Now func() time.Time
	// AfterFunc calls f after d on the waiter's clock, unless the returned
	// stop is called first; nil means time.AfterFunc.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Notify, when not nil, blocks until the key may have become free or
	// ctx ends, as lease.Notifier's WaitChange does. It returns nil when a
	// try is worthwhile, ctx's error when ctx ended, and another error when
	// notifications are not working: the Loop then calls NotifyFailed and
	// polls from then on.
	Notify func(ctx context.Context) error
	// NotifyMax bounds one Notify, in case a notification is lost.
	NotifyMax time.Duration
	// NotifyFailed, when not nil, hears why notifications stopped working.
	NotifyFailed func(error)
	// Wake, when not nil, delivers pokes: word that the key may be free
	// (a release that passed by). A poke ends the wait and resets the
	// backoff.
	Wake <-chan struct{}
}

// OnClock returns a Loop paced by p whose waits run on a clock given as its
// Now and AfterFunc methods (a lease.Clock's: T is its Timer).
func OnClock[T interface{ Stop() bool }](p *Pacer, now func() time.Time, afterFunc func(time.Duration, func()) T) Loop {
	return Loop{
		Pacer:     p,
		Now:       now,
		AfterFunc: func(d time.Duration, f func()) func() bool { return afterFunc(d, f).Stop },
	}
}

// Wait waits before the next try of a key found held, whose holder expires
// at expires on the backend's clock (zero when unknown). It returns nil
// when it is time to try again, and context.Cause(ctx) when ctx ended.
func (l *Loop) Wait(ctx context.Context, expires time.Time) error {
	if l.Notify != nil {
		return l.notified(ctx, expires)
	}
	return l.Sleep(ctx, l.Pacer.Held(l.now(), expires))
}

func (l *Loop) now() time.Time {
	if l.Now == nil {
		return time.Now()
	}
	return l.Now()
}

func (l *Loop) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if l.AfterFunc == nil {
		return time.AfterFunc(d, f).Stop
	}
	return l.AfterFunc(d, f)
}

// notified waits for a notification, bounded by the Pacer.
func (l *Loop) notified(ctx context.Context, expires time.Time) error {
	d := l.Pacer.Bound(l.now(), expires, l.NotifyMax)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := l.afterFunc(d, cancel)
	defer stop()
	err := l.Notify(wctx)
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case err == nil || wctx.Err() != nil:
		return nil // word came, or our own bound ran out: try again
	default:
		l.Notify = nil // notifications broke: poll from now on, starting now
		if l.NotifyFailed != nil {
			l.NotifyFailed(err)
		}
		return nil
	}
}

// Sleep waits d on the Loop's clock, or until a poke or ctx's end, which it
// returns as context.Cause(ctx).
func (l *Loop) Sleep(ctx context.Context, d time.Duration) error {
	fired := make(chan struct{})
	stop := l.afterFunc(d, func() { close(fired) })
	defer stop()
	select {
	case <-fired:
		return nil
	case <-l.Wake:
		l.Pacer.Reset()
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
