package leasehttp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// hangUp ends a waiting acquire early without losing its answer.
//
// HTTP/1.1 has one way to tell a server that a request is no longer wanted:
// hang up. Closing the connection also throws away the answer, and a server
// that granted the lease just before it saw the hang-up (a release handed
// it the key at that moment) answers nobody: the lease is then held by
// nobody until its TTL. So when the caller's context ends after the
// request is sent, the client shuts down only its own side of the
// connection (a TCP half-close, or TLS's close_notify) and keeps reading.
// The server sees the end of the request's input and ends the wait as for
// a client that went away: a lease it grants from then on it releases
// itself, answering 499. An answer it had already decided reaches the
// client, which gives a granted lease back (see Client.waitLeft).
//
// The answer is awaited for at most grace after the hang-up. Past it, and
// when the connection cannot be half-closed (HTTP/2, where other requests
// share it; a transport that hides it), the request is cancelled outright
// and the outcome is unknown, as it always was before.
type hangUp struct {
	mu       sync.Mutex
	cancel   context.CancelCauseFunc // cancels the request outright
	grace    time.Duration
	conn     net.Conn // the request's connection, once the transport has one
	sent     bool     // the request is written to conn
	cause    error    // why the caller's context ended; nil while it has not
	hung     bool     // our side of conn is shut down
	finished bool
	timer    *time.Timer
	stop     func() bool // stops the watch on the caller's context
}

// newHangUp returns the context to send a waiting acquire under: it keeps
// ctx's values but not its end, which hangs up instead.
func newHangUp(ctx context.Context, grace time.Duration) (context.Context, *hangUp) {
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	h := &hangUp{cancel: cancel, grace: grace}
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		GotConn:      h.gotConn,
		WroteRequest: h.wroteRequest,
	})
	h.stop = context.AfterFunc(ctx, func() { h.ended(context.Cause(ctx)) })
	return rctx, h
}

func (h *hangUp) gotConn(info httptrace.GotConnInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conn, h.sent = info.Conn, false
}

func (h *hangUp) wroteRequest(info httptrace.WroteRequestInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if info.Err != nil || h.conn == nil {
		return // the request fails anyway
	}
	h.sent = true
	if h.cause != nil && !h.hung {
		h.hangUpLocked()
	}
}

// ended runs when the caller's context ends.
func (h *hangUp) ended(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished {
		return
	}
	h.cause = cause
	switch {
	case h.conn == nil:
		h.cancel(cause) // nothing sent yet
		return
	case h.sent:
		h.hangUpLocked()
	}
	// Else the request is being written: wroteRequest hangs up.
	h.timer = time.AfterFunc(h.grace, func() { h.cancel(cause) })
}

func (h *hangUp) hangUpLocked() {
	cw, ok := h.conn.(interface{ CloseWrite() error })
	if tc, isTLS := h.conn.(*tls.Conn); isTLS && tc.ConnectionState().NegotiatedProtocol == "h2" {
		ok = false // the connection carries other requests too
	}
	if !ok || cw.CloseWrite() != nil {
		h.cancel(h.cause)
		return
	}
	h.hung = true
}

// finish ends the watch on the caller's context once the request is over,
// and reports whether the client hung up on it (its answer, if any, is then
// the outcome of a wait the caller gave up).
func (h *hangUp) finish() bool {
	h.stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finished = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.cancel(nil)
	return h.hung
}

// errGiveBackFailed is a lease granted to a wait given up whose release
// failed: it is held until its TTL.
var errGiveBackFailed = errors.New("giving it back failed")

// errWaitLeft is a wait that ended because its caller gave it up, the
// server said so, and no lease is held for the caller.
var errWaitLeft = errors.New("the wait was given up")

