package leasehttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehq/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultMaxWait is how long the server lets one acquire request wait for a
// held key unless WithMaxWait says otherwise. A longer wait_ms is capped to
// it; the client then asks again.
const DefaultMaxWait = 30 * time.Second

// MaxMaxWait is the largest WithMaxWait accepted: longer requests than this
// are cut by most proxies and load balancers anyway.
const MaxMaxWait = time.Hour

// backendTimeout bounds one backend call made for a request. Calls that
// change state run under it rather than under the request's context, so a
// client that hangs up does not cut an acquire halfway and leave its
// outcome unknown.
const backendTimeout = 10 * time.Second

// probeKey is the key /readyz reads: a Get answered with ErrNotFound or a
// lease shows the backend answers.
const probeKey = "_leasehttp/readyz"

// Server serves the HTTP API of docs/DESIGN.md for any lease.Backend. It is an
// http.Handler; see the package documentation for routes, auth and metrics.
type Server struct {
	backend  lease.Backend
	waitAcq  lease.WaitAcquirer // the backend's own FIFO wait, if it has one
	notifier lease.Notifier     // the backend's change notifications, if any
	hosts    hostSet            // Hosts answered without credentials besides loopback
	log      *slog.Logger
	storeID  string // sent in StoreHeader; "" for none
	maxWait  time.Duration
	tickets  *tickets // waits kept in line between their requests
	mux      *http.ServeMux
	routes   map[string]http.Handler // by pattern, as registered in mux
	badPath  http.Handler            // answers a /v1/ path with an empty or dot segment
	metrics  *metrics
	tracker  *tracker
	queues   *queues
	watches  *watches
	waiting  waitingKeys // acquire requests waiting here, per key (GET /v1/stats)
	failures failureLog  // the last failure logged at ERROR

	// creds are what requests are checked against, swapped whole by
	// SetCredentials; nil: every request is authorised.
	creds atomic.Pointer[[]credential]
	// swapped is closed, and replaced, each time SetCredentials swaps
	// creds, so that each open watch stream checks its credential at once
	// rather than at its next event or heartbeat.
	swappedMu sync.Mutex
	swapped   chan struct{}

	closing   context.Context // cancelled by Close
	close     context.CancelFunc
	closeOnce sync.Once
}

// ServerOption configures a Server.
type ServerOption func(*serverConfig) error

type serverConfig struct {
	creds    []Credential
	credsSet bool
	log      *slog.Logger
	reg      prometheus.Registerer
	gat      prometheus.Gatherer
	maxWait  time.Duration
	grace    time.Duration
	hosts    hostSet
	watch    watchConfig
	storeID  string
}

// WithCredentials makes the server demand a bearer token from creds on every
// /v1 request and confine each token to its key prefixes. Without it the
// server authorises every request whose Host is loopback (or allowed with
// WithAllowedHosts); then it must listen only on loopback.
func WithCredentials(creds []Credential) ServerOption {
	return func(c *serverConfig) error {
		c.creds, c.credsSet = creds, true
		return nil
	}
}

