package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

// The release script PUBLISHes the key on one channel per namespace
// (NS:released) when a waiter has marked the lease (want.lua); each Store holds one subscription to it, opened on the
// first WaitChange, and fans the messages out to the WaitChange calls
// waiting for that key. On Redis Cluster a plain PUBLISH reaches every node,
// so the subscription may sit on any of them.
//
// Expiry publishes nothing: WaitChange learns the lease's remaining time
// when it marks the lease (want.lua) and returns when that has passed.

const (
	// healthInterval is how long the subscription may stay silent before it
	// is PINGed; a second silence of that length counts as a drop.
	healthInterval = 5 * time.Second
	// Resubscription after a drop backs off between these bounds.
	minResubscribe = 50 * time.Millisecond
	maxResubscribe = 2 * time.Second
)

var errClosed = fmt.Errorf("redisstore: %w: store is closed", lease.ErrUnavailable)

type notifyState int

const (
	notStarted notifyState = iota
	starting               // SUBSCRIBE sent, not yet confirmed
	up                     // subscribed: every release from now on is seen
	down                   // dropped; resubscribing
	closed
)

type notifier struct {
	s *Store

	mu      sync.Mutex
	state   notifyState
	ready   chan struct{} // closed when the state leaves starting
	downErr error
	drops   int // times the subscription dropped, for tests that must know it did
	waiters map[string]map[chan error]struct{}
	ps      *redis.PubSub
	stop    chan struct{}
	done    chan struct{} // closed when run has returned
}

func newNotifier(s *Store) *notifier {
	return &notifier{s: s, waiters: make(map[string]map[chan error]struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// WaitChange implements lease.Notifier: it returns nil when a release of key
// has been published, when the holder's lease expires (timed by the
// server's remaining TTL for it, so a renewal makes it return early), or
// when key is free already; ctx's error when ctx ends; and an error matching
// lease.ErrUnavailable when the subscription has dropped or the store is
// closed — the lease.Client then polls, and the store resubscribes in the
// background for later calls.
//
// Release publishes only for a lease that a waiter has marked as wanted, so
// that releases nobody waits for cost no PUBLISH. Once it is listening,
// WaitChange therefore marks the lease with one script call (a write only if
// no other waiter marked it first), which also tells it whether the lease is
// still there: a release between the caller's failed Acquire and the mark
// left the key free (WaitChange returns at once), and a release after the
// mark publishes. A lease granted in between to someone else is marked
// instead, and its release wakes the waiter.
func (s *Store) WaitChange(ctx context.Context, key string) error {
	if err := lease.ValidateKey(key); err != nil {
		return fmt.Errorf("redisstore: wait: %w", err)
	}
	if err := s.refused(); err != nil {
		return err
	}
	ch, err := s.notify.register(ctx, key)
	if err != nil {
		return err
	}
	defer s.notify.unregister(key, ch)
	left, err := wantScript.Run(ctx, s.rdb, []string{s.leaseKey(key)}).Int64()
	if err != nil {
		return s.fail(ctx, "wait", key, err)
	}
	if left == 0 {
		return nil
	}
	// The server's PX expiry, counted from the script's reply; a
	// millisecond more so that the key has gone when the caller looks.
	expiry := time.NewTimer(time.Duration(left)*time.Millisecond + time.Millisecond)
	defer expiry.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-ch:
		return err
	case <-expiry.C:
		return nil
	}
}

// register adds a waiter for key once the subscription is up.
func (n *notifier) register(ctx context.Context, key string) (chan error, error) {
	n.mu.Lock()
	if n.state == notStarted {
		n.startLocked()
	}
	for n.state == starting {
		ready := n.ready
		n.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		n.mu.Lock()
	}
	defer n.mu.Unlock()
	switch n.state {
	case closed:
		return nil, errClosed
	case down:
		return nil, n.downErr
	}
	ch := make(chan error, 1)
	m := n.waiters[key]
	if m == nil {
		m = make(map[chan error]struct{})
		n.waiters[key] = m
	}
	m[ch] = struct{}{}
	return ch, nil
}

func (n *notifier) unregister(key string, ch chan error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m := n.waiters[key]; m != nil {
		delete(m, ch)
		if len(m) == 0 {
			delete(n.waiters, key)
		}
	}
}

// startLocked starts the subscription. It does no I/O itself: SUBSCRIBE
// dials and waits for the server, for as long as the connection's timeouts
// allow, and n.mu held that long would keep every WaitChange (whatever its
// context) and Close waiting too. run subscribes instead.
func (n *notifier) startLocked() {
	n.state = starting
	n.ready = make(chan struct{})
	go n.run()
}

// subscribe opens a subscription to the release channel, without n.mu held,
// and makes it the current one; it returns nil if the store has closed
// meanwhile.
func (n *notifier) subscribe() *redis.PubSub {
	ps := n.s.rdb.Subscribe(context.Background(), n.s.channel)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == closed {
		_ = ps.Close()
		return nil
	}
	n.ps = ps
	return ps
}

// run subscribes, then reads the subscription until the store closes.
// go-redis reconnects and resubscribes a PubSub after a read error by
// itself; run turns each drop into errors for the current waiters, and the
// confirmation of the resubscription back into "up".
func (n *notifier) run() {
	defer close(n.done)
	ctx := context.Background()
	ps := n.subscribe()
	if ps == nil {
		return
	}
	pinged := false
	backoff := minResubscribe
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		if n.isClosed() {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if !pinged {
					pinged = true
					if err = ps.Ping(ctx); err == nil {
						continue
					}
				} else {
					// The connection looks alive to the kernel but the server
					// no longer answers: start a fresh one.
					if ps = n.replace(ps); ps == nil {
						return
					}
				}
			}
			pinged = false
			n.setDown(err)
			select {
			case <-n.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxResubscribe)
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				n.setUp()
				backoff = minResubscribe
			}
		case *redis.Message:
			n.wake(m.Payload)
		}
	}
}

// replace closes ps and subscribes afresh; it returns nil if the store has
// closed meanwhile.
func (n *notifier) replace(ps *redis.PubSub) *redis.PubSub {
	_ = ps.Close()
	return n.subscribe()
}

func (n *notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state == closed
}

func (n *notifier) setUp() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == starting {
		close(n.ready)
	}
	if n.state != closed {
		n.state, n.downErr = up, nil
	}
}

func (n *notifier) setDown(cause error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == closed {
		return
	}
	if n.state == starting {
		close(n.ready)
	}
	n.state = down
	n.drops++
	n.downErr = fmt.Errorf("redisstore: release notifications interrupted, resubscribing: %w: %w", lease.ErrUnavailable, cause)
	n.failAllLocked(n.downErr)
}

func (n *notifier) failAllLocked(err error) {
	for key, m := range n.waiters {
		for ch := range m {
			ch <- err // buffered, and each waiter gets at most one value
		}
		delete(n.waiters, key)
	}
}

func (n *notifier) wake(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.waiters[key] {
		ch <- nil
	}
	delete(n.waiters, key)
}

func (n *notifier) close() {
	n.mu.Lock()
	if n.state == closed {
		n.mu.Unlock()
		return
	}
	started := n.state != notStarted
	if n.state == starting {
		close(n.ready)
	}
	n.state = closed
	n.failAllLocked(errClosed)
	ps := n.ps // nil while run's first SUBSCRIBE is under way: run closes that one
	n.mu.Unlock()
	close(n.stop)
	if started {
		if ps != nil {
			_ = ps.Close()
		}
		<-n.done
	}
}
