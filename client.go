package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/leasehq/lease/internal/wait"
)

// Client acquires leases from a Backend for an application: Acquire waits,
// TryAcquire tries once, and the returned Hold renews itself in the
// background. A Client is safe for concurrent use.
type Client struct {
	backend Backend
	clientConfig
	// Shared with the Clients WithOwner makes: one scheduler renews the
	// holds of them all, and one lock guards their jitter source.
	sched    *renewScheduler
	jitterMu *sync.Mutex // guards clientConfig.jitter
}

// clientConfig is what Options set, before the Client exists: an Option
// cannot reach a Client in use.
type clientConfig struct {
	owner      string
	clock      Clock
	driftFrac  float64
	driftMin   time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	jitter     func() float64 // in [0, 1)
}

// Option configures a Client in NewClient.
type Option func(*clientConfig) error

// DefaultOwner returns the owner name of this process when none is given:
// "HOSTNAME-PID" ("unknown-host-PID" if the host's name cannot be read), so
// that a lease shows other contenders and logs which process holds it. A
// Client without WithOwner uses it, and so does the lease command without
// --owner.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// WithOwner sets the owner name the Client gives with every acquisition. It
// is shown to other contenders and in logs; it proves nothing (I4). The
// default is DefaultOwner().
func WithOwner(owner string) Option {
	return func(c *clientConfig) error {
		if err := ValidateOwner(owner); err != nil {
			return err
		}
		c.owner = owner
		return nil
	}
}

// WithClock replaces the real clock, for tests and simulation.
func WithClock(clk Clock) Option {
	return func(c *clientConfig) error {
		if clk == nil {
			return invalidf("clock is nil")
		}
		c.clock = clk
		return nil
	}
}

// WithDriftMargin sets how much earlier than the backend the client gives a
// lease up: the margin is fraction×TTL + min. The client treats a lease as
// lost at (send time of last successful acquire or renew) + TTL − margin
// (I5). The default is 1% of the TTL plus 2 ms. Acquire rejects a TTL whose
// margin would leave less than half of it.
func WithDriftMargin(fraction float64, min time.Duration) Option {
	return func(c *clientConfig) error {
		if !(fraction >= 0 && fraction < 0.5) || min < 0 { // NaN fails both
			return invalidf("drift margin needs 0 <= fraction < 0.5 and min >= 0, got %v and %v", fraction, min)
		}
		c.driftFrac, c.driftMin = fraction, min
		return nil
	}
}

// WithBackoff sets the bounds of the jittered exponential backoff Acquire
// uses while it polls a backend that offers neither WaitAcquirer nor
// Notifier, and that the recipes built on the Client (package election's
// reading of the leader, package semaphore's polling for a slot) pace
// their own polls with (Backoff). The defaults are 5 ms and 500 ms.
func WithBackoff(min, max time.Duration) Option {
	return func(c *clientConfig) error {
		if min <= 0 || max < min {
			return invalidf("backoff needs 0 < min <= max, got %v and %v", min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// WithJitter replaces the source of randomness for renewal and backoff
// jitter, the recipes' included (Jitter); f must return values in [0, 1).
// Simulations pass a seeded source to make runs reproducible. f need not be
// safe for concurrent use: it is called under a lock that every Client
// given this Option shares (one Option given to several NewClient calls,
// and the Clients WithOwner makes, whose holds renew beside each other).
func WithJitter(f func() float64) Option {
	var mu sync.Mutex
	locked := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return f()
	}
	return func(c *clientConfig) error {
		if f == nil {
			return invalidf("jitter source is nil")
		}
		c.jitter = locked
		return nil
	}
}

// NewClient returns a Client acquiring leases from b.
func NewClient(b Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, invalidf("backend is nil")
	}
	c := &Client{backend: b, jitterMu: new(sync.Mutex), sched: new(renewScheduler), clientConfig: clientConfig{
		owner:      DefaultOwner(),
		clock:      SystemClock{},
		driftFrac:  0.01,
		driftMin:   2 * time.Millisecond,
		minBackoff: 5 * time.Millisecond,
		maxBackoff: 500 * time.Millisecond,
		jitter:     rand.Float64,
	}}
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("nil option")
		}
		if err := opt(&c.clientConfig); err != nil {
			return nil, err
		}
	}
	c.sched.init(c)
	return c, nil
}

