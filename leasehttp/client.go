package leasehttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/wait"
)

// Client is a lease.Backend that talks to a leasehttp Server, so the root
// lease.Client (waiting, renewal, loss) works across the network. It also
// implements lease.WaitAcquirer through wait_ms, so waiting is the server's
// FIFO wait rather than polling, and lease.Watcher through GET /v1/watch
// (watch_client.go). A Client is safe for concurrent use.
//
// A Client may be given several endpoints, replicas of one service (lease
// serve processes over one etcd cluster): it sends every request to the
// endpoint that last worked, and moves on to the next one in the list when
// a request there gets no answer or a 503. The request itself is sent
// again, to the next endpoint, only where the retry rules allow.
//
// Retries (see the package documentation): Get and List are retried after
// any failure to get an answer; Renew too, since renewing twice with the
// same token and ID is harmless; Release too, but a not_held answer after a
// first attempt of unknown outcome says so in its message; Acquire only if
// the request provably never left (the connection could not be made).
type Client struct {
	// endpoints are scheme://host[:port][/path], no trailing slash, in the
	// order given; cur is the index of the one requests go to (sticky).
	endpoints []string
	cur       atomic.Uint32
	clientConfig
	attempts int
	backoff  time.Duration
	left     givenUp   // waits the callers gave up, ending in the background
	store    storeSeen // the store the first answer named (StoreHeader)
	// gaveUp counts the watch streams this Client gave up for silence,
	// which their servers may count against WithMaxWatchers until their
	// connections fail (watchRefused).
	gaveUp atomic.Int64
}

// clientConfig is what ClientOptions set, before the Client exists.
type clientConfig struct {
	hc        *http.Client
	ownHC     bool
	auth      string // "Bearer …" or ""
	timeout   time.Duration
	waitChunk time.Duration
}

var (
	_ lease.Backend      = (*Client)(nil)
	_ lease.WaitAcquirer = (*Client)(nil)
	_ lease.BatchRenewer = (*Client)(nil)
)

// ClientOption configures a Client in NewClient.
type ClientOption func(*clientConfig) error

// WithAuthToken sends token as "Authorization: Bearer token" with every
// request.
func WithAuthToken(token string) ClientOption {
	return func(c *clientConfig) error {
		if err := (Credential{Token: token, Prefixes: []string{AllKeys}}).validate(); err != nil {
			return fmt.Errorf("%w: leasehttp: auth token: %v", lease.ErrInvalid, err)
		}
		c.auth = "Bearer " + token
		return nil
	}
}

// WithHTTPClient sends requests through hc (for TLS settings, proxies, a
// test server's client). hc must not have a Timeout shorter than the waits
// asked for; the Client bounds each request itself (WithTimeout). The
// default is a client of its own whose idle connections Close closes.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *clientConfig) error {
		if hc == nil {
			return fmt.Errorf("%w: leasehttp: http client is nil", lease.ErrInvalid)
		}
		c.hc, c.ownHC = hc, false
		return nil
	}
}

// WithTimeout bounds each request, not counting the time a long poll is
// asked to wait. The default is 10 s. With several servers listed, a
// renewal unanswered after a third of its TTL is also sent to the next
// (see renewRetry).
func WithTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: leasehttp: timeout %v is not positive", lease.ErrInvalid, d)
		}
		c.timeout = d
		return nil
	}
}

// WithWaitChunk sets the longest wait_ms AcquireWait asks for in one
// request; it asks again until its context ends. A server caps the wait at
// its own maximum (DefaultMaxWait unless configured). Every request of one
// wait carries its ticket, so a server that keeps tickets (WithWaitGrace)
// keeps the wait's place in line from one request to the next; on one that
// does not, each new request joins the back of the line, and chunks shorter
// than the server's maximum cost fairness. The default is DefaultMaxWait.
func WithWaitChunk(d time.Duration) ClientOption {
	return func(c *clientConfig) error {
		if d < 10*time.Millisecond || d > MaxMaxWait {
			return fmt.Errorf("%w: leasehttp: wait chunk %v is outside [10ms, %v]", lease.ErrInvalid, d, MaxMaxWait)
		}
		c.waitChunk = d
		return nil
	}
}