// WithLogger sets the logger: one line per request at debug level, refused
// credentials at warn, backend failures at error (a failure that repeats
// the last one logged at error within a minute at debug: a stopped backend
// fails every request alike). Lines show at most a key's first 64 bytes.
// The default is slog.Default().
func WithLogger(l *slog.Logger) ServerOption {
	return func(c *serverConfig) error {
		if l == nil {
			return fmt.Errorf("%w: leasehttp: logger is nil", lease.ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// WithRegisterer registers the server's metrics with r. If r is also a
// prometheus.Gatherer (a *prometheus.Registry is), /metrics serves it;
// otherwise pass WithGatherer too. Without either the server uses a registry
// of its own, with the Go runtime and process collectors added.
func WithRegisterer(r prometheus.Registerer) ServerOption {
	return func(c *serverConfig) error {
		if r == nil {
			return fmt.Errorf("%w: leasehttp: registerer is nil", lease.ErrInvalid)
		}
		c.reg = r
		return nil
	}
}

// WithGatherer sets what /metrics serves; it goes with WithRegisterer.
func WithGatherer(g prometheus.Gatherer) ServerOption {
	return func(c *serverConfig) error {
		if g == nil {
			return fmt.Errorf("%w: leasehttp: gatherer is nil", lease.ErrInvalid)
		}
		c.gat = g
		return nil
	}
}

// WithMaxWait caps how long one acquire request may wait (wait_ms) for a
// held key, 0 to MaxMaxWait; 0 turns waiting off (every acquire tries once).
// The default is DefaultMaxWait. A waiting request's read and write
// deadlines are extended by its wait, so an http.Server's timeouts need not
// allow for it.
func WithMaxWait(d time.Duration) ServerOption {
	return func(c *serverConfig) error {
		if d < 0 || d > MaxMaxWait {
			return fmt.Errorf("%w: leasehttp: max wait %v is outside [0, %v]", lease.ErrInvalid, d, MaxMaxWait)
		}
		c.maxWait = d
		return nil
	}
}

// NewServer returns a Server for b. Call Close when shutting down, before
// http.Server.Shutdown, so that waiting requests end and the drain is quick.
func NewServer(b lease.Backend, opts ...ServerOption) (*Server, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: leasehttp: backend is nil", lease.ErrInvalid)
	}
	cfg := serverConfig{log: slog.Default(), maxWait: DefaultMaxWait, grace: DefaultWaitGrace}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: leasehttp: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s := &Server{backend: b, log: cfg.log, storeID: cfg.storeID, maxWait: cfg.maxWait, hosts: cfg.hosts, mux: http.NewServeMux(),
		routes: map[string]http.Handler{}, queues: newQueues(), tickets: newTickets(cfg.grace)}
	s.waitAcq, _ = b.(lease.WaitAcquirer)
	s.notifier, _ = b.(lease.Notifier)
	if cfg.credsSet {
		creds, err := newCredentials(cfg.creds)
		if err != nil {
			return nil, err
		}
		s.creds.Store(&creds)
	}
	switch {
	case cfg.reg == nil && cfg.gat == nil:
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.reg, cfg.gat = r, r
	case cfg.reg == nil:
		return nil, fmt.Errorf("%w: leasehttp: WithGatherer needs WithRegisterer", lease.ErrInvalid)
	case cfg.gat == nil:
		g, ok := cfg.reg.(prometheus.Gatherer)
		if !ok {
			return nil, fmt.Errorf("%w: leasehttp: the registerer is not a gatherer; pass WithGatherer", lease.ErrInvalid)
		}
		cfg.gat = g
	}
	var err error
	if s.metrics, err = newMetrics(cfg.reg); err != nil {
		return nil, fmt.Errorf("leasehttp: registering metrics: %w", err)
	}
	s.tracker = newTracker(s.metrics)
	s.watches = newWatches(b, cfg.watch)
	s.closing, s.close = context.WithCancel(context.Background())

	s.handle("POST /v1/leases/{key}/acquire", s.handleAcquire)
	s.handle("POST /v1/leases/{key}/renew", s.handleRenew)
	s.handle("POST /v1/leases/{key}/release", s.handleRelease)
	s.handle("POST /v1/renew", s.handleRenewBatch)
	s.handle("GET /v1/leases/{key}", s.handleGet)
	s.handle("GET /v1/leases", s.handleList)
	s.handle("GET /v1/watch", s.handleWatch)
	s.handle("GET /v1/stats", s.handleStats)
	s.handle("GET /v1/openapi.json", s.handleOpenAPI)
	s.handle("GET /healthz", s.handleHealthz)
	s.handle("GET /readyz", s.handleReadyz)
	metricsHandler := promhttp.HandlerFor(cfg.gat, promhttp.HandlerOpts{})
	s.handle("GET /metrics", func(w *responseWriter, r *http.Request) { metricsHandler.ServeHTTP(w, r) })
	s.handle("/", s.handleNoRoute)
	s.badPath = s.wrap("other", s.handleBadPath)
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.storeID != "" {
		w.Header().Set(StoreHeader, s.storeID)
	}
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		// A target that is not a path ("GET *", "CONNECT host:port"):
		// ServeMux would answer it itself, with an empty 400 or a
		// plain-text 404. No route serves it.
		s.routes["/"].ServeHTTP(w, r)
		return
	}
	if strings.HasPrefix(p, "/v1/") && !canonicalPath(p) {
		// ServeMux would answer a redirect to the cleaned path, which for
		// "/v1/leases//acquire" names another resource. An empty key, or a
		// key "." or ".." not written %2E, is a client mistake: say so.
		s.badPath.ServeHTTP(w, r)
		return
	}
	if pattern, ok := slashKeyPattern(r.Method, p); ok {
		if h, ok := s.routes[pattern]; ok {
			r.Pattern = pattern
			r.SetPathValue("key", "/")
			h.ServeHTTP(w, r)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// slashKeyPattern returns the pattern that would serve method on the path p
// if p names the key "/". ServeMux takes a segment that unescapes to "/"
// for a trailing slash, so the key "/" (sent as %2F) would match no route;
// ServeHTTP routes it to the same handlers itself (HEAD to GET's, as
// ServeMux does).
func slashKeyPattern(method, p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, "/v1/leases/")
	if !ok {
		return "", false
	}
	seg, op, _ := strings.Cut(rest, "/")
	if !strings.EqualFold(seg, "%2F") {
		return "", false
	}
	if method == http.MethodHead {
		method = http.MethodGet
	}
	pattern := method + " /v1/leases/{key}"
	if op != "" {
		pattern += "/" + op
	}
	return pattern, true
}

// routeMethods are the methods the routes are registered for; GET routes
// serve HEAD too.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost}

// allowedMethods returns the methods some route serves on r's path.
func (s *Server) allowedMethods(r *http.Request) []string {
	var allow []string
	for _, m := range routeMethods {
		if pattern, ok := slashKeyPattern(m, r.URL.EscapedPath()); ok {
			if _, ok := s.routes[pattern]; ok {
				allow = append(allow, m)
			}
			continue
		}
		probe := *r
		probe.Method = m
		if _, pattern := s.mux.Handler(&probe); pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// canonicalPath reports whether p has no empty, "." or ".." segment.
func canonicalPath(p string) bool {
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// Close ends every pending wait at once, answering it 503 "unavailable",
// ends every watch stream with an error event (and answers later watches
// 503), makes later acquires try once instead of waiting, turns /readyz to
// 503 and stops the expiry tracking. Other requests are still served, so call
// http.Server.Shutdown after Close to drain them. Close always returns nil.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.close()
		s.tracker.close()
	})
	return nil
}

// errShuttingDown ends the waits pending when Close is called.
var errShuttingDown = fmt.Errorf("%w: leasehttp: the server is shutting down", lease.ErrUnavailable)

// errClientGone is a request whose client hung up before the answer. It is
// answered (to nobody) and counted with status 499, as nginx does, so that
// it does not look like a failure of the server.
var errClientGone = errors.New("leasehttp: the client went away")

// statusClientGone is the status recorded for errClientGone.
const statusClientGone = 499

// errWaitOver is the cause of a wait that reached its wait_ms.
var errWaitOver = errors.New("leasehttp: wait over")

// responseWriter records what a handler answered, for the request log and
// the latency histogram.
type responseWriter struct {
	http.ResponseWriter
	status int
	err    error  // the error answered, if any
	cred   string // fingerprint of the credential used
	// bodyUnread is set while the request has a body not read to its end.
	// net/http would read (and discard) it before sending the answer so as
	// to keep the connection; an error answered before the body is read
	// closes the connection instead, so that a client trickling its body
	// gets its 401 at once and is cut off rather than read on.
	bodyUnread bool
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// handle registers h for pattern with the request's metrics and log line.
// The route label is the pattern, never the path, so keys do not become
// label values.
func (s *Server) handle(pattern string, h func(*responseWriter, *http.Request)) {
	route := pattern
	if pattern == "/" {
		route = "other"
	}
	wrapped := s.wrap(route, h)
	s.routes[pattern] = wrapped
	s.mux.Handle(pattern, wrapped)
}

// wrap adds the metrics and the log line to h.
func (s *Server) wrap(route string, h func(*responseWriter, *http.Request)) http.Handler {
	duration := s.metrics.routeDuration(route, route != "other")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &responseWriter{ResponseWriter: w, bodyUnread: r.ContentLength != 0}
		h(rw, r)
		if rw.status == 0 {
			rw.status = http.StatusOK
		}
		d := time.Since(start)
		duration.observe(rw.status, d)
		level := slog.LevelDebug
		switch {
		case r.Context().Err() != nil:
			// The client hung up; nothing went wrong here.
		case errors.Is(rw.err, errShuttingDown):
			// A wait ended by Close: the shutdown asked for, not a
			// failure, and one line per waiting key would say it at
			// ERROR at every restart.
			level = slog.LevelInfo
		case rw.status >= 500:
			level = slog.LevelError
			if s.failures.repeated(rw.err, start) {
				level = slog.LevelDebug // said once already, at its first request
			}
		case rw.status == http.StatusUnauthorized || rw.status == http.StatusForbidden:
			level = slog.LevelWarn
		}
		if !s.log.Enabled(r.Context(), level) {
			return
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("route", route),
			slog.Int("status", rw.status), slog.Duration("duration", d),
			slog.String("remote", r.RemoteAddr),
		}
		if k := r.PathValue("key"); k != "" {
			attrs = append(attrs, slog.String("key", logKey(k)))
		}
		if rw.cred != "" {
			attrs = append(attrs, slog.String("credential", rw.cred))
		}
		if rw.err != nil {
			attrs = append(attrs, slog.String("err", rw.err.Error()))
		}
		s.log.LogAttrs(context.WithoutCancel(r.Context()), level, "leasehttp: request", attrs...)
	})
}

var newline = []byte("\n")

// emptyObject is the answer to a release.
var emptyObject = []byte("{}")

// writeLease answers l, with its ID if withID.
func writeLease(w http.ResponseWriter, l lease.Lease, withID bool) {
	writeAppended(w, http.StatusOK, func(b []byte) []byte { return appendLease(b, l, withID, nil) })
}

// writeAppended answers status with the body that add appends (wire.go),
// written into a pooled buffer.
func writeAppended(w http.ResponseWriter, status int, add func([]byte) []byte) {
	buf := getBuf()
	defer putBuf(buf)
	*buf = append(add((*buf)[:0]), '\n')
	writeBodyLine(w, status, *buf)
}

// writeJSON answers v, a body of no fixed shape (stats, health), with
// status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only our own types are marshalled; they always marshal.
		status, body = http.StatusInternalServerError, []byte(`{"error":{"code":"unavailable","message":"leasehttp: encoding the answer failed"}}`)
	}
	writeBody(w, status, body)
}

// writeBody answers body, a JSON value, as writeJSON does. The length is
// announced, so that a body larger than net/http's buffer is not chunked
// and the client can read it into a buffer of its size.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	writeHeader(w, status, len(body)+len(newline))
	// Two writes into the response's buffer rather than append, which
	// would copy the body to make room for the newline.
	_, _ = w.Write(body)
	_, _ = w.Write(newline)
}

