package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehq/lease"
)

// A message is one request in flight from a client to the backend or to
// the resource, or its reply on the way back. The driver decides when (and
// whether) each is delivered.
type message struct {
	id     msgID
	desc   string
	apply  func() (any, error) // runs at the far end on delivery; nil for a reply
	reply  chan result         // the caller waits here
	result result              // for a reply: what to hand back
	to     target
}

type target int

const (
	toBackend target = iota
	toResource
)

type msgID struct {
	client int
	seq    int
	leg    int // 0 request, 1 reply
}

func (id msgID) less(o msgID) bool {
	if id.client != o.client {
		return id.client < o.client
	}
	if id.seq != o.seq {
		return id.seq < o.seq
	}
	return id.leg < o.leg
}

type result struct {
	v   any
	err error
}

// errCrashed is what the goroutines of a crashed client see.
var errCrashed = fmt.Errorf("%w: sim: process crashed", lease.ErrUnavailable)

// errTimeout is what a caller sees when its request or the reply was lost.
var errTimeout = fmt.Errorf("%w: sim: no reply (message lost)", lease.ErrUnavailable)

// send puts a request on the wire and waits for its reply, or for ctx.
func (s *Sim) send(ctx context.Context, c *simClient, to target, desc string, apply func() (any, error)) (any, error) {
	s.mu.Lock()
	if c.crashed {
		// A dead process sends nothing more; what it sent before may still arrive.
		s.mu.Unlock()
		return nil, errCrashed
	}
	c.seq++
	m := &message{id: msgID{c.idx, c.seq, 0}, desc: desc, apply: apply, reply: make(chan result, 1), to: to}
	s.pending = append(s.pending, m)
	s.mu.Unlock()
	select {
	case r := <-m.reply:
		return r.v, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// deliverable returns the messages that may be delivered now, in a
// deterministic order: paused and crashed clients' traffic waits.
func (s *Sim) deliverableLocked(now time.Time) []*message {
	var out []*message
	for _, m := range s.pending {
		c := s.clients[m.id.client]
		if c.crashed || now.Before(c.pausedUntil) {
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *message) int {
		if a.id.less(b.id) {
			return -1
		}
		return 1
	})
	return out
}

func (s *Sim) removeLocked(m *message) {
	s.pending = slices.DeleteFunc(s.pending, func(x *message) bool { return x == m })
}

// deliver hands m to its far end. A request runs there (unless the backend
// is down) and its reply is queued as a new message; a reply reaches its
// caller. Lost messages time out at the caller instead.
func (s *Sim) deliver(m *message, lose bool) {
	s.mu.Lock()
	s.removeLocked(m)
	s.mu.Unlock()
	if m.apply == nil { // a reply
		if lose {
			s.tracef("lost reply %s", m.desc)
			m.reply <- result{err: errTimeout}
			return
		}
		m.reply <- m.result
		return
	}
	if lose {
		s.tracef("lost request %s", m.desc)
		m.reply <- result{err: errTimeout}
		return
	}
	var r result
	if s.backendDown && m.to == toBackend {
		r = result{err: fmt.Errorf("%w: sim: backend restarting", lease.ErrUnavailable)}
	} else {
		r.v, r.err = m.apply()
	}
	s.tracef("%s -> %s", m.desc, describe(r))
	s.mu.Lock()
	s.pending = append(s.pending, &message{id: msgID{m.id.client, m.id.seq, 1}, desc: m.desc, reply: m.reply, result: r, to: m.to})
	s.mu.Unlock()
}

func describe(r result) string {
	if r.err != nil {
		var he *lease.HeldError
		if errors.As(r.err, &he) {
			return fmt.Sprintf("held (token %d)", he.Token)
		}
		return r.err.Error()
	}
	switch v := r.v.(type) {
	case lease.Lease:
		return fmt.Sprintf("token %d", v.Token)
	case nil:
		return "ok"
	default:
		return fmt.Sprint(v)
	}
}