// NewClient returns a Client for the server at baseURL ("http://host:port",
// optionally with a path prefix the server is mounted under), or for
// several servers of one service, their URLs separated by commas
// ("http://a:7420, http://b:7420"; spaces around a URL are ignored, a comma
// inside a path is written %2C).
// Requests go to the first until it fails, then to the next (see Client).
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	var endpoints []string
	for raw := range strings.SplitSeq(baseURL, ",") {
		ep, err := parseEndpoint(raw)
		if err != nil {
			return nil, err
		}
		if slices.Contains(endpoints, ep) {
			return nil, fmt.Errorf("%w: leasehttp: server URL %q is listed twice", lease.ErrInvalid, raw)
		}
		endpoints = append(endpoints, ep)
	}
	if len(endpoints) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: leasehttp: %d server URLs", lease.ErrInvalid, len(endpoints))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many goroutines share one Client; the default of 2 idle connections
	// per host would make most of them dial anew for every request.
	tr.MaxIdleConnsPerHost = 256
	// Answers are a few hundred bytes of JSON; asking for gzip only adds a
	// header to every request.
	tr.DisableCompression = true
	c := &Client{
		endpoints: endpoints,
		clientConfig: clientConfig{
			hc:        &http.Client{Transport: tr},
			ownHC:     true,
			timeout:   10 * time.Second,
			waitChunk: DefaultMaxWait,
		},
		attempts: 3,
		backoff:  25 * time.Millisecond,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: leasehttp: nil option", lease.ErrInvalid)
		}
		if err := o(&c.clientConfig); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseEndpoint checks one server URL and returns it without a trailing
// slash.
func parseEndpoint(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("%w: leasehttp: server URL is empty (two commas in a row, or one at an end?)", lease.ErrInvalid)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: leasehttp: server URL: %v", lease.ErrInvalid, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w: leasehttp: server URL %q: scheme must be http or https", lease.ErrInvalid, raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: leasehttp: server URL %q: want scheme://host[:port][/path] without user, query or fragment", lease.ErrInvalid, raw)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"), nil
}

// Endpoints returns the servers the Client was given, in order.
func (c *Client) Endpoints() []string { return slices.Clone(c.endpoints) }

// endpoint returns the endpoint requests go to now, and its index.
func (c *Client) endpoint() (int, string) {
	i := int(c.cur.Load())
	return i, c.endpoints[i]
}

// failedAt moves requests on from endpoint i to the next one, unless
// another request already did: several requests failing on one endpoint
// at once move on by one, not by as many.
func (c *Client) failedAt(i int) {
	if len(c.endpoints) > 1 {
		c.cur.CompareAndSwap(uint32(i), uint32((i+1)%len(c.endpoints)))
	}
}

// Close closes the idle connections of the Client's own HTTP client (not
// one given with WithHTTPClient), and cuts short the waits its callers gave
// up that are still ending in the background (AcquireWait): a lease granted
// to one of them then expires after its TTL. It always returns nil.
func (c *Client) Close() error {
	c.left.close()
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// keyPath returns the path of key's resource, followed by op ("/acquire",
// say, or ""). A key that is "." or ".." has its dots escaped: ServeMux
// would otherwise clean the segment away.
func keyPath(key, op string) string {
	seg := url.PathEscape(key)
	if key == "." || key == ".." {
		seg = strings.ReplaceAll(seg, ".", "%2E")
	}
	return "/v1/leases/" + seg + op
}

// response is an answer with its body read.
type response struct {
	status     int
	body       []byte
	buf        *[]byte       // holds body, pooled
	retryAfter time.Duration // a watch refusal's Retry-After (watchRefused)
}

// release gives the body back to the pool; nothing may use it after. An
// answer not released is left to the garbage collector.
func (r *response) release() {
	if r.buf != nil {
		putBuf(r.buf)
		r.buf, r.body = nil, nil
	}
}

// maxResponseBytes bounds what the client reads of one answer; a list of
// many leases is the largest.
const maxResponseBytes = 64 << 20

// errNotSent marks a transport failure before the request could leave: the
// connection could not be made, so the server saw nothing.
var errNotSent = errors.New("leasehttp: request not sent")

// roundTrip sends one request with body, JSON (nil: none), and reads the
// answer into a pooled buffer, which the caller may give back
// (response.release) once done with it, giving up after timeout (the
// Client's, with a long poll's wait on top).
// A transport error wraps errNotSent when the server cannot have seen the
// request.
// A failure to get an answer, and a 503, move later requests on to the next
// endpoint, as does the caller's deadline passing before the answer came;
// the caller cancelling its context says nothing about the endpoint, and
// does not (cancelled).
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte, timeout time.Duration) (*response, error) {
	i, base := c.endpoint()
	return c.roundTripAt(ctx, i, base, method, path, body, timeout)
}