// waitLeft reads the answer to a waiting acquire the client hung up on:
// the server's 499 says it granted nothing or released what it granted; a
// lease it had granted before it saw the hang-up is given back here, so
// that the next waiter gets the key at once. The caller holds nothing in
// either case: its wait ended.
func (c *Client) waitLeft(ctx context.Context, key string, resp *response) (lease.Lease, error) {
	switch resp.status {
	case http.StatusOK:
		l, err := decodeLease("acquire", key, resp)
		if err != nil {
			return lease.Lease{}, fmt.Errorf("%w (outcome unknown: the lease may have been granted and will expire after its TTL)", err)
		}
		if err := c.Release(context.WithoutCancel(ctx), l); err != nil && !errors.Is(err, lease.ErrNotHeld) {
			return lease.Lease{}, fmt.Errorf("leasehttp: acquire %s: %w; granted (token %d) as it was given up, and %w, so it expires after its TTL: %w",
				quoteName(key), errWaitLeft, l.Token, errGiveBackFailed, err)
		}
		return lease.Lease{}, fmt.Errorf("leasehttp: acquire %s: %w; granted (token %d) as it was, and given back at once", quoteName(key), errWaitLeft, l.Token)
	case statusClientGone:
		return lease.Lease{}, fmt.Errorf("leasehttp: acquire %s: %w; the server holds nothing for it", quoteName(key), errWaitLeft)
	}
	return lease.Lease{}, answerError("acquire", key, resp)
}

