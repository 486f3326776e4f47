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
// follows the backend's watch of exactly its key where it has one
// (lease.FollowKey: other keys that start with it never reach it, and a
// watch that breaks is watched again) and does not refuse it as unsupported
// (a leasehttp.Client whose server's backend cannot watch), and otherwise
// reads the leader again when the backend notifies a change, at the
// leader's expiry, and, while there is none, at the Client's backoff
// (lease.WithBackoff; 5 to 500 ms by default), on the Client's clock: it
// never polls without a pause.
package election

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
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

// Elector campaigns for and observes elections through one lease.Client,
// whose options reach everything it does: the Client's clock (its
// lease.WithClock) times Observe's expiries and every wait, its backoff and
// jitter (lease.WithBackoff, lease.WithJitter) pace Observe's reads and
// Run's requeues, and its scheduler renews the terms.
type Elector struct {
	client  *lease.Client
	backend lease.Backend
	ttl     time.Duration
	clock   lease.Clock        // the Client's (lease.WithClock): Observe's expiry timers
	follow  lease.FollowOption // the Client's clock and jitter for Observe's pauses
}

// New returns an Elector that campaigns through c, whose terms last ttl
// between renewals. A term is held under the value Campaign announces, not
// c's owner (lease.Client.WithOwner), and renewed with c's other holds.
func New(c *lease.Client, ttl time.Duration) (*Elector, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: election: client is nil", lease.ErrInvalid)
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	return &Elector{client: c, backend: c.Backend(), ttl: ttl, clock: c.Clock(), follow: lease.FollowClient(c)}, nil
}

// Term is a won election: a lease on the key, held and renewed until
// Resign or its loss.
type Term struct {
	*lease.Hold
	value   string
	backend lease.Backend
	lead    *leadEnd // Lead's resignation when its ctx ends; nil for Campaign's

	// What the resignations found, guarded by turn (a lock a waiter can
	// give up on with its ctx): whether one has asked the backend, and
	// whether one has learnt the lease gone, after which Resign answers
	// nil without asking; until then each asks the backend again.
	turn  chan struct{}
	asked bool
	gone  bool
}

// leadEnd is the resignation of a Lead's term when its ctx ends: whoever
// resigns first (the ctx's end, or a Resign that stopped it) closes done
// once its answer is in the Term.
type leadEnd struct {
	stop func() bool // stops the resignation on the ctx's end, unless it has started
	done chan struct{}
}

// Value returns what the leader announced.
func (t *Term) Value() string { return t.value }

// Resign ends the term (its Context first, with cause lease.ErrReleased)
// and frees its lease on the backend, so that the next candidate is elected
// without waiting out the TTL.
//
// It returns nil once the lease is known not to be held for this term any
// more: released now, or already gone (expired, or superseded by a later
// term). That holds after a loss too — whether the term had been lost
// before is Err's to say (lease.ErrLost), not Resign's; a term the client
// gave up at its safe deadline while the backend still held it is freed
// here all the same. It returns an error only when it cannot tell: the
// backend failed or ctx ended before the backend answered (the error
// matches lease.ErrUnavailable or ctx's); the lease then ends at the latest
// at its TTL. Calling it again after nil returns nil; after an error it
// asks the backend again, as the first did. A term won with Lead whose ctx
// has ended is being resigned already: Resign waits for that resignation
// (or ctx) and answers as it does, asking the backend again if it could
// not tell.
func (t *Term) Resign(ctx context.Context) error {
	if t.lead == nil {
		return t.resign(ctx)
	}
	if t.lead.stop() {
		defer close(t.lead.done)
		return t.resign(ctx)
	}
	select {
	case <-t.lead.done:
	case <-ctx.Done():
		return t.resigned(context.Cause(ctx))
	}
	return t.resign(ctx) // nil if it found the lease gone; else asks again
}

// resign releases the term's lease and says whether it is known gone: at
// once if an earlier resignation found it so, else by asking the backend
// (again, if an earlier one could not tell: Hold.Release, called again,
// would answer nil without asking).
func (t *Term) resign(ctx context.Context) error {
	select {
	case t.turn <- struct{}{}:
	default:
		// Taken: wait, or not past ctx. (Not asked for ctx.Done on the
		// way in: Run's lazyTimeout would make its timer on the hand-off.)
		select {
		case t.turn <- struct{}{}:
		case <-ctx.Done():
			return t.resigned(context.Cause(ctx))
		}
	}
	defer func() { <-t.turn }()
	if t.gone {
		return nil
	}
	var err error
	if !t.asked {
		t.asked = true
		err = t.Release(ctx)
		if errors.Is(err, lease.ErrLost) {
			// Release reports the loss, not the backend's answer to its
			// release: ask again, which is answered ErrNotHeld if it went
			// through.
			err = t.backend.Release(ctx, t.Lease())
		}
	} else {
		err = t.backend.Release(ctx, t.Lease())
	}
	err = t.resigned(err)
	t.gone = err == nil
	return err
}