// writeBodyLine is writeBody of a body that already ends in the newline:
// one write, which for a body larger than net/http's buffer is one
// system call fewer.
func writeBodyLine(w http.ResponseWriter, status int, line []byte) {
	writeHeader(w, status, len(line))
	_, _ = w.Write(line)
}

func writeHeader(w http.ResponseWriter, status, length int) {
	h := w.Header()
	h["Content-Length"] = []string{strconv.Itoa(length)}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
}

// writeError answers err through the error table.
func (s *Server) writeError(w *responseWriter, err error) {
	w.err = err
	k := kindOf(err)
	status := k.status
	msg := err.Error()
	var re *requestError
	switch {
	case errors.As(err, &re):
		status = re.status
	case errors.Is(err, errClientGone):
		status = statusClientGone
	}
	switch {
	case k.code == "unauthorized":
		w.Header().Set("WWW-Authenticate", `Bearer realm="lease"`)
	case k.code == "unavailable":
		w.Header().Set("Retry-After", "1")
		if !errors.Is(err, errShuttingDown) && !errors.Is(err, errClientGone) {
			// The backend's own message may name hosts and files; it goes to
			// the log, the client learns only that the outcome is unknown.
			msg = "leasehttp: the backend could not answer; the outcome is unknown (details in the server log)"
		}
	}
	if w.bodyUnread {
		w.Header().Set("Connection", "close")
		// net/http still reads what is left of the body (up to 256 KiB)
		// after sending the answer, before it closes the connection; a
		// read deadline in the past ends that at once. (Without a
		// deadline to set, as under httptest.ResponseRecorder, the
		// error says so and there is nothing to cut.)
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	var he *lease.HeldError
	if !errors.As(err, &he) {
		he = nil
	}
	writeAppended(w, status, func(b []byte) []byte { return appendError(b, k.code, msg, he) })
	if w.bodyUnread {
		closeAfterAnswer(w)
	}
}

// authorize checks r's bearer token; it answers 401 and returns false if
// the token is missing or wrong. The credential is nil when the server has
// none configured; r's Host must then be loopback or allowed, else 403.
func (s *Server) authorize(w *responseWriter, r *http.Request) (*credential, bool) {
	creds := s.creds.Load()
	if creds == nil {
		if err := s.checkHost(r); err != nil {
			s.writeError(w, err)
			return nil, false
		}
		return nil, true
	}
	c, err := authenticate(*creds, r)
	if err != nil {
		s.writeError(w, err)
		return nil, false
	}
	w.cred = c.fingerprint
	return c, true
}

// keyRequest authorises r and reads its key, refusing a query: 401, 400 or
// 403 otherwise.
func (s *Server) keyRequest(w *responseWriter, r *http.Request) (string, bool) {
	key, _, ok := s.keyRequestBy(w, r)
	return key, ok
}

// keyRequestBy is keyRequest, also returning the credential that
// authorised r (nil on a server without credentials).
func (s *Server) keyRequestBy(w *responseWriter, r *http.Request) (string, *credential, bool) {
	c, ok := s.authorize(w, r)
	if !ok {
		return "", nil, false
	}
	key, err := pathKey(r)
	if err == nil {
		err = noQuery(r)
	}
	if err != nil {
		s.writeError(w, err)
		return "", nil, false
	}
	if !c.covers(key) {
		s.writeError(w, fmt.Errorf("%w: this credential does not cover key %s", ErrForbidden, quoteName(key)))
		return "", nil, false
	}
	return key, c, true
}

// stillCovers says whether c, which authorised a request for key, still
// does under the server's credentials now: nil, or the error a request
// with it would get now (401 with its token gone, 403 with key outside its
// prefixes). A wait outlives the check made when it arrived, and a SIGHUP
// can take the key from its credential meanwhile.
func (s *Server) stillCovers(c *credential, key string) error {
	creds := s.creds.Load()
	if creds == nil || c == nil {
		return nil
	}
	switch n := sameToken(*creds, c); {
	case n == nil:
		return fmt.Errorf("%w: the bearer token was withdrawn during the wait (the server's credentials changed)", ErrUnauthorized)
	case !n.covers(key):
		return fmt.Errorf("%w: this credential no longer covers key %s (the server's credentials changed during the wait)", ErrForbidden, quoteName(key))
	}
	return nil
}

// whileCovered runs until ctx ends, calling lost with stillCovers' error
// when a change of the server's credentials takes key from c.
func (s *Server) whileCovered(ctx context.Context, c *credential, key string, lost func(error)) {
	if c == nil {
		return
	}
	swapped := s.credentialsSwapped()
	if err := s.stillCovers(c, key); err != nil {
		lost(err)
		return
	}
	go func() {
		for {
			select {
			case <-swapped:
				swapped = s.credentialsSwapped() // before the check, as in handleWatch
				if err := s.stillCovers(c, key); err != nil {
					lost(err)
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
}

// opContext is the context of a backend call that changes state: it keeps
// the request's values but not its cancellation (see backendTimeout).
func opContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), backendTimeout)
}

func (s *Server) handleAcquire(w *responseWriter, r *http.Request) {
	key, c, ok := s.keyRequestBy(w, r)
	if !ok {
		return
	}
	req, err := decodeAcquire(w, r, s.maxWait)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var l lease.Lease
	if req.Wait <= 0 || s.closing.Err() != nil {
		l, err = s.acquireOnce(r.Context(), key, req.Owner, req.TTL)
	} else {
		extendDeadlines(w, r, req.Wait)
		l, err = s.acquireWaiting(r.Context(), c, key, req)
		if err == nil {
			if lost := s.stillCovers(c, key); lost != nil {
				// Granted as a reload took the key from the credential:
				// given back, as the wait is refused.
				s.giveBack(r.Context(), l)
				err = lost
			}
		}
	}
	switch {
	case err == nil:
		s.metrics.acquisitions.done.Inc()
		s.tracker.granted(l)
	case errors.Is(err, lease.ErrHeld), errors.Is(err, errClientGone),
		errors.Is(err, ErrForbidden), errors.Is(err, ErrUnauthorized):
		// A client that stopped waiting, or whose credential a reload
		// took the key from, is a wait that ended without the lease, not
		// a failure.
		s.metrics.acquisitions.refused.Inc()
	default:
		s.metrics.acquisitions.failed.Inc()
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	if r.Context().Err() != nil {
		// The client hung up while we acquired: it will never learn the
		// lease's ID, so give the lease back now rather than at its expiry.
		s.giveBack(r.Context(), l)
		s.writeError(w, fmt.Errorf("%w; released the lease acquired for it (token %d)", errClientGone, l.Token))
		return
	}
	writeLease(w, l, true)
}

// giveBack releases l, acquired for a client that will not get it, for at
// most backendTimeout, whether or not ctx (the request's) has ended.
func (s *Server) giveBack(ctx context.Context, l lease.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backendTimeout)
	defer cancel()
	if err := s.backend.Release(ctx, l); err == nil {
		s.tracker.released(l.Key, l.Token)
	}
}

// extendDeadlines gives a waiting acquire its wait on top of the write
// timeout of the http.Server serving it, which would otherwise cut the
// wait: past the write deadline the answer cannot be sent. The wait is
// bounded by the server's max wait.
//
// The read deadline is left alone. The body is read by now, so the read
// timeout has done its job, and net/http's watch for a client hanging up
// (its background read, which it starts with no deadline) must not get
// one: when a deadline set here passed while the answer was still being
// made (the backend slow to say who holds the key at the end of the wait,
// 10 s over etcd cut off), net/http cancelled the context of the
// connection, which it kept open, and every later request on it began
// cancelled: waits were answered 499 at once, and plain acquires granted,
// released again and answered 499 (TestWaitAnsweredLateKeepsTheConnection).
func extendDeadlines(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	hs, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if hs == nil || hs.WriteTimeout <= 0 {
		return // not served by net/http's server, or no deadline to extend
	}
	// The error says the connection has no deadlines (ErrNotSupported);
	// then nothing cuts the wait either.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + hs.WriteTimeout))
}

// acquireOnce tries once, under a context the request's end does not cut.
func (s *Server) acquireOnce(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backendTimeout)
	defer cancel()
	return s.backend.Acquire(ctx, key, owner, ttl)
}

// acquireWaiting waits up to req.Wait for key: through the backend's own
// FIFO wait if it has one, else in this server's queue for the key.
func (s *Server) acquireWaiting(rctx context.Context, c *credential, key string, req acquireRequest) (lease.Lease, error) {
	if !req.Ticket.IsZero() && s.tickets.grace > 0 {
		return s.acquireTicket(rctx, c, key, req)
	}
	cctx, cancelCause := context.WithCancelCause(rctx)
	defer cancelCause(nil)
	stop := context.AfterFunc(s.closing, func() { cancelCause(errShuttingDown) })
	defer stop()
	s.whileCovered(cctx, c, key, cancelCause)
	ctx, cancel := context.WithTimeoutCause(cctx, req.Wait, errWaitOver)
	defer cancel()

	l, err := s.waitFor(ctx, key, req.Owner, req.TTL)
	if err != nil && ctx.Err() != nil {
		return lease.Lease{}, s.waitEnded(ctx, key, heldOrNil(err))
	}
	return l, err
}

// waitFor waits in line for key until it acquires it or ctx ends: in the
// backend's own FIFO wait if it has one, else in this server's queue. On
// ctx's end it returns an error, matching lease.ErrHeld if it saw the key
// held, and holds nothing; a lease won as ctx ended is returned.
func (s *Server) waitFor(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	s.metrics.waiters.Inc()
	defer s.metrics.waiters.Dec()
	s.waiting.add(key, 1)
	defer s.waiting.add(key, -1)
	if s.waitAcq == nil {
		return s.acquireQueued(ctx, key, owner, ttl)
	}
	return s.waitAcq.AcquireWait(ctx, key, owner, ttl)
}

// waitEnded is the error for a wait whose context ended: 409 held (with the
// holder) when wait_ms ran out, 503 when the server is closing. held is the
// last HeldError seen, if any.
func (s *Server) waitEnded(ctx context.Context, key string, held error) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errShuttingDown):
		return fmt.Errorf("%w; the wait for %s ended without the lease", errShuttingDown, quoteName(key))
	case errors.Is(cause, errWaitOver):
		return s.stillHeld(ctx, key, held)
	case errors.Is(cause, ErrForbidden), errors.Is(cause, ErrUnauthorized):
		return cause // the credential lost the key during the wait
	default:
		return fmt.Errorf("%w while waiting for %s: %w", errClientGone, quoteName(key), cause)
	}
}

