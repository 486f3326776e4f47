package leasehttp

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehq/lease"
)

// DefaultHeartbeat is how long a watch stream stays silent before the
// server sends a comment line (": ping") unless WithHeartbeat says
// otherwise: well within the minute after which many proxies and load
// balancers cut an idle connection.
const DefaultHeartbeat = 15 * time.Second

// MinHeartbeat and MaxHeartbeat bound WithHeartbeat.
const (
	MinHeartbeat = 10 * time.Millisecond
	MaxHeartbeat = time.Hour
)

// DefaultMaxWatchers is how many watch streams one credential may have open
// at once unless WithMaxWatchers says otherwise.
const DefaultMaxWatchers = 64

// streamRetry asks EventSource clients to reconnect after a second, the
// Retry-After of an unavailable answer.
const streamRetry = "retry: 1000\n"

// WithHeartbeat sets how long a watch stream may stay silent before the
// server sends a heartbeat comment, MinHeartbeat to MaxHeartbeat. The
// default is DefaultHeartbeat. Each write to a stream, heartbeats included,
// must be taken by the client within the heartbeat plus the http.Server's
// WriteTimeout (the heartbeat again without one), or the stream is ended.
func WithHeartbeat(d time.Duration) ServerOption {
	return func(c *serverConfig) error {
		if d < MinHeartbeat || d > MaxHeartbeat {
			return fmt.Errorf("%w: leasehttp: heartbeat %v is outside [%v, %v]", lease.ErrInvalid, d, MinHeartbeat, MaxHeartbeat)
		}
		c.watch.heartbeat = d
		return nil
	}
}

// WithMaxWatchers bounds the watch streams one credential may have open at
// once, at least 1; on a server without credentials, all clients together.
// A watch beyond it is answered 429 too_many_watchers. The default is
// DefaultMaxWatchers.
func WithMaxWatchers(n int) ServerOption {
	return func(c *serverConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: leasehttp: max watchers %d is not positive", lease.ErrInvalid, n)
		}
		c.watch.max = n
		return nil
	}
}

// watchConfig is what WithHeartbeat and WithMaxWatchers set; zero means
// not set.
type watchConfig struct {
	heartbeat time.Duration
	max       int
}

// watches are the server's watch streams: the backend's watch ability and
// how many streams each credential has open.
type watches struct {
	watcher   lease.Watcher // nil: the backend cannot watch
	heartbeat time.Duration
	max       int
	last      lastEncoded

	mu   sync.Mutex
	open map[[sha256.Size]byte]int // by credential hash; the zero hash without credentials
}

func newWatches(b lease.Backend, cfg watchConfig) *watches {
	ws := &watches{heartbeat: cfg.heartbeat, max: cfg.max, open: map[[sha256.Size]byte]int{}}
	ws.watcher, _ = b.(lease.Watcher)
	if ws.heartbeat == 0 {
		ws.heartbeat = DefaultHeartbeat
	}
	if ws.max == 0 {
		ws.max = DefaultMaxWatchers
	}
	return ws
}

// join takes one of the credential's slots, reporting false if all are
// taken.
func (ws *watches) join(slot [sha256.Size]byte) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.open[slot] >= ws.max {
		return false
	}
	ws.open[slot]++
	return true
}

// full reports whether slot has as many streams open as the bound allows,
// so that join would refuse one more.
func (ws *watches) full(slot [sha256.Size]byte) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.open[slot] >= ws.max
}

func (ws *watches) leave(slot [sha256.Size]byte) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.open[slot]--; ws.open[slot] <= 0 {
		delete(ws.open, slot)
	}
}

// tooManyWatchers answers a watch past the bound of its credential.
func (s *Server) tooManyWatchers() error {
	return fmt.Errorf("%w: this credential has %d watch streams open, as many as the server allows; end one first",
		ErrTooManyWatchers, s.watches.max)
}

// errCannotWatch answers a watch on a backend that is not a lease.Watcher.
var errCannotWatch = fmt.Errorf("%w: leasehttp: this server's backend cannot watch; list the prefix instead", errors.ErrUnsupported)

// errCredentialsChanged ends a stream whose credential SetCredentials
// removed or changed: it was let in under rules no longer in force.
var errCredentialsChanged = fmt.Errorf("%w: leasehttp: the server's credentials changed since this watch began; watch again", lease.ErrUnavailable)

