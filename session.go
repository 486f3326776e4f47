package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Session is a group of holds that live and die together, as the keys
// attached to one etcd concurrency.Session do: when one of its holds is
// lost, the session ends — its context is cancelled with that loss as
// cause (matching ErrLost) — and every other hold in it is released at once,
// its own context cancelled with a cause matching ErrLost too, so that no
// work goes on under part of the group. Close ends it on purpose.
//
// A Session adds nothing to renewal: the holds of a Client are renewed
// together anyway (Hold), each judged by its own deadline; a Session only
// ties their ends together. A hold released by itself (Hold.Release) just
// leaves the session. A Session is safe for concurrent use.
type Session struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	holds     map[*Hold]func() bool // each live hold → stops its watch
	ended     bool
	others    error          // set when Err found a hold lost: the cause the rest end with
	untold    error          // the backend's errors releasing the holds at an end caused by a loss, for the next Close
	acquiring sync.WaitGroup // the Acquires and TryAcquires in flight, added to while !ended

	finished chan struct{} // closed once the session's end has ended every hold
}

// NewSession starts an empty session of holds acquired through c.
func (c *Client) NewSession() *Session {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Session{c: c, ctx: ctx, cancel: cancel, holds: map[*Hold]func() bool{}, finished: make(chan struct{})}
}

// Context returns a context cancelled when the session ends: with a cause
// matching ErrLost when one of its holds was lost, ErrReleased after Close.
func (s *Session) Context() context.Context { return s.ctx }

// Done is closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the session lives, and afterwards the cause of its
// end (matching ErrLost or ErrReleased). Like Hold.Err it judges each
// hold's deadline itself, so a hold whose deadline has passed ends the
// session even before its timer has run.
func (s *Session) Err() error {
	s.mu.Lock()
	holds := make([]*Hold, 0, len(s.holds))
	for h := range s.holds {
		holds = append(holds, h)
	}
	s.mu.Unlock()
	for _, h := range holds {
		// A loss Err finds cancels h, whose watch then ends the session and
		// releases the rest, but in a goroutine of its own: end the
		// session's context here too, so that this Err already says so.
		if err := h.Err(); err != nil && !errors.Is(err, ErrReleased) {
			s.mu.Lock()
			if !s.ended && s.others == nil {
				s.others = sameSession(h, err)
			}
			s.mu.Unlock()
			s.cancel(err)
		}
	}
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// Acquire is Client.Acquire for a hold in the session. After the session
// has ended it fails with the cause of the end, holding nothing; and so
// does a wait in progress when the session ends (a loss, Close): it
// returns at once, and a lease granted as it ended is given back.
func (s *Session) Acquire(ctx context.Context, key string, ttl time.Duration) (*Hold, error) {
	return s.acquire(ctx, key, ttl, s.c.Acquire)
}

// TryAcquire is Client.TryAcquire for a hold in the session. After the
// session has ended it fails with the cause of the end, holding nothing,
// as does a request in flight when it ends.
func (s *Session) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Hold, error) {
	return s.acquire(ctx, key, ttl, s.c.TryAcquire)
}

// acquire runs get, the Client's Acquire or TryAcquire, under ctx and the
// session's life: the session's end cancels it with the session's cause,
// and the session's end (finish) waits for it to return, so that a lease
// it was granted is released (join) before Close says none is left.
func (s *Session) acquire(ctx context.Context, key string, ttl time.Duration, get func(context.Context, string, time.Duration) (*Hold, error)) (*Hold, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, context.Cause(s.ctx)
	}
	s.acquiring.Add(1)
	s.mu.Unlock()
	defer s.acquiring.Done()
	actx, cancel := context.WithCancelCause(settleIn(ctx, &s.acquiring))
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	defer stop()
	h, err := get(actx, key, ttl)
	if err != nil {
		if s.ctx.Err() != nil && ctx.Err() == nil {
			return nil, context.Cause(s.ctx) // the session ended the wait
		}
		return nil, err
	}
	return s.join(ctx, h)
}

// join adds h to the session, or releases it (for at most its TTL, as
// finish does) if the session ended meanwhile.
func (s *Session) join(ctx context.Context, h *Hold) (*Hold, error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.ttl)
		defer cancel()
		_ = h.end(rctx, fmt.Errorf("%w: lease: the session ended while %q was acquired", ErrLost, h.key))
		return nil, context.Cause(s.ctx)
	}
	s.holds[h] = context.AfterFunc(h.ctx, func() { s.ended1(h) })
	s.mu.Unlock()
	return h, nil
}

