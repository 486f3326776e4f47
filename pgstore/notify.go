package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehq/lease"
)

// WaitChange implements lease.Notifier with LISTEN/NOTIFY. It returns nil
// when key is released (Release notifies on commit), when the holder's lease
// expires (timed on the server's clock: the server says how long is left),
// or when key is free already; ctx's error when ctx ends; and an error
// matching lease.ErrUnavailable when notifications are not working — the
// listening connection broke, so a release may have gone unheard. The
// listener then reconnects in the background, and lease.Client polls
// meanwhile.
func (s *Store) WaitChange(ctx context.Context, key string) error {
	if err := lease.ValidateKey(key); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	w, err := s.notify.register(ctx, key)
	if err != nil {
		return err
	}
	defer s.notify.unregister(key, w)
	// Registered first, then look (and mark the generation wanted): a
	// release committed after this statement sees the mark and notifies,
	// one committed before it shows here as a free key.
	var left int64 // µs
	var setting string
	err = s.pool.QueryRow(ctx, s.q.wait, key).Scan(&left, &setting)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return s.fail(ctx, fmt.Sprintf("waiting for %q", key), err)
	}
	t := time.NewTimer(time.Duration(left)*time.Microsecond + time.Millisecond)
	defer t.Stop()
	select {
	case err := <-w:
		return err
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notifier is a Store's one listening connection, started on the first
// WaitChange, fanning notifications out to the WaitChange calls of their key.
type notifier struct {
	s      *Store
	ctx    context.Context // ends the listener
	cancel context.CancelFunc
	done   chan struct{} // closed when the listener goroutine has exited
	pid    atomic.Uint32 // backend PID of the listening connection, 0 if none

	mu      sync.Mutex
	started bool
	closed  bool
	tried   chan struct{} // closed when the first connection attempt ended
	triedOK bool          // tried is closed
	up      bool          // LISTEN is in effect on a live connection
	downErr error         // why not up
	waiters map[string]map[chan error]struct{}
}

func newNotifier(s *Store) *notifier {
	ctx, cancel := context.WithCancel(context.Background())
	return &notifier{
		s: s, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		tried:   make(chan struct{}),
		downErr: errors.New("listener not started"),
		waiters: make(map[string]map[chan error]struct{}),
	}
}

// register adds a waiter for key, starting the listener if need be. It fails
// at once if the listener is down, so callers poll instead.
func (n *notifier) register(ctx context.Context, key string) (chan error, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("pgstore: %w: %w", lease.ErrUnavailable, errClosed)
	}
	if !n.started {
		n.started = true
		go n.run()
	}
	tried := n.tried
	n.mu.Unlock()
	select {
	case <-tried:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.up {
		return nil, fmt.Errorf("pgstore: notifications unavailable: %w: %w", lease.ErrUnavailable, n.downErr)
	}
	w := make(chan error, 1)
	if n.waiters[key] == nil {
		n.waiters[key] = make(map[chan error]struct{})
	}
	n.waiters[key][w] = struct{}{}
	return w, nil
}

func (n *notifier) unregister(key string, w chan error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if set := n.waiters[key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(n.waiters, key)
		}
	}
}

// waiting reports how many WaitChange calls wait for key.
func (n *notifier) waiting(key string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.waiters[key])
}

func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	started := n.started
	n.mu.Unlock()
	n.cancel()
	if started {
		<-n.done
	}
}

// run keeps a connection listening until the Store is closed, reconnecting
// with backoff when it breaks.
func (n *notifier) run() {
	defer close(n.done)
	backoff := 10 * time.Millisecond
	for {
		conn, err := n.connect()
		if err == nil {
			backoff = 10 * time.Millisecond
			err = n.listen(conn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(ctx)
			cancel()
		}
		if n.ctx.Err() != nil {
			err = errClosed
		}
		n.down(err)
		if n.ctx.Err() != nil {
			return
		}
		select {
		case <-n.ctx.Done():
			n.down(errClosed)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// connect takes a connection out of the pool for good (so the pool's size
// and lifetime rules no longer apply to it) and makes it listen.
func (n *notifier) connect() (*pgx.Conn, error) {
	pc, err := n.s.pool.Acquire(n.ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(n.ctx, "LISTEN "+pgx.Identifier{n.s.n.channel}.Sanitize()); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
		return nil, err
	}
	return conn, nil
}

// listen marks the listener up and delivers notifications until the
// connection fails or the Store closes.
func (n *notifier) listen(conn *pgx.Conn) error {
	n.mu.Lock()
	n.up = true
	n.markTriedLocked()
	n.mu.Unlock()
	n.pid.Store(conn.PgConn().PID())
	defer n.pid.Store(0)
	for {
		msg, err := nextNotification(n.ctx, conn)
		if err != nil {
			return err
		}
		n.mu.Lock()
		for w := range n.waiters[msg.Payload] {
			w <- nil // buffered, and each waiter is woken once: never blocks
		}
		delete(n.waiters, msg.Payload)
		n.mu.Unlock()
	}
}

// listenHealth is how long a listening connection may stay silent before
// it is pinged; a ping not answered within it counts as a drop, as
// redisstore's subscription does. Over a link that drops everything
// without closing, a listener would otherwise wait for good, and the
// watches and waits it serves would go on with an old picture.
const listenHealth = 5 * time.Second

// nextNotification waits for conn's next notification until ctx ends,
// pinging the connection after each listenHealth of silence; a ping that
// fails or takes longer ends it with the error.
func nextNotification(ctx context.Context, conn *pgx.Conn) (*pgconn.Notification, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, listenHealth)
		msg, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil || ctx.Err() != nil || !pgconn.Timeout(err) {
			return msg, err
		}
		pctx, cancel := context.WithTimeout(ctx, listenHealth)
		_, err = conn.Exec(pctx, "SELECT 1")
		cancel()
		if err != nil {
			return nil, fmt.Errorf("silent for %v, and a ping failed: %w", listenHealth, err)
		}
	}
}

// down marks the listener down and fails every waiter: notifications may
// have been missed.
func (n *notifier) down(cause error) {
	err := fmt.Errorf("pgstore: notifications lost: %w: %w", lease.ErrUnavailable, cause)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.up, n.downErr = false, cause
	n.markTriedLocked()
	for key, set := range n.waiters {
		for w := range set {
			w <- err
		}
		delete(n.waiters, key)
	}
}

func (n *notifier) markTriedLocked() {
	if !n.triedOK {
		n.triedOK = true
		close(n.tried)
	}
}