// watchBroke is the message a stream's error event gives for a break of
// the backend's watch. The backend's own error may name hosts and files;
// it goes to the log.
const watchBroke = "leasehttp: the watch broke (the backend failed, or this stream fell too far behind); watch again for the current state"

// lastEncoded keeps the data line of the last event a stream encoded,
// for the other streams: every watcher of a key gets the same event from
// the backend, one after another, and at a thousand streams encoding it
// once instead of a thousand times is a millisecond of CPU sooner to the
// last of them. An event that differs in any field is encoded afresh.
type lastEncoded struct{ p atomic.Pointer[encodedEvent] }

type encodedEvent struct {
	ev   lease.Event
	data []byte // the JSON of the lease as GET answers it; never changed
}

// data returns the JSON of ev's lease, without its ID.
func (c *lastEncoded) data(ev lease.Event) []byte {
	ev.Lease.ID = lease.ID{} // never sent; not part of the match either
	if e := c.p.Load(); e != nil && e.ev == ev {
		return e.data
	}
	// JSON escapes every line break, so the data is one line.
	j := appendLease(nil, ev.Lease, false, nil)
	c.p.Store(&encodedEvent{ev: ev, data: j})
	return j
}

// watchItem is one item of a backend's watch, as a stream's goroutines
// pass it on.
type watchItem struct {
	ev  lease.Event
	err error
}

// handleWatch streams the changes under ?prefix= that the credential covers,
// or those of exactly ?key=, as Server-Sent Events; see the package
// documentation. The prefix is narrowed as a list's is, one backend watch
// per prefix; a key must be covered whole.
func (s *Server) handleWatch(w *responseWriter, r *http.Request) {
	// Loaded before authorize reads the set: a swap in between then shows
	// as a change, and c is checked against the new set. The channel is
	// taken first, so that it is closed by any swap after the load.
	swapped := s.credentialsSwapped()
	credsAt := s.creds.Load()
	c, ok := s.authorize(w, r)
	if !ok {
		return
	}
	prefix, exact, err := watchQuery(r)
	if err == nil && r.ContentLength != 0 {
		// net/http would read what is left of it before the stream's
		// first byte: one that never comes whole would leave the stream
		// unanswered, holding its slot, until the read deadline.
		err = badRequest("a watch takes no request body")
	}
	if err == nil && !acceptsEventStream(r) {
		err = &requestError{status: http.StatusNotAcceptable,
			msg: fmt.Sprintf("Accept %s rules out text/event-stream, the only type a watch answers (GET /v1/leases lists as JSON)",
				quoteName(strings.Join(r.Header.Values("Accept"), ", ")))}
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	var prefixes []string
	if !exact {
		prefixes = c.listPrefixes(prefix)
	} else if c.covers(prefix) {
		prefixes = []string{prefix}
	}
	switch {
	case len(prefixes) == 0 && exact:
		s.writeError(w, fmt.Errorf("%w: this credential does not cover key %s", ErrForbidden, quoteName(prefix)))
		return
	case len(prefixes) == 0:
		s.writeError(w, fmt.Errorf("%w: this credential covers no key under prefix %s", ErrForbidden, quoteName(prefix)))
		return
	case s.watches.watcher == nil:
		s.writeError(w, errCannotWatch)
		return
	case s.closing.Err() != nil:
		s.writeError(w, errShuttingDown)
		return
	}
	var slot [sha256.Size]byte
	if c != nil {
		slot = c.sum
	}
	if r.Method == http.MethodHead {
		// What GET would answer now, without taking a slot.
		if s.watches.full(slot) {
			s.writeError(w, s.tooManyWatchers())
			return
		}
		streamHeaders(w, s.watches.heartbeat)
		return
	}
	if !s.watches.join(slot) {
		s.writeError(w, s.tooManyWatchers())
		return
	}
	defer s.watches.leave(slot)
	s.metrics.watchers.Inc()
	defer s.metrics.watchers.Dec()

	ctx, cancel := context.WithCancel(r.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the Wait: it ends the goroutines
	// Each prefix's watch sends its snapshot on a channel of its own, which
	// is read prefix by prefix, then its changes on the shared one. The
	// prefixes do not overlap and come sorted, so their snapshots in turn
	// are in key order, and each key's changes come from one goroutine, in
	// order. A watch blocked on a channel keeps its changes in the
	// backend's buffer, which cuts it off if it fills.
	changes := make(chan watchItem, 64)
	snaps := make([]chan watchItem, len(prefixes))
	for i, p := range prefixes {
		snaps[i] = make(chan watchItem)
		wg.Go(func() { forwardWatch(ctx, s.watches.watcher, p, exact, snaps[i], changes) })
	}

	// The headers wait for the first prefix's watch to start (its first
	// item): a backend that cannot watch now (a replica cut from etcd) is
	// then answered with its error's status, 503, which moves a client
	// listing several replicas on to the next, rather than with a 200
	// stream that ends at once and keeps the client on this replica.
	var first watchItem
	select {
	case first = <-snaps[0]:
	case <-s.closing.Done():
		s.writeError(w, errShuttingDown)
		return
	case <-ctx.Done():
		return
	}
	if first.err != nil {
		s.writeError(w, first.err)
		return
	}
	st := newEventStream(w, r, s.watches.heartbeat)
	st.encoded = &s.watches.last
	defer st.close()
	// A write blocked on a client that reads nothing cannot see Close; its
	// deadline, the heartbeat plus the write timeout, would hold up the
	// http.Server's Shutdown that long.
	defer context.AfterFunc(s.closing, st.cutShort)()
	st.start(r.Header.Get("Last-Event-ID") != "")
	err = s.runStream(ctx, st, c, credsAt, swapped, first, snaps, changes)
	if errors.Is(err, errClientGone) {
		return
	}
	w.err = err
	msg := watchBroke
	if errors.Is(err, errShuttingDown) || errors.Is(err, errCredentialsChanged) {
		msg = err.Error() // our own words, not the backend's
	}
	st.fail(kindOf(err).code, msg)
}

// acceptsEventStream reports whether r's Accept admits text/event-stream:
// the most specific range that matches it (the type itself, text/*, */*)
// has a q above 0. No Accept, or none that parses, admits anything. A
// watch answered to a client that asked for JSON alone would never end,
// and a client reading the answer to its end would hang.
func acceptsEventStream(r *http.Request) bool {
	best, q, parsed := 0, 0.0, false
	for _, v := range r.Header.Values("Accept") {
		for rng := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(rng)
			if err != nil {
				continue
			}
			parsed = true
			rank := 0
			switch mt {
			case "text/event-stream":
				rank = 3
			case "text/*":
				rank = 2
			case "*/*":
				rank = 1
			default:
				continue
			}
			rq := 1.0
			if s, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(s, 64); err == nil && f >= 0 && f <= 1 {
					rq = f
				}
			}
			switch {
			case rank > best:
				best, q = rank, rq
			case rank == best:
				q = max(q, rq)
			}
		}
	}
	return !parsed || q > 0
}