// roundTripAt is roundTrip to endpoint i, base.
func (c *Client) roundTripAt(ctx context.Context, i int, base, method, path string, body []byte, timeout time.Duration) (*response, error) {
	ended := ctx.Err() != nil
	resp, err := c.roundTripTo(ctx, base, method, path, body, timeout)
	switch {
	case err == nil && resp.status == http.StatusServiceUnavailable,
		err != nil && !ended && !cancelled(ctx) && !errors.Is(err, lease.ErrInvalid):
		c.failedAt(i)
	}
	return resp, err
}

// cancelled reports whether ctx was cancelled, which says nothing about
// the server its request went to. A deadline that passed while the
// request waited for its answer is a timeout, as the Client's own is: the
// server did not answer in time. (A caller bounding its requests by less
// than the Client's timeout, as a semaphore bounds the release of a slot
// by its TTL, otherwise stayed on a replica that takes requests and never
// answers them, as one cut from etcd by a silent link does.)
func cancelled(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// roundTripTo is roundTrip to the endpoint base.
func (c *Client) roundTripTo(ctx context.Context, base, method, path string, body []byte, timeout time.Duration) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: leasehttp: %v", lease.ErrInvalid, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if path == renewBatchPath {
		// A renewed lease answered with only its TTL and expiry: the
		// rest is the request's (readRenewAnswer). A server from before
		// the minimal answer ignores this and answers in full.
		req.Header.Set("Prefer", "return=minimal")
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("%w: %w", errNotSent, err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if err := c.store.check(base, resp.Header.Get(StoreHeader)); err != nil {
		return nil, err
	}
	buf := getBuf()
	b, err := readBodyInto(*buf, io.LimitReader(resp.Body, maxResponseBytes+1), resp.ContentLength, 64<<10)
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(b) > maxResponseBytes {
		return nil, fmt.Errorf("answer larger than %d bytes", maxResponseBytes)
	}
	*buf = b
	return &response{status: resp.StatusCode, body: b, buf: buf}, nil
}

// retry sends a request up to c.attempts times to each endpoint. A request
// that provably never left is always tried again; one whose outcome is
// unknown (the answer was lost, or the server answered 503) only if
// retryUnknown. Each attempt goes to the endpoint roundTrip picks, which a
// failure moves on: the next attempt goes to the next endpoint at once, and
// only after every endpoint has failed once more does retry back off. It
// reports whether an attempt before the last had an unknown outcome.
func (c *Client) retry(ctx context.Context, retryUnknown bool, send func() (*response, error)) (resp *response, err error, uncertain bool) {
	backoff := c.backoff
	for attempt := 1; ; attempt++ {
		resp, err = send()
		var again bool
		switch {
		case err == nil:
			again = retryUnknown && resp.status == http.StatusServiceUnavailable
		case errors.Is(err, errNotSent):
			again = true
		default:
			again = retryUnknown
		}
		if !again || attempt >= c.attempts*len(c.endpoints) || ctx.Err() != nil {
			return resp, err, uncertain
		}
		if !errors.Is(err, errNotSent) {
			uncertain = true
		}
		if !c.pause(ctx, attempt, &backoff) {
			return resp, err, uncertain
		}
		if resp != nil {
			resp.release() // a 503 asked again: its buffer goes back to the pool
		}
	}
}

// pause waits before attempt+1: not at all while some endpoint has not yet
// been tried in this round, else *backoff, which it then quadruples. It
// returns false if ctx ended first.
func (c *Client) pause(ctx context.Context, attempt int, backoff *time.Duration) bool {
	if attempt%len(c.endpoints) != 0 {
		return true
	}
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-t.C:
		*backoff *= 4
		return true
	case <-ctx.Done():
		return false
	}
}