// Owner returns the owner name the Client acquires with.
func (c *Client) Owner() string { return c.owner }

// WithOwner returns a Client that acquires as owner (checked as WithOwner
// checks it) and is c in everything else: the same backend and options, and
// the same renewals (one scheduler renews the holds of both, batched
// together where the backend can). The recipes use it: an election's terms
// are held under the leader's value, a semaphore's slots under an owner
// that carries its limit.
func (c *Client) WithOwner(owner string) (*Client, error) {
	if err := ValidateOwner(owner); err != nil {
		return nil, err
	}
	d := &Client{backend: c.backend, clientConfig: c.clientConfig, sched: c.sched, jitterMu: c.jitterMu}
	d.owner = owner
	return d, nil
}

// Backend returns the backend the Client acquires from.
func (c *Client) Backend() Backend { return c.backend }

// Clock returns the clock the Client judges its deadlines by (WithClock),
// for recipes built on it whose own waits must run on the same time.
func (c *Client) Clock() Clock { return c.clock }

// Backoff returns the bounds of the Client's polling backoff (WithBackoff),
// for recipes built on it whose own polls must keep the same pace.
func (c *Client) Backoff() (min, max time.Duration) { return c.minBackoff, c.maxBackoff }

// Jitter returns a value in [0, 1) from the Client's source of jitter
// (WithJitter), for recipes built on it whose own waits must draw from the
// same source. It is safe for concurrent use.
func (c *Client) Jitter() float64 { return c.rand() }

// margin returns the drift margin for ttl.
func (c *Client) margin(ttl time.Duration) time.Duration {
	return time.Duration(c.driftFrac*float64(ttl)) + c.driftMin
}

func (c *Client) check(key string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	// m > ttl/2 is 2m > ttl without 2m overflowing; and a minimum near
	// MaxInt64 plus the fraction wraps the margin negative.
	if m := c.margin(ttl); m < 0 {
		return invalidf("ttl %v is too short for the drift margin %.0f%% + %v", ttl, 100*c.driftFrac, c.driftMin)
	} else if m > ttl/2 {
		return invalidf("ttl %v is too short for the drift margin %v", ttl, m)
	}
	return nil
}

// TryAcquire tries once to acquire key for ttl. If the key is held it fails at
// once with an error matching ErrHeld (a *HeldError naming the holder). If
// the backend's answer came so late that the lease's safe deadline had
// already passed, it releases the lease and fails with an error matching
// ErrUnavailable: a lease it cannot vouch for is no lease. If ctx ends
// while the request is in flight, it returns ctx's cause at once, and a
// grant the backend makes meanwhile is released when its answer comes
// (acquireOnce): the caller holds nothing, and nor does anybody else.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Hold, error) {
	if err := c.check(key, ttl); err != nil {
		return nil, err
	}
	sent := c.clock.Now()
	l, err := c.acquireOnce(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return c.hold(ctx, l, sent, ttl)
}

// Acquire waits until it holds key for ttl, or until ctx is done. It uses the
// backend's own FIFO wait (WaitAcquirer) or push notification (Notifier)
// where offered, and otherwise polls with jittered exponential backoff. Any
// error other than the key being held ends the wait at once.
//
// The returned Hold is independent of ctx's cancellation: it lives until
// Release or until the lease is lost.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Hold, error) {
	if err := c.check(key, ttl); err != nil {
		return nil, err
	}
	if wa, ok := c.backend.(WaitAcquirer); ok {
		return c.acquireWaiting(ctx, wa, key, ttl)
	}
	loop := wait.OnClock(wait.NewPacer(c.minBackoff, c.maxBackoff, c.rand), c.clock.Now, c.clock.AfterFunc)
	loop.NotifyMax = c.maxBackoff // notifications wake us early; the bound only covers a lost one
	if n, ok := c.backend.(Notifier); ok {
		loop.Notify = func(ctx context.Context) error { return n.WaitChange(ctx, key) }
	}
	for {
		sent := c.clock.Now()
		l, err := c.acquireOnce(ctx, key, ttl)
		if err == nil {
			return c.hold(ctx, l, sent, ttl)
		}
		if !errors.Is(err, ErrHeld) {
			return nil, err
		}
		if err := loop.Wait(ctx, HolderExpires(err)); err != nil {
			return nil, err
		}
	}
}

