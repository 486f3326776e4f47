package leasehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehq/lease"
)

// WatchBuffer is how many events a Client's watch holds for a caller that
// has not taken them yet. The Client reads its stream as it arrives, so
// that a slow caller does not hold up the server; a caller that falls
// further behind is cut off, as a backend's watcher is.
const WatchBuffer = 1024

// HeartbeatHeader is the header of a watch stream's answer that says the
// server's heartbeat in whole milliseconds: the longest the server stays
// silent while nothing happens before it sends a comment line. A Client
// that does not find it assumes DefaultHeartbeat.
const HeartbeatHeader = "Lease-Heartbeat-Ms"

// MissedHeartbeats is how many heartbeat intervals a Client's watch lets
// pass with nothing from the server (no byte: no event, no heartbeat)
// before it takes the stream for broken, plus SilenceSlack for the
// delivery of the last one: a connection that stops delivering without
// closing (a frozen peer, a blackholed network, a hung server) is then
// told as a break within about two heartbeats, not after minutes of TCP
// keep-alive.
const MissedHeartbeats = 2

// SilenceSlack is added to MissedHeartbeats intervals before a silent
// stream counts as broken, so that a heartbeat a busy machine delays a
// little does not cut a sound stream.
const SilenceSlack = 250 * time.Millisecond

// silenceLimit is how long a watch may hear nothing for a server whose
// heartbeat is hb.
func silenceLimit(hb time.Duration) time.Duration { return MissedHeartbeats*hb + SilenceSlack }

// errSilent cuts a watch whose stream stayed silent past its limit.
var errSilent = errors.New("the stream stayed silent")

var (
	_ lease.Watcher    = (*Client)(nil)
	_ lease.KeyWatcher = (*Client)(nil)
)

// Watch implements lease.Watcher through GET /v1/watch: the current state
// (Held events, then Synced) and then each change, as the server's backend
// reports them. With a credential scoped to key prefixes the server watches
// only the keys it covers, as List does.
//
// The stream ends without an error when ctx ends or the caller stops. A
// break — the connection lost or silent (nothing, not even a heartbeat, for
// MissedHeartbeats heartbeat intervals plus SilenceSlack; the server says
// its heartbeat in HeartbeatHeader), the server shutting down or its
// backend's watch cut off, or the caller more than WatchBuffer events behind — yields
// one error matching lease.ErrUnavailable after the events received before
// it; Watch does not reconnect by itself, since what happened meanwhile is
// unknown: call it again for the current state. A refused watch yields one
// error that calling again will not cure: matching lease.ErrInvalid (a bad
// prefix), ErrUnauthorized, ErrForbidden, ErrTooManyWatchers (the
// credential's streams are at the server's bound) or errors.ErrUnsupported
// (the server's backend cannot watch). A Client that has given up a stream
// for silence takes ErrTooManyWatchers for a break, matching
// lease.ErrUnavailable too: the server may be counting that stream still.
// A 429 without the API's error body (a rate limit in front of the server)
// is a break as well, whose error has a RetryAfter() time.Duration method
// giving the answer's Retry-After, which lease.Follow pauses for. Opening the stream is retried like
// Get and bounded by WithTimeout; the stream itself is not, so an
// http.Client given with WithHTTPClient must have no Timeout, which would
// cut every stream.
func (c *Client) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return c.watch(ctx, prefix, false, lease.ValidatePrefix(prefix))
}

// WatchKey implements lease.KeyWatcher through GET /v1/watch?key=: Watch of
// exactly key, so that the changes of other keys that start with it never
// reach the stream, let alone the Client's buffer. The key must be covered
// by the credential (ErrForbidden otherwise).
func (c *Client) WatchKey(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return c.watch(ctx, key, true, lease.ValidateKey(key))
}