// resigned is Resign's answer after the backend answered a release with
// err: nil once the lease is known gone, else the error, which says why
// nobody can tell.
func (t *Term) resigned(err error) error {
	if err == nil || errors.Is(err, lease.ErrNotHeld) {
		return nil
	}
	return fmt.Errorf("election: resigning %q: %w", t.Key(), err)
}

// resignTimeout bounds the resignation of a term whose ctx ended (Lead's,
// Run's).
const resignTimeout = 10 * time.Second

// resignOnEnd resigns t because ctx ended, within resignTimeout. The bound
// is a lazyTimeout: a backend that answers without looking at its context
// (memstore, boltstore) sets no timer, whose setup (the runtime wakes a
// thread to see the new earliest timer) would otherwise be a good part of
// an in-process hand-off.
func resignOnEnd(ctx context.Context, t *Term) error {
	rctx := resignContext(ctx)
	defer rctx.stop()
	return t.resign(rctx)
}

// resignContext returns the context to resign a term under because ctx
// ended: ctx's values without its end, bounded by resignTimeout once a
// backend asks it anything. Stop it when the resignation has returned.
func resignContext(ctx context.Context) *lazyTimeout {
	return &lazyTimeout{parent: context.WithoutCancel(ctx), timeout: resignTimeout}
}

// lazyTimeout is context.WithTimeout(parent, timeout), made the first time
// it is asked anything (so the timeout runs from then: for a backend's
// request, from its start). context.WithCancel and its kin ask for Done
// and Value, so that a child of it is the real context's child.
type lazyTimeout struct {
	parent  context.Context
	timeout time.Duration

	mu      sync.Mutex
	ctx     context.Context // nil until asked
	cancel  context.CancelFunc
	stopped bool
}

func (l *lazyTimeout) real() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithTimeout(l.parent, l.timeout)
		if l.stopped {
			l.cancel()
		}
	}
	return l.ctx
}

// stop ends it, as WithTimeout's cancel; asked afterwards, it has ended.
func (l *lazyTimeout) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.cancel != nil {
		l.cancel()
	}
}

// Deadline implements context.Context.
func (l *lazyTimeout) Deadline() (time.Time, bool) { return l.real().Deadline() }

// Done implements context.Context.
func (l *lazyTimeout) Done() <-chan struct{} { return l.real().Done() }

// Err implements context.Context.
func (l *lazyTimeout) Err() error { return l.real().Err() }

// Value implements context.Context.
func (l *lazyTimeout) Value(key any) any { return l.real().Value(key) }

// Lead is Campaign for a term that lasts at most as long as ctx: when ctx
// ends (a process shutting down), the term is resigned at once in the
// background — its Context ends first, with cause lease.ErrReleased — so
// that the next candidate, or this process restarted with the same value,
// is elected without waiting out the TTL. Campaign's ctx, by contrast,
// bounds only the wait (a timeout for it is common): a term Campaign wins
// lasts until Resign or its loss. A term lost is resigned at once in the
// background too (the backend may hold it a little longer than the client
// vouched for it), and then nothing of it stays registered on ctx: a
// process that leads again and again under one long-lived ctx, resigning
// none of its lost terms, keeps none of them.
func (e *Elector) Lead(ctx context.Context, key, value string) (*Term, error) {
	t, err := e.Campaign(ctx, key, value)
	if err != nil {
		return nil, err
	}
	end := &leadEnd{done: make(chan struct{})}
	end.stop = context.AfterFunc(ctx, func() {
		// Nobody to tell but a Resign: the lease ends at its TTL at the latest.
		_ = resignOnEnd(ctx, t)
		close(end.done)
	})
	t.lead = end
	context.AfterFunc(t.Context(), func() {
		// The term ended: by a Resign or ctx's end (which stopped or ran
		// the above already), or by its loss, for which this resigns.
		if end.stop() {
			_ = resignOnEnd(ctx, t)
			close(end.done)
		}
	})
	return t, nil
}