// transportError wraps a failure to get an answer so that it matches
// lease.ErrUnavailable (and still the underlying error, e.g. a context's).
// outcome, if not empty, says in parentheses what became of the request.
func transportError(op, key string, err error, outcome string) error {
	return &unavailableError{op: op, key: key, outcome: outcome, err: err}
}

// unavailableError is a failure to get an answer. Its message says each
// thing once: "leasehttp: get "k": backend unavailable (request not sent
// to http://host:port): dial tcp …: connection refused", where wrapping
// each layer's own message would repeat "lease:", "leasehttp:" and the
// operation (net/http's *url.Error names the method and URL again).
type unavailableError struct {
	op, key, outcome string
	err              error
}

func (e *unavailableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leasehttp: %s %s: backend unavailable%s", e.op, quoteName(e.key), e.outcome)
	cause, server := e.err, ""
	var ue *url.Error
	if errors.As(cause, &ue) {
		if u, err := url.Parse(ue.URL); err == nil {
			server = u.Scheme + "://" + u.Host
		}
		cause = ue.Err
	}
	notSent := errors.Is(e.err, errNotSent)
	switch {
	case notSent && e.outcome == "" && server != "":
		fmt.Fprintf(&b, " (request not sent to %s)", server)
	case notSent && e.outcome == "":
		b.WriteString(" (request not sent)")
	case server != "":
		fmt.Fprintf(&b, " (server %s)", server)
	}
	if cause != nil {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(cause.Error(), errNotSent.Error()+": "))
	}
	return b.String()
}

// Unwrap matches lease.ErrUnavailable and the underlying error.
func (e *unavailableError) Unwrap() []error { return []error{lease.ErrUnavailable, e.err} }