// stillHeld is the answer to a wait that ran out without the lease:
// lease.StillHeld, asking the backend for at most backendTimeout even when
// the client has gone. A backend that cannot say who holds the key makes it
// 503, not 409 (TestWaitThroughReplicaCutFromEtcd).
func (s *Server) stillHeld(ctx context.Context, key string, held error) error {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backendTimeout)
	defer cancel()
	return lease.StillHeld(gctx, s.backend, key, held)
}

func (s *Server) handleRenew(w *responseWriter, r *http.Request) {
	key, ok := s.keyRequest(w, r)
	if !ok {
		return
	}
	req, err := decodeRenew(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ctx, cancel := opContext(r)
	defer cancel()
	l, err := s.backend.Renew(ctx, lease.Lease{Key: key, Token: req.Token, ID: req.ID}, req.TTL)
	switch {
	case err == nil:
		s.metrics.renewals.done.Inc()
		s.tracker.renewed(l)
		writeLease(w, l, true)
		return
	case errors.Is(err, lease.ErrNotHeld):
		s.metrics.renewals.refused.Inc()
		s.tracker.notHeld(key, req.Token, req.ID)
	default:
		s.metrics.renewals.failed.Inc()
	}
	s.writeError(w, err)
}

// handleRenewBatch renews many leases in one request, through the
// backend's RenewBatch where it has one (one commit for all), else one
// Renew each (lease.RenewAll). The credential must cover every key; a
// malformed or uncovered renewal refuses the whole batch, before any is
// made. A renewal no longer held is answered not_held on its own. With
// Prefer: return=minimal (RFC 7240) a renewed lease is answered with only
// what a renewal can change, its TTL and expiry: the client has the rest.
func (s *Server) handleRenewBatch(w *responseWriter, r *http.Request) {
	c, ok := s.authorize(w, r)
	if !ok {
		return
	}
	if err := noQuery(r); err != nil {
		s.writeError(w, err)
		return
	}
	renewals, err := decodeRenewBatch(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	for _, rn := range renewals {
		if !c.covers(rn.Lease.Key) {
			s.writeError(w, fmt.Errorf("%w: this credential does not cover key %s", ErrForbidden, quoteName(rn.Lease.Key)))
			return
		}
	}
	ctx, cancel := opContext(r)
	defer cancel()
	results, err := lease.RenewAll(ctx, s.backend, renewals)
	if err != nil {
		s.metrics.renewals.failed.Add(float64(len(renewals)))
		s.writeError(w, err)
		return
	}
	refused := 0
	for _, res := range results {
		if res.Err != nil {
			refused++
		}
	}
	s.tracker.renewedBatch(renewals, results)
	s.metrics.renewals.refused.Add(float64(refused))
	s.metrics.renewals.done.Add(float64(len(results) - refused))
	minimal := prefersMinimal(r.Header)
	if minimal {
		w.Header().Set("Preference-Applied", "return=minimal")
	}
	writeAppended(w, http.StatusOK, func(b []byte) []byte { return appendRenewAnswer(b, results, minimal) })
}

func (s *Server) handleRelease(w *responseWriter, r *http.Request) {
	key, ok := s.keyRequest(w, r)
	if !ok {
		return
	}
	req, err := decodeRelease(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ctx, cancel := opContext(r)
	defer cancel()
	err = s.backend.Release(ctx, lease.Lease{Key: key, Token: req.Token, ID: req.ID})
	switch {
	case err == nil:
		s.metrics.releases.done.Inc()
		s.tracker.released(key, req.Token)
		s.queues.released(key)
		writeBody(w, http.StatusOK, emptyObject)
		return
	case errors.Is(err, lease.ErrNotHeld):
		s.metrics.releases.refused.Inc()
		s.tracker.notHeld(key, req.Token, req.ID)
	default:
		s.metrics.releases.failed.Inc()
	}
	s.writeError(w, err)
}

func (s *Server) handleGet(w *responseWriter, r *http.Request) {
	key, ok := s.keyRequest(w, r)
	if !ok {
		return
	}
	l, err := s.backend.Get(r.Context(), key)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeLease(w, l, false)
}

// handleList answers one page of the leases under ?prefix= that the
// credential covers, from ?after= for at most ?limit=. A prefix wider than
// the credential's is narrowed to the credential's prefixes inside it; a
// prefix that shares no key with them is 403.
func (s *Server) handleList(w *responseWriter, r *http.Request) {
	c, ok := s.authorize(w, r)
	if !ok {
		return
	}
	prefix, page, err := listQuery(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	prefixes := c.listPrefixes(prefix)
	if len(prefixes) == 0 {
		s.writeError(w, fmt.Errorf("%w: this credential covers no key under prefix %s", ErrForbidden, quoteName(prefix)))
		return
	}
	p, err := s.listUnder(r.Context(), prefixes, page)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeAppended(w, http.StatusOK, func(b []byte) []byte { return appendList(b, p) })
}

// listUnder is one page of the leases under any of prefixes, which are
// sorted and none of which starts with another, so that all keys under one
// come before all keys under the next: the page takes from each in turn,
// all from the same cursor, and asks the ones after a full page whether
// they hold more, so that Next is empty at the end.
func (s *Server) listUnder(ctx context.Context, prefixes []string, page lease.Page) (lease.ListPage, error) {
	if len(prefixes) == 1 {
		return s.backend.List(ctx, prefixes[0], page)
	}
	limit, _, err := lease.ParseList("", page)
	if err != nil {
		return lease.ListPage{}, err
	}
	var out []lease.Lease
	for _, p := range prefixes {
		need := limit - len(out)
		pg, err := s.backend.List(ctx, p, lease.Page{Limit: max(need, 1), After: page.After})
		if err != nil {
			return lease.ListPage{}, err
		}
		if need == 0 {
			if len(pg.Leases) > 0 {
				return lease.ListPage{Leases: out, Next: lease.Cursor(out[limit-1].Key)}, nil
			}
			continue
		}
		if out = append(out, pg.Leases...); pg.Next != "" {
			return lease.ListPage{Leases: out, Next: pg.Next}, nil
		}
	}
	return lease.ListPage{Leases: out}, nil
}

func (s *Server) handleHealthz(w *responseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 when the backend answers a Get, 503 when it does
// not or when the server is closing (so load balancers stop sending first).
func (s *Server) handleReadyz(w *responseWriter, r *http.Request) {
	if s.closing.Err() != nil {
		s.writeError(w, errShuttingDown)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.backend.Get(ctx, probeKey); err != nil && !errors.Is(err, lease.ErrNotFound) {
		s.writeError(w, fmt.Errorf("%w: leasehttp: readiness probe: %w", lease.ErrUnavailable, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// handleBadPath answers a /v1/ path that is not canonical (see ServeHTTP).
func (s *Server) handleBadPath(w *responseWriter, r *http.Request) {
	s.writeError(w, badRequest("path %s has an empty segment or a segment . or ..; a key is one "+
		"non-empty path segment, with / written %%2F and a key . or .. written %%2E", quoteName(r.URL.EscapedPath())))
}

// handleNoRoute answers what no route serves: 405 with Allow when the path
// has routes for other methods, else 404. ServeMux would answer 405 itself,
// but in plain text; the catch-all route that gives every answer the error
// body takes that over, so it is done here.
func (s *Server) handleNoRoute(w *responseWriter, r *http.Request) {
	if allow := s.allowedMethods(r); len(allow) > 0 {
		list := strings.Join(allow, ", ")
		w.Header().Set("Allow", list)
		s.writeError(w, &requestError{status: http.StatusMethodNotAllowed,
			msg: fmt.Sprintf("method %s is not allowed on %s; allowed: %s", quoteName(r.Method), quoteName(r.URL.EscapedPath()), list)})
		return
	}
	s.writeError(w, &requestError{status: http.StatusNotFound,
		msg: fmt.Sprintf("no route for %s %s", r.Method, quoteName(r.URL.EscapedPath()))})
}

// prefersMinimal reports whether h asks for the minimal answer: the first
// "return" preference of its Prefer headers (RFC 7240) is return=minimal.
// Preference names and this value are matched without regard to case; a
// value may be quoted; parameters after ";" are ignored.
func prefersMinimal(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for v != "" {
			var pref string
			pref, v = nextPreference(v)
			pref, _, _ = strings.Cut(pref, ";")
			name, value, _ := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "return") {
				continue
			}
			value = strings.TrimSpace(value)
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			return strings.EqualFold(value, "minimal")
		}
	}
	return false
}

// nextPreference splits v at its first comma outside a quoted string.
func nextPreference(v string) (pref, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return v[:i], v[i+1:]
		}
	}
	return v, ""
}