// runStream writes the snapshots, the first's first item already read,
// and then the changes until the stream ends, and returns why:
// errClientGone when the client went away or a write failed, else the
// error to tell the client.
func (s *Server) runStream(ctx context.Context, st *eventStream, c *credential, credsAt *[]credential,
	swapped <-chan struct{}, first watchItem, snaps []chan watchItem, changes chan watchItem) error {
	beat := time.NewTimer(st.heartbeat)
	defer beat.Stop()
	// next waits for an item from ch, sending heartbeats meanwhile.
	next := func(ch chan watchItem) (watchItem, error) {
		for {
			select {
			case it := <-ch:
				if it.err != nil {
					return it, it.err
				}
				if !s.credentialKept(c, &credsAt) {
					return it, errCredentialsChanged
				}
				return it, nil
			case <-swapped:
				swapped = s.credentialsSwapped() // before the check, as in handleWatch
				if !s.credentialKept(c, &credsAt) {
					return watchItem{}, errCredentialsChanged
				}
			case <-beat.C:
				if !s.credentialKept(c, &credsAt) {
					return watchItem{}, errCredentialsChanged
				}
				if err := st.heartbeatNow(); err != nil {
					return watchItem{}, err
				}
				beat.Reset(st.heartbeat)
			case <-s.closing.Done():
				return watchItem{}, errShuttingDown
			case <-ctx.Done():
				return watchItem{}, errClientGone
			}
		}
	}
	pending := &first
	take := func(snap chan watchItem) (watchItem, error) {
		if p := pending; p != nil {
			pending = nil
			return *p, nil
		}
		return next(snap)
	}
	for _, snap := range snaps {
		for {
			it, err := take(snap)
			if err != nil {
				return err
			}
			if it.ev.Kind == lease.Synced {
				break
			}
			if err := st.event(it.ev); err != nil {
				return err
			}
		}
	}
	if err := st.event(lease.Event{Kind: lease.Synced}); err != nil {
		return err
	}
	for {
		if err := st.flush(); err != nil {
			return err
		}
		beat.Reset(st.heartbeat)
		it, err := next(changes)
		if err != nil {
			return err
		}
		if err := st.event(it.ev); err != nil {
			return err
		}
		// Flush once for what is already waiting, not per event; only this
		// goroutine receives, so a receive after len > 0 does not block.
		for i := 0; i < 256 && len(changes) > 0; i++ {
			it := <-changes
			if it.err != nil {
				return it.err
			}
			if !s.credentialKept(c, &credsAt) {
				return errCredentialsChanged
			}
			if err := st.event(it.ev); err != nil {
				return err
			}
		}
	}
}