// Campaign waits until it is elected leader of key, announcing value, or
// until ctx ends; ctx bounds the wait alone, not the term it wins (see Lead
// for a term that ends with ctx). Given up, it returns at once, even from a
// hung server (a lease granted as it gave up is given back). value is
// checked as a lease's owner is (lease.ValidateOwner).
func (e *Elector) Campaign(ctx context.Context, key, value string) (*Term, error) {
	c, err := e.client.WithOwner(value)
	if err != nil {
		return nil, err
	}
	h, err := c.Acquire(ctx, key, e.ttl)
	if err != nil {
		return nil, err
	}
	return &Term{Hold: h, value: value, backend: e.backend, turn: make(chan struct{}, 1)}, nil
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
// of a term are not changes. Tokens of successive leaders only rise. It
// follows exactly key: other keys that start with it (key-cache/x, key2, a
// semaphore named key) are neither told nor able to break it.
//
// A leader is never reported past its Expires: when the Elector's clock
// (lease.WithClock) passes it with no renewal seen — the leader died, or
// the watch went silent — Observe reports a zero Leader, "no leader
// known", without waiting for the backend's word; a renewal of that term
// that arrives later reports it again (same token). Expires is on the
// backend's clock, so a skew between the two clocks moves that moment by
// as much. Reading instead of watching (a backend that cannot watch), it
// reads the leader again at its Expires and reports what it finds (a
// leader read past its Expires, over a slow link, as no leader known); a read
// that hangs or fails holds the last report until its Expires (one that
// fails with lease.ErrUnavailable is read again at the backoff), and then
// Observe reports a zero Leader too — except that the read begun at the
// Expires itself, which looks whether the term went on, holds it until it
// answers or fails.
//
// A watch that breaks (the backend failed or restarted, a leasehttp stream
// went silent) is watched again (lease.FollowKey) after a pause on the
// Elector's clock, jittered from its source (lease.FollowClient), as a failed read is read again; meanwhile the leader
// last reported stands until its Expires, and the new watch's leader is
// reported if it is another. opts tune that (lease.FollowBackoff), or hear
// each break (lease.FollowOnBreak, whose error ends Observe with it); they
// apply to the watch, not to reading. Observe ends without an error when
// ctx ends, and with one error that observing again cannot mend (a
// refused credential, a bad option).
func (e *Elector) Observe(ctx context.Context, key string, opts ...lease.FollowOption) iter.Seq2[Leader, error] {
	err := lease.ValidateKey(key)
	if err == nil {
		err = lease.ValidateFollowOptions(opts...)
	}
	if err != nil {
		return func(yield func(Leader, error) bool) { yield(Leader{}, err) }
	}
	if w, ok := e.backend.(lease.Watcher); ok {
		return e.observeWatch(ctx, w, key, append([]lease.FollowOption{e.follow}, opts...))
	}
	return e.observePoll(ctx, key)
}

// observeWatch follows the backend's watch of exactly key
// (lease.FollowKey), with a timer at the reported leader's Expires. A watch
// refused as unsupported (a leasehttp.Client whose server's backend cannot
// watch) gives way to reading the leader.
func (e *Elector) observeWatch(ctx context.Context, w lease.Watcher, key string, opts []lease.FollowOption) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		wctx, cancel := context.WithCancel(ctx)
		type item struct {
			ev  lease.Event
			err error
		}
		items := make(chan item)
		go func() {
			defer close(items)
			for ev, err := range lease.FollowKey(wctx, w, key, opts...) {
				select {
				case items <- item{ev, err}:
				case <-wctx.Done():
					return
				}
			}
		}()
		defer func() {
			cancel()
			for range items { // the watch ends with wctx
			}
		}()
		var (
			cur    = Leader{Key: key} // what was last reported, once synced
			stale  Leader             // the term cur was until its Expires passed unrenewed
			synced bool
			// After a break (lease.Resync), the new picture's leader, to
			// be compared with cur at its Synced.
			picture   Leader
			resyncing bool
			timer     lease.Timer
			due       = make(chan struct{}, 1)
		)
		// arm sets the timer at cur's Expires on the Elector's clock.
		arm := func() {
			if timer != nil {
				timer.Stop()
				timer = nil
			}
			if cur.Token == 0 {
				return
			}
			timer = e.clock.AfterFunc(cur.Expires.Sub(e.clock.Now()), func() {
				select {
				case due <- struct{}{}:
				default:
				}
			})
		}
		defer func() {
			if timer != nil {
				timer.Stop()
			}
		}()
		// freshen makes cur no leader if its Expires has already passed:
		// a term told late (a slow stream, a skewed clock) is not reported.
		freshen := func() {
			if cur.Token != 0 && !e.clock.Now().Before(cur.Expires) {
				stale, cur = cur, Leader{Key: key}
			}
		}
		for {
			select {
			case <-due:
				if cur.Token == 0 {
					continue // a timer of a term already over
				}
				if e.clock.Now().Before(cur.Expires) {
					arm() // a timer of an earlier Expires, or one that ran early
					continue
				}
				stale, cur = cur, Leader{Key: key}
				if synced && !yield(cur, nil) {
					return
				}
				continue
			case it, ok := <-items:
				if !ok {
					return // ctx ended
				}
				if it.err != nil {
					if !synced && errors.Is(it.err, errors.ErrUnsupported) {
						e.observePoll(ctx, key)(yield)
						return
					}
					yield(Leader{}, it.err)
					return
				}
				ev := it.ev
				switch ev.Kind {
				case lease.Resync:
					// The watch broke and a new picture comes, which
					// replaces what is known at its Synced; until then
					// the leader reported stands, until its Expires.
					if synced {
						resyncing, picture = true, Leader{Key: key}
					} else {
						cur = Leader{Key: key} // a first picture cut short: none reported
					}
					continue
				case lease.Held:
					if resyncing {
						picture = leaderOf(ev.Lease)
						continue
					}
				case lease.Synced:
					if resyncing {
						// The new picture's leader is a change if it is
						// another term; the same term brings its Expires.
						resyncing = false
						prev := cur
						if picture.Token == cur.Token {
							cur.Expires = picture.Expires
						} else {
							cur = picture
						}
						freshen()
						arm()
						if cur.Token != prev.Token && !yield(cur, nil) {
							return
						}
						continue
					}
					synced = true
					freshen()
					arm()
					if !yield(cur, nil) {
						return
					}
					continue
				}
				next := cur
				switch ev.Kind {
				case lease.Held, lease.Acquired:
					next = leaderOf(ev.Lease)
				case lease.Renewed:
					switch {
					case ev.Lease.Token == cur.Token:
						cur.Expires = ev.Lease.Expires
						arm()
						continue
					case cur.Token == 0 && ev.Lease.Token == stale.Token && e.clock.Now().Before(ev.Lease.Expires):
						next = leaderOf(ev.Lease) // the term went on after all
					default:
						continue
					}
				case lease.Released, lease.Expired:
					if ev.Lease.Token == stale.Token {
						stale = Leader{}
					}
					if ev.Lease.Token != cur.Token {
						continue // the end of a term already superseded or reported over
					}
					next = Leader{Key: key}
				}
				prev := cur
				cur = next
				freshen()
				if cur.Token == prev.Token {
					continue // nothing new to report
				}
				if synced {
					arm()
					if !yield(cur, nil) {
						return
					}
				}
			}
		}
	}
}