// answerError turns a non-200 answer into an error through the error table:
// a held answer becomes a *lease.HeldError, the others wrap their sentinel.
func answerError(op, key string, resp *response) error {
	body, _ := readError(resp.body) // not the API's error body (a proxy's page): zero
	k, ok := kindByCode(body.code)
	if !ok {
		k, ok = kindByStatus(resp.status)
	}
	msg := body.message
	if msg == "" {
		msg = strings.TrimSpace(string(resp.body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
	}
	if !ok {
		return fmt.Errorf("leasehttp: %s %s: unexpected HTTP %d: %s", op, quoteName(key), resp.status, msg)
	}
	if k.code == "held" {
		he := &lease.HeldError{Key: key}
		if h := body.holder; h != nil {
			he.Owner, he.Token, he.Expires = h.Owner, h.Token, h.Expires
		}
		return he
	}
	return &remoteError{kind: k, op: op, key: key, status: resp.status, msg: msg}
}

// remoteError is an error answer from the server. It matches the sentinel
// of its code (lease.ErrNotHeld, ErrUnauthorized, …).
type remoteError struct {
	kind   errorKind
	op     string
	key    string
	status int
	msg    string
}

func (e *remoteError) Error() string {
	return fmt.Sprintf("leasehttp: %s %s: server answered %s (HTTP %d): %s", e.op, quoteName(e.key), e.kind.code, e.status, e.msg)
}

func (e *remoteError) Unwrap() error { return e.kind.err }

// decodeLease reads a lease answer, which must be on key: a lease on
// another key is a malformed answer, as a result of RenewBatch's is.
func decodeLease(op, key string, resp *response) (lease.Lease, error) {
	l, err := readLease(resp.body)
	if err == nil && l.Key != key {
		err = fmt.Errorf("the answer is for %s", quoteName(l.Key))
	}
	if err != nil {
		return lease.Lease{}, fmt.Errorf("leasehttp: %s %s: %w: malformed answer: %v", op, quoteName(key), lease.ErrUnavailable, err)
	}
	return l, nil
}

// ttlMillis is ttl in whole milliseconds, rounded up: the API counts in
// milliseconds, and a lease a little longer than asked is safe where a
// shorter one would let the holder believe it holds the lease after the
// server has given it away.
func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// Acquire implements lease.Backend. It is retried only if the request
// provably never reached the server. If the answer is lost, it returns an
// error matching lease.ErrUnavailable that says the outcome is unknown: the
// server may have granted the lease, which then expires after its TTL.
// When ctx ends first it returns at once, and the request ends in the
// background as a given-up AcquireWait's does: a lease the server grants
// meanwhile is released, by the server or by the Client.
func (c *Client) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	return c.acquire(ctx, key, owner, ttl, 0, lease.ID{}, false)
}

func (c *Client) acquire(ctx context.Context, key, owner string, ttl, wait time.Duration, ticket lease.ID, last bool) (lease.Lease, error) {
	l, _, err := c.acquireAt(ctx, key, owner, ttl, wait, ticket, last)
	return l, err
}

// acquireAt is acquire that also returns the base URL of the server its
// last attempt went to.
func (c *Client) acquireAt(ctx context.Context, key, owner string, ttl, wait time.Duration, ticket lease.ID, last bool) (lease.Lease, string, error) {
	body := appendAcquireRequest(nil, owner, ttl, wait, ticket, last)
	// A try (wait 0) too: a caller that gives up as the server grants
	// must not leave the lease held by nobody (see waitcancel.go).
	var leave func(string)
	if wait > 0 {
		start := time.Now() // before the server's wait begins
		leave = func(base string) {
			// A last request that ran its whole wait left the line with
			// its answer: one more request would be a new wait, which a
			// key freed meanwhile would be granted to, for nothing.
			if !last || time.Since(start) < wait {
				c.leaveLine(ctx, base, key, owner, ttl, ticket)
			}
		}
	}
	return c.acquireWaiting(ctx, key, body, wait, leave)
}

// acquireAnswer is the outcome of an acquire request: its lease, or its
// error.
func acquireAnswer(key string, resp *response, err error) (lease.Lease, error) {
	switch {
	case errors.Is(err, errNotSent):
		return lease.Lease{}, transportError("acquire", key, err, " (not granted: the request never reached the server)")
	case err != nil:
		return lease.Lease{}, transportError("acquire", key, err,
			" (outcome unknown: the lease may have been granted and will expire after its TTL)")
	case resp.status != http.StatusOK:
		return lease.Lease{}, answerError("acquire", key, resp)
	}
	return decodeLease("acquire", key, resp)
}

// AcquireWait implements lease.WaitAcquirer: the server waits for the key,
// FIFO among its waiters, for up to the chunk (WithWaitChunk) or until just
// before ctx's deadline, whichever is sooner, and the Client asks again
// until ctx ends. Every request of one AcquireWait carries the same ticket,
// so a server that keeps tickets (WithWaitGrace) keeps the wait's place in
// line however many requests it takes. When ctx ends during a wait,
// AcquireWait returns at once with ctx's error, however slow or hung the
// server, and the wait ends in the background (waitcancel.go): the Client
// hangs up its side of the connection and reads the server's last answer;
// the server ends the wait and releases a lease it grants at that moment,
// and a lease granted before the server saw the hang-up the Client gives
// back itself. Only when no answer comes within the Client's timeout, or
// the connection cannot be half-closed (HTTP/2), is the outcome unknown: a
// lease granted then expires after its TTL. A wait that ends while its
// server may keep it in line between two requests (an answer held at the
// server's max wait given up or lost on its way; too little time left for
// another request) leaves the line with one more request in the background,
// rather than stall the next waiter for the server's grace. Close stops the
// background work. A server
// that answers held at once (waiting turned off, or closing) is asked again
// after a backoff of 5 ms doubling to 500 ms, not back to back. When ctx's
// deadline is near it returns the server's *lease.HeldError.
func (c *Client) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (_ lease.Lease, err error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	var held error
	// Every request of this wait carries one ticket, so that the server
	// keeps the wait's place in line from one request to the next.
	ticket := lease.NewID()
	// lingering is the server that may keep the wait in line for its grace
	// while no request of it is there: "" when none may. A wait that ends
	// then leaves the line (leaveLine) rather than stall the next waiter.
	var lingering string
	defer func() {
		if err != nil && lingering != "" {
			c.leaveLine(ctx, lingering, key, owner, ttl, ticket)
		}
	}()
	// Paces the requests only while the server answers at once.
	loop := wait.Loop{Pacer: wait.NewPacer(pollMin, pollMax, nil)}
	for {
		chunk := c.waitChunk
		last := false
		if dl, ok := ctx.Deadline(); ok {
			// Leave room for the answer so the server ends the wait, not the
			// context: the outcome is then known.
			if left := beforeAnswer(dl); left <= chunk {
				chunk, last = left, true
			}
			if chunk < 10*time.Millisecond && held != nil {
				return lease.Lease{}, held // too little time left to ask again
			}
			chunk = max(chunk, 0)
		}
		if ctx.Err() != nil {
			// Ended between two requests: nothing more is sent.
			return lease.Lease{}, fmt.Errorf("leasehttp: waiting for %s: %w", quoteName(key), context.Cause(ctx))
		}
		sent := time.Now()
		l, base, err := c.acquireAt(ctx, key, owner, ttl, chunk, ticket, last)
		lingering = ""
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			// The request was at the server, whose wait ends with it (the
			// hang-up), or never left.
			if errors.Is(err, errLeftBehind) {
				return lease.Lease{}, fmt.Errorf("leasehttp: waiting for %s: %w", quoteName(key), err)
			}
			if errors.Is(err, lease.ErrUnavailable) && !errors.Is(err, errNotSent) {
				// The request was in flight when ctx ended: the server may
				// have granted the lease and answered before it saw the
				// request end. Say so, as Acquire does.
				return lease.Lease{}, fmt.Errorf("leasehttp: waiting for %s: %w; %w", quoteName(key), context.Cause(ctx), err)
			}
			return lease.Lease{}, fmt.Errorf("leasehttp: waiting for %s: %w", quoteName(key), context.Cause(ctx))
		}
		var lost *unavailableError
		if !errors.Is(err, lease.ErrHeld) {
			if chunk > 0 && errors.As(err, &lost) && !errors.Is(err, errNotSent) {
				// The answer was lost: the server may have kept the wait
				// for the grace after it answered, as after any cut.
				lingering = base
			}
			return lease.Lease{}, err
		}
		held = err
		took := time.Since(sent)
		if chunk > 0 && (!last || took < chunk) {
			// Cut short at the server's max wait, which keeps the wait in
			// line for the grace: until the next request, it lingers.
			lingering = base
		}
		if chunk <= 0 || took >= min(chunk/2, pollMax) {
			// The server waited: ask again at once, or give up at the end.
			// Only an answer that took the whole chunk ran to the end: a
			// server with a shorter max wait cuts a wait short (and keeps
			// the ticket in line), and a slow one (a loaded host, a long
			// way) takes more than pollMax to say so; giving up then would
			// end a wait with most of ctx's time left.
			if last && took >= chunk {
				return lease.Lease{}, err
			}
			loop.Pacer.Reset()
			continue
		}
		// The server answered long before the wait asked for: it does not
		// wait (WithMaxWait(0), or it is closing). Pace the requests, as
		// lease.Client paces its polls, rather than send them back to back,
		// and wake in time to leave room for a last answer before ctx's
		// deadline.
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok {
			pctx, cancel = context.WithTimeout(ctx, max(beforeAnswer(dl), 0))
		}
		werr := loop.Wait(pctx, lease.HolderExpires(err))
		cancel()
		if werr != nil && ctx.Err() != nil {
			return lease.Lease{}, fmt.Errorf("leasehttp: waiting for %s: %w", quoteName(key), context.Cause(ctx))
		}
	}
}