// acquireOnce sends one Acquire (TryAcquire's, or one of a waiting
// Acquire's polls), which ctx does not cut short: a statement cancelled as
// it commits (pgx, go-redis) would leave a lease granted to nobody, held
// until its TTL — a phantom term that a cancelled Campaign leaves in
// everyone's way. When ctx ends
// first, acquireOnce returns ctx's cause at once and gives a grant that
// arrives later back in the background. The request is bounded by the
// TTL: a backend still at it then is cut short, and a grant it makes
// after that is the backend's to end (pgstore settles such a statement).
func (c *Client) acquireOnce(ctx context.Context, key string, ttl time.Duration) (Lease, error) {
	type result struct {
		l   Lease
		err error
	}
	if ctx.Err() != nil {
		return Lease{}, context.Cause(ctx) // ended already: send nothing
	}
	done := make(chan result, 1)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	go func() {
		defer cancel()
		l, err := c.backend.Acquire(actx, key, c.owner, ttl)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		return r.l, r.err
	case <-ctx.Done():
		settling := settlingOf(ctx)
		if settling != nil {
			settling.Add(1) // the caller is counted in it still: see settleIn
		}
		go func() {
			if settling != nil {
				defer settling.Done()
			}
			if r := <-done; r.err == nil {
				c.giveBack(ctx, r.l, ttl)
			}
		}()
		return Lease{}, context.Cause(ctx)
	}
}

// settlingKey is the context key of settleIn's WaitGroup.
type settlingKey struct{}

// settleIn returns ctx carrying wg, which counts the requests acquireOnce
// leaves to answer in the background (and to give back what they grant),
// so that whoever waits for wg knows no lease is left granted by them: a
// Session, whose end waits for its acquisitions. The caller must be
// counted in wg while it acquires under ctx, so that these Adds never
// start from zero.
func settleIn(ctx context.Context, wg *sync.WaitGroup) context.Context {
	return context.WithValue(ctx, settlingKey{}, wg)
}

func settlingOf(ctx context.Context) *sync.WaitGroup {
	wg, _ := ctx.Value(settlingKey{}).(*sync.WaitGroup)
	return wg
}

// acquireWaiting acquires through the backend's own FIFO wait. The lease may
// have been granted long after the request was sent; the client's deadline
// counts from the send time, so a lease that waited long is renewed at once
// to get a deadline worth having.
func (c *Client) acquireWaiting(ctx context.Context, wa WaitAcquirer, key string, ttl time.Duration) (*Hold, error) {
	for {
		sent := c.clock.Now()
		l, err := wa.AcquireWait(ctx, key, c.owner, ttl)
		if err != nil {
			return nil, err
		}
		if c.clock.Now().Sub(sent) < ttl/3 {
			return c.hold(ctx, l, sent, ttl)
		}
		sent = c.clock.Now()
		renewed, err := c.backend.Renew(ctx, l, ttl)
		if err == nil {
			err = sameGeneration(l, renewed)
		}
		switch {
		case err == nil:
			return c.hold(ctx, renewed, sent, ttl)
		case errors.Is(err, ErrNotHeld):
			continue // it expired before we could use it: queue again
		default:
			c.giveBack(ctx, l, ttl)
			return nil, fmt.Errorf("lease: renewing %q right after a long wait: %w", key, err)
		}
	}
}

func (c *Client) rand() float64 {
	c.jitterMu.Lock()
	defer c.jitterMu.Unlock()
	return c.jitter()
}