func (c *Client) watch(ctx context.Context, prefix string, exact bool, invalid error) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		if invalid != nil {
			yield(lease.Event{}, invalid)
			return
		}
		if ctx.Err() != nil {
			return
		}
		sctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		body, hb, err := c.openWatch(sctx, prefix, exact)
		if err != nil {
			if ctx.Err() == nil {
				yield(lease.Event{}, err)
			}
			return
		}
		items := make(chan watchItem, WatchBuffer)
		var brk error // set before items is closed
		go func() {
			defer close(items)
			defer body.Close()
			sr := newSilenceReader(body, silenceLimit(hb), func() { cancel(errSilent) })
			defer sr.stop()
			brk = readWatch(sctx, sr, prefix, exact, items)
		}()
		defer func() {
			cancel(nil)
			for range items { // the reader ends once its request is cancelled
			}
		}()
		for it := range items {
			if ctx.Err() != nil || !yield(it.ev, nil) {
				return
			}
		}
		if errors.Is(brk, errSilent) {
			c.gaveUp.Add(1) // before the caller hears of it, and watches again
		}
		if brk != nil && ctx.Err() == nil {
			yield(lease.Event{}, brk)
		}
	}
}

// silenceReader reads a stream, calling cut when a read waits limit with
// no byte: the cut ends the stream's request, so the blocked read returns.
// Only the wait inside Read counts, not a caller slow to take what was read.
type silenceReader struct {
	r     io.Reader
	limit time.Duration
	timer *time.Timer
}

func newSilenceReader(r io.Reader, limit time.Duration, cut func()) *silenceReader {
	t := time.AfterFunc(limit, cut)
	t.Stop()
	return &silenceReader{r: r, limit: limit, timer: t}
}

func (s *silenceReader) Read(p []byte) (int, error) {
	s.timer.Reset(s.limit)
	n, err := s.r.Read(p)
	s.timer.Stop()
	return n, err
}

func (s *silenceReader) stop() { s.timer.Stop() }