// beforeAnswer is the time left until dl less room for an answer to come
// back: a tenth of it, between 10 and 250 ms.
func beforeAnswer(dl time.Time) time.Duration {
	left := time.Until(dl)
	return left - min(max(left/10, 10*time.Millisecond), 250*time.Millisecond)
}

// renewRetry sends a renewal of ttl (the shortest of a batch's) to path,
// retried as retry does. On a list of several servers, one still
// unanswered after a third of the TTL no longer holds the renewal up: the
// next server is asked beside it, and the first answer that is not a
// failure is taken, the other request then cancelled. A holder renews about
// a third of its TTL after its last renewal and keeps the lease until
// about its TTL: a replica that takes requests and never answers them (cut
// from etcd by a link that drops everything) kept the renewal for the
// Client's whole timeout, past the holder's safe deadline, and the lease
// was lost though the next replica could renew it
// (TestHoldOutlivesAReplicaCutFromEtcd). The first request goes on
// meanwhile, so a server merely slow still renews in time.
func (c *Client) renewRetry(ctx context.Context, ttl time.Duration, path string, body []byte) (*response, error) {
	return c.hedged(ctx, ttl, func(ctx context.Context) func() (*response, error) {
		return func() (*response, error) { return c.roundTrip(ctx, http.MethodPost, path, body, c.timeout) }
	})
}