// ended1 runs when h's context ends: a hold released by itself leaves the
// session, a lost one ends it.
func (s *Session) ended1(h *Hold) {
	s.mu.Lock()
	if _, ok := s.holds[h]; !ok {
		s.mu.Unlock()
		return
	}
	cause := context.Cause(h.ctx)
	if errors.Is(cause, ErrReleased) {
		delete(s.holds, h)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	// h stays among the holds finish releases: the backend may still hold
	// its lease (the client gave it up at its safe deadline, or a renewal
	// in flight then made it longer), and only its release frees it now.
	_ = s.finish(context.Background(), sameSession(h, cause), cause)
}

// sameSession is the cause the other holds of a session end with when h
// was lost with cause.
func sameSession(h *Hold, cause error) error {
	return fmt.Errorf("%w: lease: %q, in the same session, was lost: %w", ErrLost, h.key, cause)
}

// finish ends the session's context with ctxCause and releases every hold
// still in it on ctx's values, each ended with cause — or, when Err has
// found a hold lost and ended the context with that loss already, as
// that loss ends them, with nothing to report (the loss is the session's
// Err). It and a finish after the first wait until every hold has ended
// and every acquisition in flight has given back what it was granted, or
// until ctx ends (ctx's cause).
func (s *Session) finish(ctx context.Context, cause, ctxCause error) error {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		select {
		case <-s.finished:
			s.mu.Lock()
			defer s.mu.Unlock()
			err := s.untold // told once, to the first Close after a loss
			s.untold = nil
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s.ended = true
	byLoss := !errors.Is(ctxCause, ErrReleased) // ended1's: nobody hears its answer
	s.cancel(ctxCause)
	report := s.others == nil
	if !report {
		cause = s.others
	}
	holds := s.holds
	s.holds = nil
	s.mu.Unlock()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		errs        []error
		backendErrs []error // errs but the losses: the releases that failed
	)
	for h, stop := range holds {
		stop()
		wg.Go(func() {
			// At most the hold's TTL: by then its lease has expired anyway.
			ctx, cancel := context.WithTimeout(ctx, h.ttl)
			defer cancel()
			err := h.end(ctx, cause)
			var berr error // the backend's answer to the release
			switch {
			case errors.Is(err, ErrLost):
				// h was lost before: end reports the loss, not the
				// backend's answer. Ask again, answered ErrNotHeld if
				// the release went through (as election.Term.Resign).
				berr = s.c.backend.Release(ctx, h.Lease())
			case err != nil:
				berr = err
			}
			if errors.Is(berr, ErrNotHeld) {
				berr = nil
			}
			if (err != nil && !errors.Is(err, ErrNotHeld)) || berr != nil {
				mu.Lock()
				if errors.Is(err, ErrLost) {
					errs = append(errs, err)
				}
				if berr != nil {
					errs = append(errs, berr)
					backendErrs = append(backendErrs, berr)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if byLoss {
		s.mu.Lock()
		s.untold = errors.Join(backendErrs...)
		s.mu.Unlock()
	}
	// The Acquires in flight, cancelled above with the session's context,
	// return at once and give back what they were granted: join's release,
	// or acquireOnce's of a grant still on its way (each within its TTL).
	go func() {
		s.acquiring.Wait()
		close(s.finished)
	}()
	select {
	case <-s.finished:
	case <-ctx.Done():
		return errors.Join(append(errs, context.Cause(ctx))...)
	}
	if !report {
		return errors.Join(backendErrs...)
	}
	return errors.Join(errs...)
}

// Close ends the session with cause ErrReleased and releases every hold in
// it, each as Hold.Release does (for at most its TTL). It returns the
// holds' losses and the backend's errors, joined. After the session ended
// by a loss it returns the backend's errors releasing the holds, or nil
// (the loss is the session's Err), once they are released or given up;
// calling it again returns nil; and either returns ctx's cause if ctx ends
// first. So when Close returns nil, no lease of the session is left held
// by it — the lost hold's included, which the backend may have held a
// little longer than the client vouched for it — and the same keys can be
// acquired again at once. That takes in the session's Acquires and
// TryAcquires in flight: they end with ErrReleased, and Close returns
// once what they were granted is given back (a leasehttp.Client's
// AcquireWait, which gives a grant back in its own background, aside; and
// a give-back the backend refuses leaves that grant to its TTL, as for
// Client.TryAcquire, unreported).
func (s *Session) Close(ctx context.Context) error {
	return s.finish(ctx, ErrReleased, ErrReleased)
}
