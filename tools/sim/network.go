package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehq/lease"
)

// A message is one request in flight from a client to the backend or to
// the resource, or its reply on the way back, or one event of a watch on
// its way to the client. The driver decides when (and whether) each is
// delivered.
type message struct {
	id     msgID
	desc   string
	apply  func() (any, error) // runs at the far end on delivery; nil for a reply
	reply  chan result         // the caller waits here
	result result              // for a reply: what to hand back
	to     target
	st     *stream // for a watch event: its stream, and which of its pending events
	event  int
	fresh  bool // a request sent since the driver's last quiet moment
}

type target int

const (
	toBackend target = iota
	toResource
)

// A lane is one of a client's independent senders. Each numbers its
// messages itself, so that two of a client's goroutines woken at the same
// instant (a worker's renewal and its observer's read, say) cannot swap
// sequence numbers from one replay to the next.
type lane int

const (
	workerLane   lane = iota // the worker and the leases it holds
	observerLane             // an election's observer
	queueLane                // a semaphore's queue lease (its turn in line)
	lanes
)

type msgID struct {
	client int
	lane   lane
	seq    int
	leg    int // 0 request, 1 reply, 2+k the k-th pending event of a watch
}

func (id msgID) less(o msgID) bool {
	if id.client != o.client {
		return id.client < o.client
	}
	if id.lane != o.lane {
		return id.lane < o.lane
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
func (s *Sim) send(ctx context.Context, c *simClient, ln lane, to target, desc string, apply func() (any, error)) (any, error) {
	s.mu.Lock()
	if c.crashed {
		// A dead process sends nothing more; what it sent before may still arrive.
		s.mu.Unlock()
		return nil, errCrashed
	}
	c.seq[ln]++
	m := &message{id: msgID{c.idx, ln, c.seq[ln], 0}, desc: desc, apply: apply, reply: make(chan result, 1), to: to, fresh: true}
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
// deterministic order: paused and crashed clients' traffic waits. A watch
// offers its oldest pending event only (its events travel in order, as on
// one connection), or any of them with Config.UnorderedWatch.
func (s *Sim) deliverableLocked(now time.Time) []*message {
	s.renumberLocked()
	var out []*message
	waits := func(i int) bool {
		c := s.clients[i]
		return c.crashed || now.Before(c.pausedUntil)
	}
	for _, m := range s.pending {
		if !waits(m.id.client) {
			out = append(out, m)
		}
	}
	for _, st := range s.streams {
		st.canonLocked()
		if st.broken || st.silent || waits(st.id.client) {
			continue
		}
		n := min(len(st.out), 1)
		if s.cfg.UnorderedWatch {
			n = len(st.out)
		}
		for k := range n {
			id := st.id
			id.leg = 2 + k
			out = append(out, &message{id: id, desc: st.desc, st: st, event: k})
		}
	}
	slices.SortFunc(out, func(a, b *message) int {
		if a.id.less(b.id) {
			return -1
		}
		return 1
	})
	return out
}

// renumberLocked hands the requests sent since the driver's last quiet
// moment their sequence numbers again, within each client's lane in the
// order of their descriptions: two goroutines of one lane woken at one
// instant (a semaphore's queue Hold renewing while the worker releases the
// queue, say) send in no fixed order.
func (s *Sim) renumberLocked() {
	type sender struct {
		client int
		lane   lane
	}
	fresh := map[sender][]*message{}
	for _, m := range s.pending {
		if m.fresh {
			m.fresh = false
			k := sender{m.id.client, m.id.lane}
			fresh[k] = append(fresh[k], m)
		}
	}
	for _, ms := range fresh {
		if len(ms) < 2 {
			continue
		}
		seqs := make([]int, len(ms))
		for i, m := range ms {
			seqs[i] = m.id.seq
		}
		slices.Sort(seqs)
		slices.SortStableFunc(ms, func(a, b *message) int { return strings.Compare(a.desc, b.desc) })
		for i, m := range ms {
			m.id.seq = seqs[i]
		}
	}
}

func (s *Sim) removeLocked(m *message) {
	s.pending = slices.DeleteFunc(s.pending, func(x *message) bool { return x == m })
}

// deliver hands m to its far end. A request runs there (unless the backend
// is down) and its reply is queued as a new message; a reply reaches its
// caller. Lost messages time out at the caller instead; a lost watch event
// breaks its watch.
func (s *Sim) deliver(m *message, lose bool) {
	if m.st != nil {
		s.deliverEvent(m.st, m.event, lose)
		return
	}
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
	s.mu.Lock()
	down := s.backendDownLocked()
	s.mu.Unlock()
	if down && m.to == toBackend {
		r = result{err: fmt.Errorf("%w: sim: backend restarting", lease.ErrUnavailable)}
	} else {
		r.v, r.err = m.apply()
	}
	s.tracef("%s -> %s", m.desc, describe(r))
	s.mu.Lock()
	id := m.id
	id.leg = 1
	s.pending = append(s.pending, &message{id: id, desc: m.desc, reply: m.reply, result: r, to: m.to})
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
	case []lease.Lease:
		return fmt.Sprintf("%d leases", len(v))
	case []lease.RenewResult:
		parts := make([]string, len(v))
		for i, r := range v {
			parts[i] = describe(result{v: r.Lease, err: r.Err})
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case nil:
		return "ok"
	default:
		return fmt.Sprint(v)
	}
}