// acquireWaiting sends a waiting acquire and returns its outcome, or, as
// soon as ctx ends, ctx's error: a caller that gives up a wait does not
// wait for a slow or hung server to confirm it. The request goes on in the
// background, where the hang-up ends it (hangUp) and a lease the server
// granted anyway is given back (waitLeft), within the Client's timeout.
// It also returns the base URL of the server the last attempt went to.
// A wait given up while its server answered held (its max wait reached
// before it saw the hang-up) is passed to leave, if not nil, with the
// server's base URL, as the server may keep it in line for the grace.
func (c *Client) acquireWaiting(ctx context.Context, key string, body []byte, wait time.Duration, leave func(base string)) (lease.Lease, string, error) {
	rctx, h := newHangUp(ctx, c.timeout)
	type outcome struct {
		l    lease.Lease
		err  error
		base string
	}
	done := make(chan outcome, 1)
	var (
		mu        sync.Mutex
		abandoned bool
	)
	stop := c.left.start(func() { h.cancel(errClientClosed) })
	go func() {
		defer stop()
		var base string
		resp, err, _ := c.retry(ctx, false, func() (*response, error) {
			var i int
			i, base = c.endpoint()
			return c.roundTripAt(rctx, i, base, http.MethodPost, keyPath(key, "/acquire"), body, c.timeout+wait)
		})
		o := outcome{base: base}
		hung := h.finish()
		if hung && err == nil {
			o.l, o.err = c.waitLeft(ctx, key, resp)
		} else {
			o.l, o.err = acquireAnswer(key, resp, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if (hung || abandoned) && leave != nil && errors.Is(o.err, lease.ErrHeld) {
			leave(base)
		}
		if abandoned {
			known := errors.Is(o.err, lease.ErrHeld) || errors.Is(o.err, errWaitLeft) && !errors.Is(o.err, errGiveBackFailed)
			if o.err == nil { // granted just before the hang-up: nobody takes it
				rerr := c.Release(context.WithoutCancel(ctx), o.l)
				known = rerr == nil || errors.Is(rerr, lease.ErrNotHeld)
			}
			if !known {
				c.left.unknownOutcome()
			}
			return
		}
		done <- o
	}()
	select {
	case o := <-done:
		return o.l, o.base, o.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case o := <-done: // it finished as ctx ended: its outcome stands
		return o.l, o.base, o.err
	default:
	}
	abandoned = true
	return lease.Lease{}, "", fmt.Errorf("%w; %w", context.Cause(ctx), errLeftBehind)
}

// leaveLine ends, in the background, the wait that ticket may keep in
// line at the server base between two of its requests (an answer that
// reached its max wait, which the server holds the ticket for its grace
// after, then lost on its way back; a wait given up before its next
// request): one more request with the ticket, a wait of 1 ms and last,
// takes the wait over and leaves the line at its end, so that the next
// waiter is served at once rather than after the grace. A lease granted to
// the wait meanwhile comes back with it and is released. It ends within
// the Client's timeout; Close cuts it short.
func (c *Client) leaveLine(ctx context.Context, base, key, owner string, ttl time.Duration, ticket lease.ID) {
	body := appendAcquireRequest(nil, owner, ttl, time.Millisecond, ticket, true)
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	stop := c.left.start(cancel)
	i := slices.Index(c.endpoints, base)
	if i < 0 {
		cancel()
		stop()
		return
	}
	go func() {
		defer stop()
		defer cancel()
		resp, err := c.roundTripAt(lctx, i, base, http.MethodPost, keyPath(key, "/acquire"), body, c.timeout)
		if err != nil {
			return // the server is gone too: the grace ends the wait
		}
		defer resp.release()
		if resp.status != http.StatusOK {
			return
		}
		if l, err := decodeLease("acquire", key, resp); err == nil {
			_ = c.Release(lctx, l)
		}
	}()
}

// errLeftBehind says what happens to a wait its caller gave up.
var errLeftBehind = errors.New("the wait ends in the background, where a lease granted as it was given up is given back (or, if no answer comes, expires after its TTL)")

// errClientClosed ends the background work of a closed Client.
var errClientClosed = fmt.Errorf("%w: leasehttp: the client is closed", lease.ErrUnavailable)

// givenUp is a Client's background work on waits its callers gave up:
// each ends within the Client's timeout by itself, and Close cuts short the
// work running then (a lease granted to one of them expires after its TTL).
type givenUp struct {
	mu      sync.Mutex
	next    int
	cancels map[int]func()
	idle    chan struct{} // closed once no work runs; nil: none ran yet
	unknown int           // given-up acquires that ended not knowing whether a lease is held for them
}

// unknownOutcome counts a given-up acquire that ended without knowing
// whether a lease is held for it (no answer; a grant not given back).
func (g *givenUp) unknownOutcome() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unknown++
}

// errOutcomeUnknown is AwaitGivenUp's word that some given-up acquire
// ended without knowing whether a lease is held for it.
var errOutcomeUnknown = fmt.Errorf("%w: leasehttp: a given-up acquire ended without an answer, or its grant could not be given back: a lease granted to it, if any, expires after its TTL", lease.ErrUnavailable)

// start registers work that cancel cuts short; done unregisters it.
func (g *givenUp) start(cancel func()) (done func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cancels == nil {
		g.cancels = map[int]func(){}
	}
	if len(g.cancels) == 0 {
		g.idle = make(chan struct{})
	}
	id := g.next
	g.next++
	g.cancels[id] = cancel
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, ok := g.cancels[id]; !ok {
			return
		}
		delete(g.cancels, id)
		if len(g.cancels) == 0 {
			close(g.idle)
		}
	}
}

// wait returns once no work runs, or ctx's error when ctx ends first.
func (g *givenUp) wait(ctx context.Context) error {
	g.mu.Lock()
	idle := g.idle
	g.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unknown > 0 {
		return errOutcomeUnknown
	}
	return nil
}

// AwaitGivenUp waits until this Client's acquires have ended, those its
// callers gave up (AcquireWait, Acquire) too, in the background: the server told
// and its last answer read, a lease granted as the wait ended given back,
// a wait the server kept in line taken out of it. It returns ctx's error
// when ctx ends first, and an error matching lease.ErrUnavailable when a
// given-up acquire (of this Client's life) ended without an answer or
// could not give its grant back: what became of a lease granted then is
// unknown (it expires after its TTL). For a process about to exit, which
// would otherwise cut that work short.
func (c *Client) AwaitGivenUp(ctx context.Context) error { return c.left.wait(ctx) }

// close cuts the work running now short.
func (g *givenUp) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cancel := range g.cancels {
		cancel()
	}
}
