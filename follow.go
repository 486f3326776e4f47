package lease

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"time"

	"github.com/leasehq/lease/internal/wait"
)

// The bounds of the pause between a broken watch and the next, unless
// FollowBackoff says otherwise.
const (
	followMin = 100 * time.Millisecond
	followMax = 5 * time.Second
)

// FollowOption configures Follow and FollowKey.
type FollowOption func(*followConfig) error

type followConfig struct {
	min, max time.Duration
	clock    Clock
	jitter   func() float64 // in [0, 1)
	onBreak  func(err error, pause time.Duration) error
}

// FollowBackoff sets the bounds of the pause before each new watch: the
// pause doubles from min to max while watches keep breaking, each one
// jittered over [b/2, b) for a backoff b, and starts again from min once a
// watch delivers its Synced. The defaults are 100 ms and 5 s.
func FollowBackoff(min, max time.Duration) FollowOption {
	return func(c *followConfig) error {
		if min <= 0 || max < min {
			return invalidf("follow backoff needs 0 < min <= max, got %v and %v", min, max)
		}
		c.min, c.max = min, max
		return nil
	}
}

// FollowClock sets the clock the pauses run on: the Client's (Client.Clock),
// so that a test or a simulation drives them with its own time. The default
// is SystemClock.
func FollowClock(clk Clock) FollowOption {
	return func(c *followConfig) error {
		if clk == nil {
			return invalidf("follow clock is nil")
		}
		c.clock = clk
		return nil
	}
}

// FollowClient makes the pauses run on c's clock (WithClock) and take their
// jitter from c's source (WithJitter), as c's own waits do: what a recipe
// built on a Client passes, so that a simulation that seeds the Client
// replays its watches' pauses too.
func FollowClient(c *Client) FollowOption {
	return func(cfg *followConfig) error {
		if c == nil {
			return invalidf("follow client is nil")
		}
		cfg.clock, cfg.jitter = c.clock, c.rand
		return nil
	}
}

// FollowOnBreak makes Follow call f at each break with its error (matching
// ErrUnavailable) and the pause before the next watch, before the pause: to
// say so in a log, or count. When f returns an error, Follow yields it and
// ends instead of watching again; returning err ends at the first break, as
// a plain Watch does.
func FollowOnBreak(f func(err error, pause time.Duration) error) FollowOption {
	return func(c *followConfig) error {
		if f == nil {
			return invalidf("follow break hook is nil")
		}
		c.onBreak = f
		return nil
	}
}

// Follow is w.Watch(ctx, prefix) that watches again whenever the watch
// breaks (an error matching ErrUnavailable: the backend failed or restarted,
// the reader fell behind, a leasehttp stream went silent), after a pause
// (FollowBackoff), for as long as ctx lasts. Each new watch starts from the
// current state, since what happened during the break is not known: before
// its first event Follow yields one Resync event, which tells the caller to
// drop what it knows; the Held events and the Synced that follow are the
// whole picture again. A watch that breaks before it yields anything (the
// backend still down) is watched again after a longer pause, without a
// Resync. A break whose error has a RetryAfter() time.Duration method (a
// leasehttp watch refused 429 by a rate limit in front of the server, with
// its Retry-After) pauses at least that long.
//
// It ends without an error when ctx ends or the caller leaves the loop, and
// with one error that watching again cannot mend: a bad prefix
// (ErrInvalid), a backend that cannot watch (errors.ErrUnsupported), a
// refused credential, a bad option, or the error FollowOnBreak returned.
// A closed backend's watch breaks with ErrUnavailable like a failed one, so
// Follow watches it again until ctx ends.
func Follow(ctx context.Context, w Watcher, prefix string, opts ...FollowOption) iter.Seq2[Event, error] {
	return follow(ctx, w, opts, func() iter.Seq2[Event, error] { return w.Watch(ctx, prefix) })
}

// FollowKey is Follow of WatchKey(ctx, w, key): exactly key, resumed after
// each break with a Resync.
func FollowKey(ctx context.Context, w Watcher, key string, opts ...FollowOption) iter.Seq2[Event, error] {
	return follow(ctx, w, opts, func() iter.Seq2[Event, error] { return WatchKey(ctx, w, key) })
}

// retryAfter is a break that says how long to wait before watching again:
// a leasehttp watch refused 429 by a proxy's or a gateway's rate limit,
// with its answer's Retry-After.
type retryAfter interface{ RetryAfter() time.Duration }

// errEndedAlone is the break of a watch that ended with no error while its
// context lasted, which the Watcher contract rules out.
var errEndedAlone = fmt.Errorf("%w: lease: the watch ended by itself", ErrUnavailable)

// ValidateFollowOptions reports whether opts are fit for Follow: none nil,
// each valid. The error matches ErrInvalid. Follow checks them itself; a
// caller that may not call it (election.Observe, which reads instead of
// watching a backend that cannot watch) checks them here.
func ValidateFollowOptions(opts ...FollowOption) error {
	_, err := newFollowConfig(opts)
	return err
}

func newFollowConfig(opts []FollowOption) (followConfig, error) {
	cfg := followConfig{min: followMin, max: followMax, clock: SystemClock{}, jitter: rand.Float64}
	for _, opt := range opts {
		if opt == nil {
			return cfg, invalidf("follow: option is nil")
		}
		if err := opt(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func follow(ctx context.Context, w Watcher, opts []FollowOption, watch func() iter.Seq2[Event, error]) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if w == nil {
			yield(Event{}, invalidf("follow: watcher is nil"))
			return
		}
		cfg, err := newFollowConfig(opts)
		if err != nil {
			yield(Event{}, err)
			return
		}
		pacer := wait.NewPacer(cfg.min, cfg.max, cfg.jitter)
		loop := wait.OnClock(pacer, cfg.clock.Now, cfg.clock.AfterFunc)
		told := false // whether an event was yielded: a new picture needs a Resync first
		for {
			var broke error
			first := true
			for ev, err := range watch() {
				if err != nil {
					broke = err
					break
				}
				if first && told && !yield(Event{Kind: Resync}, nil) {
					return
				}
				first, told = false, true
				if ev.Kind == Synced {
					pacer.Reset() // the watch worked: a break after it is news
				}
				if !yield(ev, nil) {
					return
				}
			}
			if ctx.Err() != nil {
				return // the watch's error, if any, is ctx's end
			}
			if broke == nil {
				broke = errEndedAlone
			}
			if !errors.Is(broke, ErrUnavailable) {
				yield(Event{}, broke)
				return
			}
			pause := pacer.Held(cfg.clock.Now(), time.Time{})
			var busy retryAfter
			if errors.As(broke, &busy) {
				pause = max(pause, busy.RetryAfter()) // "busy, try later", and when
			}
			if cfg.onBreak != nil {
				if err := cfg.onBreak(broke, pause); err != nil {
					yield(Event{}, err)
					return
				}
			}
			if loop.Sleep(ctx, pause) != nil {
				return
			}
		}
	}
}