// hedged is renewRetry of the requests sender makes.
func (c *Client) hedged(ctx context.Context, ttl time.Duration, sender func(context.Context) func() (*response, error)) (*response, error) {
	if len(c.endpoints) < 2 {
		resp, err, _ := c.retry(ctx, true, sender(ctx))
		return resp, err
	}
	type outcome struct {
		resp *response
		err  error
	}
	done := make(chan outcome, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the request not taken
	start := func() {
		go func() {
			resp, err, _ := c.retry(ctx, true, sender(ctx))
			done <- outcome{resp, err}
		}()
	}
	i, _ := c.endpoint()
	start()
	hedge := time.NewTimer(ttl / 3)
	defer hedge.Stop()
	select {
	case o := <-done:
		return o.resp, o.err
	case <-hedge.C:
	}
	c.failedAt(i) // unanswered so far: later requests go to the next
	start()
	o := <-done
	if o.err == nil && o.resp.status != http.StatusServiceUnavailable {
		// The other request, cancelled, may still have read an answer
		// (both came at once): its buffer goes back to the pool too.
		go func() {
			if lost := <-done; lost.resp != nil {
				lost.resp.release()
			}
		}()
		return o.resp, o.err
	}
	if o.resp != nil {
		o.resp.release()
	}
	o = <-done // the first to end failed: the other's outcome stands
	return o.resp, o.err
}

// Renew implements lease.Backend. It is retried after a lost answer: a
// renewal repeated with the same token and ID is harmless.
func (c *Client) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateLease(l); err != nil {
		return lease.Lease{}, err
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	body := appendRenewRequest(nil, l, ttl, false)
	resp, err := c.renewRetry(ctx, ttl, keyPath(l.Key, "/renew"), body)
	if err != nil {
		return lease.Lease{}, transportError("renew", l.Key, err, "")
	}
	defer resp.release()
	if resp.status != http.StatusOK {
		return lease.Lease{}, answerError("renew", l.Key, resp)
	}
	r, err := decodeLease("renew", l.Key, resp)
	if err == nil && r.Token != l.Token {
		return lease.Lease{}, fmt.Errorf("leasehttp: renew %s token %d: %w: malformed answer: the answer is for token %d",
			quoteName(l.Key), l.Token, lease.ErrUnavailable, r.Token)
	}
	return r, err
}

// renewBatchPath is the path of POST /v1/renew.
const renewBatchPath = "/v1/renew"

// RenewBatch implements lease.BatchRenewer with one request (POST
// /v1/renew), which a server over a backend with RenewBatch of its own
// makes in one commit. It is retried after a lost answer, as Renew is.
func (c *Client) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	// Sized for keys of up to 32 bytes; the request is not pooled, as the
	// transport may read it after Do returns.
	body := appendRenewBatchRequest(make([]byte, 0, 16+len(renewals)*112), renewals)
	first := renewals[0].Lease.Key
	shortest := renewals[0].TTL
	for _, r := range renewals[1:] {
		shortest = min(shortest, r.TTL)
	}
	resp, err := c.renewRetry(ctx, shortest, renewBatchPath, body)
	what := func() string { return fmt.Sprintf("of %d leases, the first", len(renewals)) }
	if err != nil {
		return nil, transportError("renew "+what(), first, err, "")
	}
	defer resp.release()
	if resp.status != http.StatusOK {
		return nil, answerError("renew "+what(), first, resp)
	}
	out := make([]lease.RenewResult, len(renewals))
	if err := readRenewAnswer(resp.body, renewals, out); err != nil {
		return nil, fmt.Errorf("leasehttp: renew %s %s: %w: malformed answer: %v", what(), quoteName(first), lease.ErrUnavailable, err)
	}
	return out, nil
}

