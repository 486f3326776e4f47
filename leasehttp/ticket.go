package leasehttp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// DefaultWaitGrace is how long the server keeps a ticketed wait in line
// after its request ended at the server's max wait, for the client to ask
// again, unless WithWaitGrace says otherwise.
const DefaultWaitGrace = 2 * time.Second

// MaxWaitGrace is the largest WithWaitGrace accepted: a wait kept longer
// for a client that does not come back stalls everyone behind it longer.
const MaxWaitGrace = time.Minute

// WithWaitGrace sets how long a wait that carries a ticket (the acquire
// member "ticket") stays in line after its request reached the server's
// max wait: a request with the same ticket, key, owner and TTL within
// the grace takes the wait over where it stands, so that a wait of any
// length keeps its place first come, first served. A client that does not
// come back leaves the line when the grace ends, and a lease granted to it
// meanwhile is released then. 0 turns tickets off: every request joins
// the back of the line. At most MaxWaitGrace; the default is
// DefaultWaitGrace.
func WithWaitGrace(d time.Duration) ServerOption {
	return func(c *serverConfig) error {
		if d < 0 || d > MaxWaitGrace {
			return fmt.Errorf("%w: leasehttp: wait grace %v is outside [0, %v]", lease.ErrInvalid, d, MaxWaitGrace)
		}
		c.grace = d
		return nil
	}
}

// errGraceOver ends a ticketed wait whose client did not ask again in time.
var errGraceOver = errors.New("leasehttp: the client did not resume its wait within the grace")

// tickets keeps the ticketed waits in line, by key and ticket. A ticketed
// wait runs on its own goroutine, as acquireWaiting would for a request,
// and outlives the requests that follow it: each attaches, waits at most
// its wait_ms for the outcome, and detaches; while none is attached the
// grace runs. Its place in the line (the backend's or the server's queue)
// is the goroutine's, so it does not move between requests.
type tickets struct {
	grace time.Duration
	mu    sync.Mutex
	m     map[ticketKey]*ticketWait
}

type ticketKey struct {
	key    string
	ticket lease.ID
}

// ticketWait is one ticketed wait.
type ticketWait struct {
	owner  string
	ttl    time.Duration
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the wait ended; l and err are set

	l   lease.Lease
	err error

	// Guarded by tickets.mu.
	attached bool
	away     bool        // the wait ended while no request was attached
	grace    *time.Timer // running while detached
}

func newTickets(grace time.Duration) *tickets {
	return &tickets{grace: grace, m: map[ticketKey]*ticketWait{}}
}

// acquireTicket is acquireWaiting for a request that carries a ticket: it
// joins the line, or takes over the wait its ticket already holds there,
// and waits for the outcome at most req.Wait.
func (s *Server) acquireTicket(rctx context.Context, c *credential, key string, req acquireRequest) (lease.Lease, error) {
	tk := ticketKey{key, req.Ticket}
	tw, err := s.tickets.attach(tk, req)
	if err != nil {
		return lease.Lease{}, err
	}
	if tw == nil {
		tw = s.startTicket(tk, req)
	}
	timer := time.NewTimer(req.Wait)
	defer timer.Stop()
	uncovered := make(chan error, 1)
	wctx, stopCovered := context.WithCancel(rctx)
	defer stopCovered()
	s.whileCovered(wctx, c, key, func(err error) { uncovered <- err })
	select {
	case err := <-uncovered:
		// A reload took the key from the credential: the wait leaves the
		// line, and a lease it was granted meanwhile is given back.
		s.tickets.remove(tk, tw)
		tw.cancel(err)
		<-tw.done
		if tw.err == nil {
			s.giveBack(rctx, tw.l)
		}
		return lease.Lease{}, err
	case <-tw.done:
	case <-timer.C:
		if req.Last && !req.Capped {
			// The client will not come back: the wait leaves the line.
			s.tickets.remove(tk, tw)
			tw.cancel(errWaitOver)
			<-tw.done
			break
		}
		if s.tickets.detach(tk, tw) {
			err := s.stillHeld(rctx, key, nil)
			if !errors.Is(err, lease.ErrHeld) {
				// Told 503, the client does not come back for this wait
				// (its AcquireWait ends; a client listing several replicas
				// moves on): it leaves the line now, not at the grace,
				// where it would stand ahead of the client's next wait.
				tw.cancel(err)
			}
			return lease.Lease{}, err
		}
		<-tw.done // it ended as the wait ran out: answer its outcome
	case <-rctx.Done():
		// The client hung up: its wait leaves the line now, and a request
		// with the same ticket starts a new one.
		s.tickets.remove(tk, tw)
		tw.cancel(context.Cause(rctx))
		<-tw.done
	}
	s.tickets.remove(tk, tw)
	if tw.err != nil || !tw.awayWhenDone(s.tickets) {
		return tw.l, tw.err
	}
	// Granted while no request was attached: the client counts the lease's
	// time from this request, so the lease must last ttl from now (I5).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rctx), backendTimeout)
	defer cancel()
	return s.backend.Renew(ctx, tw.l, tw.ttl)
}