// loop returns a wait paced by p on the Elector's clock.
func (e *Elector) loop(p *wait.Pacer) wait.Loop {
	return wait.OnClock(p, e.clock.Now, e.clock.AfterFunc)
}

// observePoll reads the leader again whenever it may have changed. While
// there is a leader, each read races a timer at its Expires (as last read),
// so that a read that fails or hangs past it (the backend went away, the
// link went silent) does not keep a leader reported that nobody has seen
// renew: "no leader known" is reported then, and the leader again once a
// read finds it.
func (e *Elector) observePoll(ctx context.Context, key string) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		lo, hi := e.client.Backoff()
		loop := e.loop(wait.NewPacer(lo, hi, nil))
		loop.NotifyMax = 5 * time.Second
		notifier, _ := e.backend.(lease.Notifier)
		type answer struct {
			l   Leader
			err error
		}
		rctx, cancel := context.WithCancel(ctx)
		answers := make(chan answer, 1)
		reading := false
		defer func() {
			cancel()
			if reading {
				<-answers
			}
		}()
		var (
			cur   Leader
			first = true
		)
		// over reports that cur's term is over as far as anyone can tell.
		over := func() bool {
			cur = Leader{Key: key}
			return yield(cur, nil)
		}
		for {
			reading = true
			go func() {
				l, err := e.Leader(rctx, key)
				answers <- answer{l, err}
			}()
			var a answer
			if cur.Token == 0 || !e.clock.Now().Before(cur.Expires) {
				// A read begun at the Expires (the one that looks
				// whether the term went on) is what tells.
				a = <-answers
			} else {
				expired := make(chan struct{})
				t := e.clock.AfterFunc(cur.Expires.Sub(e.clock.Now()), func() { close(expired) })
				select {
				case a = <-answers:
				case <-expired:
					if !over() {
						return
					}
					a = <-answers
				}
				t.Stop()
			}
			reading = false
			now, err := a.l, a.err
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, ErrNoLeader):
				now = Leader{Key: key}
			case err == nil && !e.clock.Now().Before(now.Expires):
				// Read too late to vouch for (a slow answer, a skewed
				// clock): not reported, as a watch's late news is not; a
				// paced read finds the term if it went on.
				now = Leader{Key: key}
			case errors.Is(err, lease.ErrUnavailable):
				// Read again at the pace, as a broken watch is
				// watched again; the last report stands meanwhile,
				// until its Expires.
				loop.Notify = nil
				if loop.Wait(ctx, cur.Expires) != nil {
					return
				}
				if cur.Token != 0 && !e.clock.Now().Before(cur.Expires) && !over() {
					return // its Expires passed with no read that saw it renew
				}
				continue
			case err != nil:
				yield(Leader{}, err)
				return
			}
			changed := first || now.Token != cur.Token
			cur = now // the same term brings its Expires
			if changed {
				first = false
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