// credentialKept reports whether the credential c that a stream was let in
// with is still in the server's set, with the same prefixes. seen is the set
// last checked, so that the check is one atomic load until SetCredentials
// swaps the set.
func (s *Server) credentialKept(c *credential, seen **[]credential) bool {
	cur := s.creds.Load()
	if cur == *seen || c == nil {
		return true // unchanged, or no credentials (which stays so)
	}
	n := sameToken(*cur, c)
	if n == nil || n.all != c.all || !slices.Equal(n.prefixes, c.prefixes) {
		return false
	}
	*seen = cur
	return true
}

// sameToken is the credential of set with c's token, or nil when the set
// has none (the token withdrawn).
func sameToken(set []credential, c *credential) *credential {
	for i := range set {
		if set[i].sum == c.sum {
			return &set[i]
		}
	}
	return nil
}

// forwardWatch runs the backend's watch of prefix (of exactly that key, if
// exact: lease.WatchKey), sending its snapshot and Synced on snap and then
// its changes on changes, until ctx ends or the watch breaks (its error is
// sent on).
func forwardWatch(ctx context.Context, w lease.Watcher, prefix string, exact bool, snap, changes chan<- watchItem) {
	out := snap
	send := func(it watchItem) bool {
		select {
		case out <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	seq := w.Watch
	if exact {
		seq = func(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
			return lease.WatchKey(ctx, w, key)
		}
	}
	for ev, err := range seq(ctx, prefix) {
		if !send(watchItem{ev: ev, err: err}) || err != nil {
			return
		}
		if ev.Kind == lease.Synced {
			out = changes
		}
	}
	if ctx.Err() == nil { // the contract says this does not happen
		send(watchItem{err: fmt.Errorf("%w: leasehttp: the backend's watch of %s ended by itself", lease.ErrUnavailable, quoteName(prefix))})
	}
}

// eventStream writes a text/event-stream answer, keeping the connection's
// deadlines ahead of it: the http.Server's read and write timeouts bound a
// request from its start, which would cut every stream, so each write
// moves them to the heartbeat plus the write timeout from now. A client
// that stops reading then blocks a write past that deadline and the stream
// ends; one that reads slowly but steadily is not cut off.
type eventStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	heartbeat time.Duration
	slack     time.Duration // the write timeout, or the heartbeat without one
	readDL    bool          // whether the server has a read timeout to move
	ownDL     bool          // whether the server has no write timeout of its own
	n         uint64        // events written: the next id is n+1
	buf       []byte
	encoded   *lastEncoded // shared with the server's other streams; nil: encode each event
	moved     time.Time    // when extend last moved the deadlines

	mu  sync.Mutex // orders extend and cutShort
	cut bool       // cutShort was called: extend moves nothing
}

// closeGrace is how long a stream's writes may still take once the server
// closes: its end event reaches a client that reads at once, and one that
// takes nothing for this long is cut off rather than hold up shutdown.
const closeGrace = time.Second

// extendEvery is how often, at most, a stream moves its connection's
// deadlines: moving one takes a lock and a timer change in the runtime,
// which a burst of events would otherwise pay twice per event per stream.
// The deadlines are set this much further out, so that every write still
// gets at least the heartbeat plus the slack.
const extendEvery = 10 * time.Millisecond

func newEventStream(w http.ResponseWriter, r *http.Request, heartbeat time.Duration) *eventStream {
	st := &eventStream{w: w, rc: http.NewResponseController(w), heartbeat: heartbeat, slack: heartbeat, ownDL: true}
	if hs, _ := r.Context().Value(http.ServerContextKey).(*http.Server); hs != nil {
		if hs.WriteTimeout > 0 {
			st.slack, st.ownDL = hs.WriteTimeout, false
		}
		st.readDL = hs.ReadTimeout > 0
	}
	return st
}

// close takes away the write deadline the stream set on a connection whose
// server has none, so it does not cut a later request on the connection.
func (st *eventStream) close() {
	if st.ownDL {
		_ = st.rc.SetWriteDeadline(time.Time{})
	}
}

// extend moves the connection's deadlines; the errors say the connection
// has none (not served by net/http), and then nothing cuts the stream.
func (st *eventStream) extend() {
	now := time.Now()
	if now.Sub(st.moved) < extendEvery {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cut {
		return
	}
	st.moved = now
	dl := now.Add(st.heartbeat + st.slack + extendEvery)
	_ = st.rc.SetWriteDeadline(dl)
	if st.readDL {
		// Past the read deadline net/http's watch for a hang-up fails and
		// cancels the request as if the client had gone.
		_ = st.rc.SetReadDeadline(dl)
	}
}

// cutShort sets the write deadline closeGrace from now, for good: called
// from another goroutine when the server closes, it ends a write blocked
// on a client that reads nothing.
func (st *eventStream) cutShort() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.cut = true
	_ = st.rc.SetWriteDeadline(time.Now().Add(closeGrace))
}

func streamHeaders(w http.ResponseWriter, heartbeat time.Duration) {
	h := w.Header()
	h.Set(HeartbeatHeader, strconv.FormatInt(heartbeat.Milliseconds(), 10))
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no") // nginx would hold events back in its buffer
	w.WriteHeader(http.StatusOK)
}

// start sends the headers and the reconnection delay at once, once the
// backend's watch has begun, before the rest of the snapshot is read.
func (st *eventStream) start(resumed bool) {
	st.extend()
	streamHeaders(st.w, st.heartbeat)
	_, _ = st.w.Write([]byte(streamRetry))
	if resumed {
		// Last-Event-ID names an event of an earlier stream; no history is
		// kept, so the stream starts over. Said for people reading it.
		_, _ = st.w.Write([]byte(": no replay after Last-Event-ID; the current state follows\n"))
	}
	_, _ = st.w.Write(newline)
	_ = st.rc.Flush()
}

// event writes ev as one message: id, event (the kind) and data (the lease
// as GET answers it; {} for synced).
func (st *eventStream) event(ev lease.Event) error {
	st.extend()
	st.n++
	b := append(st.buf[:0], "id: "...)
	b = strconv.AppendUint(b, st.n, 10)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Kind.String()...)
	b = append(b, "\ndata: "...)
	if ev.Kind == lease.Synced {
		b = append(b, "{}"...)
	} else if st.encoded != nil {
		b = append(b, st.encoded.data(ev)...)
	} else {
		b = append(b, (&lastEncoded{}).data(ev)...)
	}
	b = append(b, "\n\n"...)
	st.buf = b
	if _, err := st.w.Write(b); err != nil {
		return fmt.Errorf("%w: writing the stream: %w", errClientGone, err)
	}
	return nil
}

func (st *eventStream) heartbeatNow() error {
	st.extend()
	if _, err := st.w.Write([]byte(": ping\n\n")); err != nil {
		return fmt.Errorf("%w: writing the stream: %w", errClientGone, err)
	}
	return st.flush()
}

func (st *eventStream) flush() error {
	st.extend()
	if err := st.rc.Flush(); err != nil {
		return fmt.Errorf("%w: writing the stream: %w", errClientGone, err)
	}
	return nil
}

// EndEvent names the last message of a watch stream, whose data is the
// error body of an HTTP answer saying why the server ended it. Not
// "error": an EventSource fires its own "error" event when the connection
// drops, and a listener for the server's would get both, without the
// reason in the browser's.
const EndEvent = "end"

// fail ends the stream with an end event, whose data is the error body of
// an HTTP answer; it has no id, being no lease event.
func (st *eventStream) fail(code, msg string) {
	body := appendError(nil, code, msg, nil)
	st.extend()
	_, _ = st.w.Write([]byte("event: " + EndEvent + "\ndata: "))
	_, _ = st.w.Write(body)
	_, _ = st.w.Write([]byte("\n\n"))
	_ = st.rc.Flush()
}