// startTicket starts the wait of a new ticket, attached to the request
// that brought it.
func (s *Server) startTicket(tk ticketKey, req acquireRequest) *ticketWait {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := context.AfterFunc(s.closing, func() { cancel(errShuttingDown) })
	tw := &ticketWait{owner: req.Owner, ttl: req.TTL, cancel: cancel, done: make(chan struct{}), attached: true}
	s.tickets.mu.Lock()
	s.tickets.m[tk] = tw
	s.tickets.mu.Unlock()
	go func() {
		defer stop()
		defer cancel(nil)
		l, err := s.waitFor(ctx, tk.key, req.Owner, req.TTL)
		if err != nil && ctx.Err() != nil {
			err = s.waitEnded(ctx, tk.key, heldOrNil(err))
		}
		s.tickets.finish(tk, tw, l, err, func() {
			s.giveBack(context.Background(), l) // nobody came back for it
		})
	}()
	return tw
}

// heldOrNil is err if it says the key is held, else nil.
func heldOrNil(err error) error {
	if errors.Is(err, lease.ErrHeld) {
		return err
	}
	return nil
}

// attach finds the wait of tk and attaches the request to it; nil when
// there is none. A ticket in use by a request, or with another owner or
// TTL, is refused: tickets are not shared.
func (t *tickets) attach(tk ticketKey, req acquireRequest) (*ticketWait, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tw := t.m[tk]
	switch {
	case tw == nil:
		return nil, nil
	case tw.attached:
		return nil, badRequest("field \"ticket\": a request with this ticket is already waiting")
	case tw.owner != req.Owner || tw.ttl != req.TTL:
		return nil, badRequest("field \"ticket\": the ticket is waiting with another owner or ttl_ms")
	}
	tw.attached = true
	if tw.grace != nil {
		tw.grace.Stop()
	}
	return tw, nil
}

// detach lets the request go and starts the grace; false when the wait
// has already ended (the request then answers its outcome).
func (t *tickets) detach(tk ticketKey, tw *ticketWait) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-tw.done:
		return false
	default:
	}
	tw.attached = false
	tw.grace = time.AfterFunc(t.grace, func() { tw.cancel(errGraceOver) })
	return true
}

// finish records the wait's outcome. A lease granted while no request is
// attached waits for one until the grace ends (at most half the lease's
// TTL), then giveBack releases it.
func (t *tickets) finish(tk ticketKey, tw *ticketWait, l lease.Lease, err error, giveBack func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tw.l, tw.err = l, err
	close(tw.done)
	if tw.attached {
		return
	}
	tw.away = true
	if tw.grace != nil {
		tw.grace.Stop()
	}
	if err != nil {
		delete(t.m, tk)
		return
	}
	tw.grace = time.AfterFunc(min(t.grace, tw.ttl/2), func() {
		t.mu.Lock()
		taken := t.m[tk] != tw || tw.attached
		if !taken {
			delete(t.m, tk)
		}
		t.mu.Unlock()
		if !taken {
			giveBack()
		}
	})
}

// remove forgets tk's wait once a request has taken its outcome.
func (t *tickets) remove(tk ticketKey, tw *ticketWait) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[tk] == tw {
		delete(t.m, tk)
	}
}

// awayWhenDone says whether the wait ended while no request was attached.
func (tw *ticketWait) awayWhenDone(t *tickets) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tw.away
}
