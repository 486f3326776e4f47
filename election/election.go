// Package election elects one leader per key on any lease.Backend, and gives
// every term a fencing token: the leader passes its term's token with every
// write, and a guard (package fence) refuses the writes of a leader whose
// term has ended, however late they arrive. A term is a lease.Hold: it is
// renewed in the background and lost exactly as a Hold is (its context is
// cancelled with cause lease.ErrLost at the I5 deadline).
//
// The leader's value (an address, a name) travels as the lease's owner, so
// Leader and Observe read it from the backend with no storage of their own.
//
// Campaign waits through lease.Client.Acquire: the backend's FIFO wait or
// its notifications where it has them, a paced poll otherwise. Observe
// follows the backend's watch where it has one (lease.Watcher) and does not
// refuse it as unsupported (a leasehttp.Client whose server's backend cannot
// watch), and otherwise reads the leader again when the backend notifies a change, at
// the leader's expiry, and, while there is none, at a backoff from 5 to
// 500 ms: it never polls without a pause.
package election

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/wait"
)

// ErrNoLeader means nobody holds the key's leadership now.
var ErrNoLeader = errors.New("election: no leader")

// Leader is a term as others see it.
type Leader struct {
	// Key is the election's key.
	Key string
	// Value is what the leader announced with Campaign.
	Value string
	// Token is the term's fencing token: it rises with every new term (I1).
	Token lease.Token
	// Expires is when the term ends unless renewed, on the backend's clock.
	Expires time.Time
}

// Elector campaigns for and observes elections on one backend.
type Elector struct {
	backend lease.Backend
	opts    []lease.Option
	ttl     time.Duration
}

// New returns an Elector whose terms last ttl between renewals. opts
// configure the lease.Client each Campaign runs (clock, drift margin,
// backoff); the owner it acquires as is always the value that Campaign
// announces, whatever lease.WithOwner says.
func New(b lease.Backend, ttl time.Duration, opts ...lease.Option) (*Elector, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: election: backend is nil", lease.ErrInvalid)
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	// Built once here so that a bad option fails New, not each Campaign.
	if _, err := lease.NewClient(b, opts...); err != nil {
		return nil, err
	}
	return &Elector{backend: b, opts: opts, ttl: ttl}, nil
}

// Term is a won election: a lease on the key, held and renewed until
// Resign or its loss.
type Term struct {
	*lease.Hold
	value string
}

// Value returns what the leader announced.
func (t *Term) Value() string { return t.value }

// Resign ends the term at once, so that the next candidate is elected
// without waiting for the TTL. It fails with an error matching
// lease.ErrNotHeld if the term was already lost.
func (t *Term) Resign(ctx context.Context) error { return t.Release(ctx) }

// Campaign waits until it is elected leader of key, announcing value, or
// until ctx ends. value is checked as a lease's owner is (lease.ValidateOwner).
func (e *Elector) Campaign(ctx context.Context, key, value string) (*Term, error) {
	c, err := lease.NewClient(e.backend, append(e.opts[:len(e.opts):len(e.opts)], lease.WithOwner(value))...)
	if err != nil {
		return nil, err
	}
	h, err := c.Acquire(ctx, key, e.ttl)
	if err != nil {
		return nil, err
	}
	return &Term{Hold: h, value: value}, nil
}

// Leader returns key's leader now, or an error matching ErrNoLeader.
func (e *Elector) Leader(ctx context.Context, key string) (Leader, error) {
	l, err := e.backend.Get(ctx, key)
	if errors.Is(err, lease.ErrNotFound) {
		return Leader{}, fmt.Errorf("%w of %q", ErrNoLeader, key)
	}
	if err != nil {
		return Leader{}, err
	}
	return leaderOf(l), nil
}

func leaderOf(l lease.Lease) Leader {
	return Leader{Key: l.Key, Value: l.Owner, Token: l.Token, Expires: l.Expires}
}

// Observe streams key's leadership: the leader now (a zero Leader, with
// only Key set, when there is none), then each change — a new term, or the
// end of one (again a zero Leader) — as the backend reports it. Renewals
// of a term are not changes. Tokens of successive leaders only rise.
//
// It ends without an error when ctx ends, and with one error when the
// backend fails; observing again starts from the leader of that moment.
func (e *Elector) Observe(ctx context.Context, key string) iter.Seq2[Leader, error] {
	if err := lease.ValidateKey(key); err != nil {
		return func(yield func(Leader, error) bool) { yield(Leader{}, err) }
	}
	if w, ok := e.backend.(lease.Watcher); ok {
		return e.observeWatch(ctx, w, key)
	}
	return e.observePoll(ctx, key)
}

// observeWatch follows the backend's watch of key. A prefix watch also
// sees keys that extend key; those are skipped. A watch refused as
// unsupported (a leasehttp.Client whose server's backend cannot watch)
// gives way to reading the leader.
func (e *Elector) observeWatch(ctx context.Context, w lease.Watcher, key string) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		cur := Leader{Key: key}
		synced := false
		for ev, err := range w.Watch(ctx, key) {
			if err != nil {
				if !synced && errors.Is(err, errors.ErrUnsupported) {
					e.observePoll(ctx, key)(yield)
					return
				}
				yield(Leader{}, err)
				return
			}
			if ev.Kind == lease.Synced {
				synced = true
				if !yield(cur, nil) {
					return
				}
				continue
			}
			if ev.Lease.Key != key {
				continue
			}
			next := cur
			switch ev.Kind {
			case lease.Held, lease.Acquired:
				next = leaderOf(ev.Lease)
			case lease.Renewed:
				if ev.Lease.Token == cur.Token {
					cur.Expires = ev.Lease.Expires
				}
				continue
			case lease.Released, lease.Expired:
				if ev.Lease.Token != cur.Token {
					continue // the end of a term already superseded
				}
				next = Leader{Key: key}
			}
			cur = next
			if synced && !yield(cur, nil) {
				return
			}
		}
	}
}

// observePoll reads the leader again whenever it may have changed.
func (e *Elector) observePoll(ctx context.Context, key string) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		loop := wait.Loop{Pacer: wait.NewPacer(5*time.Millisecond, 500*time.Millisecond, nil), NotifyMax: 5 * time.Second}
		notifier, _ := e.backend.(lease.Notifier)
		var (
			cur   Leader
			first = true
		)
		for {
			now, err := e.Leader(ctx, key)
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, ErrNoLeader):
				now = Leader{Key: key}
			case err != nil:
				yield(Leader{}, err)
				return
			}
			if first || now.Token != cur.Token {
				first = false
				cur = now
				if !yield(cur, nil) {
					return
				}
				loop.Pacer.Reset()
			}
			// While there is a leader, its end is what changes things: the
			// backend's word of a release or expiry, else its expiry. With
			// none, a new term is: only a paced read finds it.
			loop.Notify = nil
			notifying := notifier != nil && cur.Token != 0
			if notifying {
				loop.Notify = func(ctx context.Context) error { return notifier.WaitChange(ctx, key) }
			}
			if loop.Wait(ctx, cur.Expires) != nil {
				return
			}
			if notifying && loop.Notify == nil {
				notifier = nil // notifications broke: read at the pace alone
			}
		}
	}
}