// heartbeatOf reads the server's heartbeat from a watch answer's headers:
// DefaultHeartbeat when it says none (a server from before the header), an
// error when it says one this client cannot use.
func heartbeatOf(h http.Header) (time.Duration, error) {
	v := h.Get(HeartbeatHeader)
	if v == "" {
		return DefaultHeartbeat, nil
	}
	ms, err := strconv.ParseUint(v, 10, 32)
	if err != nil || time.Duration(ms)*time.Millisecond < MinHeartbeat || time.Duration(ms)*time.Millisecond > MaxHeartbeat {
		return 0, fmt.Errorf("the answer's %s %q is not a heartbeat in [%v, %v]", HeartbeatHeader, v, MinHeartbeat, MaxHeartbeat)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// errUnreadableStream is a 200 answer to a watch that is not a stream this
// client can follow: an answer, not a failure to get one.
var errUnreadableStream = errors.New("the answer is not a stream this client can read")

// errWatchHeaders cuts a watch whose answer did not begin within the
// Client's timeout.
var errWatchHeaders = errors.New("no answer within the client's timeout")

// openWatch asks for the stream, retrying as Get does, and returns its body
// and the server's heartbeat.
func (c *Client) openWatch(ctx context.Context, prefix string, exact bool) (io.ReadCloser, time.Duration, error) {
	path := "/v1/watch"
	switch {
	case exact:
		path += "?key=" + url.QueryEscape(prefix)
	case prefix != "":
		path += "?prefix=" + url.QueryEscape(prefix)
	}
	backoff := c.backoff
	for attempt := 1; ; attempt++ {
		body, hb, resp, err := c.openWatchOnce(ctx, path)
		if body != nil {
			return body, hb, nil
		}
		// As Get is retried: after any failure to get an answer (the
		// request may have reached a replica that died), and after a 503;
		// not after an answer it cannot read, as Get is not.
		again := (err != nil && !errors.Is(err, errUnreadableStream)) ||
			(err == nil && resp.status == http.StatusServiceUnavailable)
		if !again || attempt >= c.attempts*len(c.endpoints) || ctx.Err() != nil {
			if err != nil {
				return nil, 0, transportError("watch", prefix, err, "")
			}
			return nil, 0, c.watchRefused(answerError("watch", prefix, resp), resp)
		}
		if !c.pause(ctx, attempt, &backoff) {
			return nil, 0, transportError("watch", prefix, context.Cause(ctx), "")
		}
	}
}

// watchRefused returns err, the refusal of a watch, as a break (matching
// lease.ErrUnavailable too) when it is a 429 that may be this Client's own
// doing: a stream it gave up for silence is one its server cannot tell from
// a sound one until the connection fails at last (minutes of TCP
// retransmissions; never behind a proxy that still takes the bytes), and
// counts against WithMaxWatchers meanwhile. Watching again, as lease.Follow
// does after a break, then gets in once the server lets the stream go,
// where a refusal would end it. A Client that gave up no stream is over the
// bound itself, and the refusal stands.
//
// A 429 without the API's error body is not this server's bound but a
// proxy's or a gateway's limit on requests: "too many, try later", which
// is a break too (a *busyError), paused after for at least the answer's
// Retry-After when it says one (lease.Follow does).
func (c *Client) watchRefused(err error, resp *response) error {
	if resp.status == http.StatusTooManyRequests && !errors.Is(err, ErrTooManyWatchers) {
		return &busyError{err: err, after: resp.retryAfter}
	}
	n := c.gaveUp.Load()
	if n == 0 || !errors.Is(err, ErrTooManyWatchers) {
		return err
	}
	return fmt.Errorf("%w: %w (this client gave up %d watch streams for silence, which the server counts until their connections fail; watch again)",
		lease.ErrUnavailable, err, n)
}

// busyError is a watch refused 429 by something in front of the server (a
// rate limit): a break, to be watched again after RetryAfter.
type busyError struct {
	err   error
	after time.Duration // 0: the answer said no Retry-After
}

func (e *busyError) Error() string {
	if e.after > 0 {
		return fmt.Sprintf("%v (busy: watch again after %v)", e.err, e.after)
	}
	return fmt.Sprintf("%v (busy: watch again later)", e.err)
}

// Unwrap matches lease.ErrUnavailable and the answer's error.
func (e *busyError) Unwrap() []error { return []error{lease.ErrUnavailable, e.err} }

// RetryAfter is how long the answer asked the client to wait before
// watching again (its Retry-After), 0 when it did not say.
func (e *busyError) RetryAfter() time.Duration { return e.after }

// maxRetryAfter bounds the Retry-After a client honours: a larger one (an
// hour, a date far ahead) is taken as this much.
const maxRetryAfter = time.Minute

// retryAfterOf reads an answer's Retry-After, delay-seconds or an HTTP
// date, at most maxRetryAfter; 0 when absent or unreadable.
func retryAfterOf(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// openWatchOnce sends one watch request: it returns the stream's body, or
// the error answer, or the failure to get either. A failure to get an
// answer, and a 503, move later requests on to the next endpoint.
func (c *Client) openWatchOnce(ctx context.Context, path string) (io.ReadCloser, time.Duration, *response, error) {
	i, base := c.endpoint()
	ended := ctx.Err() != nil
	body, hb, resp, err := c.openWatchAt(ctx, base, path)
	switch {
	case resp != nil && resp.status == http.StatusServiceUnavailable,
		err != nil && !ended && !cancelled(ctx) && !errors.Is(err, lease.ErrInvalid):
		c.failedAt(i)
	}
	return body, hb, resp, err
}

// openWatchAt is openWatchOnce to the endpoint base.
func (c *Client) openWatchAt(ctx context.Context, base, path string) (io.ReadCloser, time.Duration, *response, error) {
	// The request's context lives as long as the stream; until the answer
	// begins it is also bounded by the Client's timeout.
	rctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(c.timeout, func() { cancel(errWatchHeaders) })
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, base+path, nil)
	if err != nil {
		timer.Stop()
		cancel(nil)
		return nil, 0, nil, fmt.Errorf("%w: leasehttp: %v", lease.ErrInvalid, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	inTime := timer.Stop()
	switch {
	case err != nil:
		cancel(nil)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, 0, nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		if !inTime {
			return nil, 0, nil, errWatchHeaders
		}
		return nil, 0, nil, err
	case !inTime:
		resp.Body.Close()
		cancel(nil)
		return nil, 0, nil, errWatchHeaders
	}
	if err := c.store.check(base, resp.Header.Get(StoreHeader)); err != nil {
		resp.Body.Close()
		cancel(nil)
		return nil, 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel(nil)
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return nil, 0, nil, fmt.Errorf("reading the answer: %w", err)
		}
		return nil, 0, &response{status: resp.StatusCode, body: b, retryAfter: retryAfterOf(resp.Header, time.Now())}, nil
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		cancel(nil)
		return nil, 0, nil, fmt.Errorf("%w: its Content-Type is %q, not an event stream", errUnreadableStream, resp.Header.Get("Content-Type"))
	}
	hb, err := heartbeatOf(resp.Header)
	if err != nil {
		resp.Body.Close()
		cancel(nil)
		return nil, 0, nil, fmt.Errorf("%w: %w", errUnreadableStream, err)
	}
	return cancelBody{resp.Body, func() { cancel(nil) }}, hb, nil, nil
}

// cancelBody ends the request's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// readWatch reads the stream into items until it ends, and returns the
// break to yield after them (nil when ctx ended). Until Synced it waits for
// the caller to take each event, as the snapshot may be larger than the
// buffer; after it, a full buffer is a caller too far behind.
func readWatch(ctx context.Context, body io.Reader, prefix string, exact bool, items chan<- watchItem) error {
	sr := newSSEReader(body)
	synced := false
	for {
		msg, err := sr.next()
		if err != nil {
			if errors.Is(context.Cause(ctx), errSilent) {
				return fmt.Errorf("leasehttp: watch %s: %w: %w for %d heartbeat intervals; the connection is taken for lost",
					quoteName(prefix), lease.ErrUnavailable, errSilent, MissedHeartbeats)
			}
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the server ended the stream without saying why")
			}
			return fmt.Errorf("leasehttp: watch %s: %w: %w", quoteName(prefix), lease.ErrUnavailable, err)
		}
		ev, err := decodeWatchEvent(prefix, exact, msg)
		if err != nil {
			return err
		}
		if !synced {
			select {
			case items <- watchItem{ev: ev}:
			case <-ctx.Done():
				return nil
			}
			synced = ev.Kind == lease.Synced
			continue
		}
		select {
		case items <- watchItem{ev: ev}:
		default:
			return fmt.Errorf("leasehttp: watch %s: %w: the caller fell more than %d events behind; watch again", quoteName(prefix), lease.ErrUnavailable, WatchBuffer)
		}
	}
}

// decodeWatchEvent turns one message of the stream into an event, or into
// the error that ends the watch: the server's end event, or a message
// this client cannot read (which would leave its picture incomplete).
func decodeWatchEvent(prefix string, exact bool, msg sseMessage) (lease.Event, error) {
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("leasehttp: watch %s: %w: malformed stream: %s", quoteName(prefix), lease.ErrUnavailable, fmt.Sprintf(format, args...))
	}
	if msg.event == EndEvent || msg.event == "error" { // "error": a server from before EndEvent
		body, _ := readError([]byte(msg.data)) // unreadable: zero
		k, ok := kindByCode(body.code)
		if !ok {
			k = kindUnavailable
		}
		return lease.Event{}, fmt.Errorf("leasehttp: watch %s: the server ended the stream (%s): %s: %w",
			quoteName(prefix), k.code, body.message, k.err)
	}
	kind, err := lease.ParseEventKind(msg.event)
	if err != nil {
		return lease.Event{}, malformed("event %q is not one this client knows", msg.event)
	}
	if kind == lease.Synced {
		return lease.Event{Kind: lease.Synced}, nil
	}
	l, err := readLease([]byte(msg.data))
	if err != nil {
		return lease.Event{}, malformed("%s event: %v", kind, err)
	}
	if !strings.HasPrefix(l.Key, prefix) {
		return lease.Event{}, malformed("%s event of %s, outside the prefix", kind, quoteName(l.Key))
	}
	if exact && l.Key != prefix {
		return lease.Event{}, malformed("%s event of %s, another key than the one watched", kind, quoteName(l.Key))
	}
	l.ID = lease.ID{} // never expected, never passed on (I4)
	return lease.Event{Kind: kind, Lease: l}, nil
}