// Release implements lease.Backend. It is retried after a lost answer; if a
// retry is answered not_held, the error (still matching lease.ErrNotHeld)
// says that an earlier attempt may have released the lease.
func (c *Client) Release(ctx context.Context, l lease.Lease) error {
	if err := lease.ValidateLease(l); err != nil {
		return err
	}
	body := appendReleaseRequest(nil, l)
	resp, err, uncertain := c.retry(ctx, true, func() (*response, error) {
		return c.roundTrip(ctx, http.MethodPost, keyPath(l.Key, "/release"), body, c.timeout)
	})
	if err != nil {
		return transportError("release", l.Key, err, " (outcome unknown; an unreleased lease expires after its TTL)")
	}
	defer resp.release()
	if resp.status == http.StatusOK {
		return nil
	}
	err = answerError("release", l.Key, resp)
	if uncertain && errors.Is(err, lease.ErrNotHeld) {
		return fmt.Errorf("%w (an earlier attempt whose answer was lost may have released it)", err)
	}
	return err
}

// Get implements lease.Backend; it is retried after failures.
func (c *Client) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, err
	}
	resp, err, _ := c.retry(ctx, true, func() (*response, error) {
		return c.roundTrip(ctx, http.MethodGet, keyPath(key, ""), nil, c.timeout)
	})
	if err != nil {
		return lease.Lease{}, transportError("get", key, err, "")
	}
	defer resp.release()
	if resp.status != http.StatusOK {
		return lease.Lease{}, answerError("get", key, resp)
	}
	l, err := decodeLease("get", key, resp)
	l.ID = lease.ID{} // never expected, never passed on
	return l, err
}

// List implements lease.Backend with one GET /v1/leases; it is retried
// after failures. With a credential scoped to key prefixes the server lists
// only the keys it covers. lease.All walks every page.
func (c *Client) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, _, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if page.Limit != 0 {
		q.Set("limit", fmt.Sprint(page.Limit))
	}
	if page.After != "" {
		q.Set("after", page.After)
	}
	path := "/v1/leases"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err, _ := c.retry(ctx, true, func() (*response, error) {
		return c.roundTrip(ctx, http.MethodGet, path, nil, c.timeout)
	})
	if err != nil {
		return lease.ListPage{}, transportError("list", prefix, err, "")
	}
	defer resp.release()
	if resp.status != http.StatusOK {
		return lease.ListPage{}, answerError("list", prefix, resp)
	}
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("leasehttp: list %s: %w: malformed answer: "+format, append([]any{quoteName(prefix), lease.ErrUnavailable}, args...)...)
	}
	out, err := readList(resp.body)
	if err != nil {
		return lease.ListPage{}, malformed("%v", err)
	}
	if len(out.Leases) > limit {
		return lease.ListPage{}, malformed("%d leases for a limit of %d", len(out.Leases), limit)
	}
	if _, _, err := lease.ParseList("", lease.Page{After: out.Next}); err != nil {
		return lease.ListPage{}, malformed("next: %v", err)
	}
	for i := range out.Leases {
		out.Leases[i].ID = lease.ID{}
	}
	return out, nil
}
