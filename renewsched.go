package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehq/lease/internal/dueheap"
)

// renewScheduler renews a Client's holds: one heap of the holds waiting for
// their next renewal and one timer for the earliest of them, whatever the
// number of holds; and ends the holds that reach their safe deadlines, from
// one heap of deadlines and one timer (see deadlines). When the timer fires, every hold whose window has opened
// is renewed with it: in batches of up to MaxRenewBatch through the
// backend's RenewBatch where it is a BatchRenewer (one request or commit per
// batch), else by one Renew each. A goroutine lives only while a renewal is
// in flight.
//
// Each hold's window runs from early to due: due is when it renews today
// alone (TTL/3 after the send time, jittered ±10%), early 0.7 × TTL/3 after
// it. A batch therefore renews a hold at its due time or before, never
// after, while the Client has requests to spare; and the holds of one batch
// share its send time and its jitter, so they fall due together again and
// stay one batch.
//
// At most MaxRenewBatchesInFlight batches (or MaxRenewBatchesInFlight ×
// MaxRenewBatch lone renewals) are in flight at once, and batches fewer
// while the backend queues them (see window). Holds whose windows
// open while the Client is at the bound wait in the queue, in order of due
// time, and go in the next batch as an answer frees a request: a backend
// that is slow to answer sees the Client's renewals one bounded flight after
// another instead of all at once, and each hold's deadline counts from the
// batch that actually took it. A hold that waits past its own safe deadline
// is lost by it (I5), as a hold whose renewal failed; one whose deadline has
// passed is never sent.
//
// Lock order: a Hold's mu before the scheduler's.
type renewScheduler struct {
	c       *Client
	batcher BatchRenewer // the backend's, or nil: one Renew per hold
	limit   int          // requests in flight at most: for batches, the window

	mu       sync.Mutex
	queue    dueheap.Heap[*Hold] // the holds waiting for a renewal, by Hold.next.Due
	inFlight int                 // requests (batches or lone renewals) sent and not yet answered
	timer    Timer               // fires at timerAt for the head of the queue; nil when none
	timerAt  time.Time
	timerGen uint64 // counts timers; a stale one's callback does nothing
	window   window // for batches: limit follows its size

	// The holds' safe deadlines (Hold.dl.Due), and one timer that fires at
	// or before the earliest of them. A renewal moves a hold's deadline
	// later, so the timer is set again only for a deadline earlier than it:
	// when it fires and finds the earliest deadline later (its hold renewed
	// in time), it is set for that one, about once a renewal interval.
	deadlines dueheap.Heap[*Hold]
	dlTimer   Timer // nil when none
	dlAt      time.Time
	dlGen     uint64 // counts deadline timers; a stale one's callback does nothing
}

// MaxRenewBatchesInFlight is the most RenewBatch calls a Client has in
// flight at once: fewer while the backend's answers come back queued (one
// at the least, as a Client starts); on a backend without RenewBatch, it
// has at most MaxRenewBatchesInFlight × MaxRenewBatch Renew calls in
// flight. Renewals that fall due beyond the bound wait for an answer,
// earliest due first.
const MaxRenewBatchesInFlight = 8

// init readies s for c's backend.
func (s *renewScheduler) init(c *Client) {
	s.c = c
	s.queue = dueheap.New(func(h *Hold) *dueheap.Entry { return &h.next })
	s.deadlines = dueheap.New(func(h *Hold) *dueheap.Entry { return &h.dl })
	s.limit = MaxRenewBatchesInFlight * MaxRenewBatch
	if br, ok := c.backend.(BatchRenewer); ok {
		s.window.size = 1
		s.batcher, s.limit = br, s.window.size
	}
}

// window is how many batches a Client keeps in flight, from 1 to
// MaxRenewBatchesInFlight, set by how long the backend takes to answer
// them. More than one batch in flight helps where a round trip is long but
// the backend idle; where the backend is busy, each batch more only waits
// in its queue, and that queue is the backend's, in its own order, not the
// Client's by due time. With 64 Clients of 2,048 holds on one lease serve
// (tools/scalebench, serve-bolt-client), eight batches each put every hold
// in flight at once: answers took 200-320 ms on average and up to 830 ms,
// and at TTL 870 ms-1 s half the holds were lost by late answers; with the
// window, answers took 73-90 ms on average and p99 200-320 ms, and 3 of 9
// such turns kept every hold, one lost 14 and the rest 8,000-41,000: what
// is left is the server's throughput, some 250,000 renewals a second on
// this shared machine. Interleaved, at 1.4-1.7 of its 2 cores.
//
// A batch's queueing delay is its round trip less the backend's own time,
// the shortest round trip of the last one or two rttWindows; the window
// follows a moving average of it over the last few batches. When that
// average exceeds the backend's own time and a tenth of the holds'
// renewal interval (the slack it takes from them), or a batch fails, the
// window halves; when it is under half of that while a hold is past its
// due time for want of a request, the window widens by one. Only a batch
// sent since the window last changed changes it, so that it moves at most
// once a round trip. It starts at one batch.
type window struct {
	size             int
	least, prevLeast time.Duration // the shortest round trip in this rttWindow and in the one before; 0 none
	since            time.Time     // when this rttWindow began
	changed          time.Time     // when size last changed
	queued           time.Duration // the moving average of the queueing delay
}

// rttWindow is how long a shortest round trip is remembered: a backend
// that became slower for good is judged by its new speed within two.
const rttWindow = 10 * time.Second

// answer sets the window after a batch sent at sent was answered (or given
// up, when failed) at now; interval is the shortest renewal interval of
// its holds, and starved says a hold is past its due time waiting for a
// request.
func (w *window) answer(sent, now time.Time, interval time.Duration, failed, starved bool) {
	if now.Sub(w.since) >= rttWindow {
		w.prevLeast, w.least, w.since = w.least, 0, now
	}
	rtt := now.Sub(sent)
	if !failed && (w.least == 0 || rtt < w.least) {
		w.least = rtt
	}
	own := w.least // the backend's own time
	if w.prevLeast != 0 && (own == 0 || w.prevLeast < own) {
		own = w.prevLeast
	}
	if !failed {
		w.queued += (rtt - own - w.queued) / 4
	}
	if sent.Before(w.changed) {
		return // sent before the last change: the window it saw is gone
	}
	spare := max(own, interval/10)
	switch {
	case failed || w.queued > spare:
		w.size = max(1, w.size/2)
		w.changed = now
	case w.queued <= spare/2 && starved && w.size < MaxRenewBatchesInFlight:
		w.size++
		w.changed = now
	}
}

// Coalescing bounds, as fractions of a hold's renewal interval (a third of
// its granted TTL).
const (
	renewEarly     = 0.7 // a hold may join a batch from 0.7 intervals after its last send
	renewDueMin    = 0.9 // it renews alone 0.9 to 1.1 intervals after it, as before batching
	renewDueSpread = 0.2
	renewRetry     = 0.3 // a failed renewal is retried after 0.3 intervals (TTL/10), jittered
)

// schedule queues h for its next renewal after a send at sent, with jitter
// j in [0, 1); or, with mark, marks it to be queued (requeueLocked).
func (s *renewScheduler) schedule(h *Hold, sent time.Time, interval time.Duration, j float64, mark *uint8) {
	h.next.Due = sent.Add(time.Duration(float64(interval) * (renewDueMin + renewDueSpread*j)))
	h.early = sent.Add(time.Duration(float64(interval) * renewEarly))
	s.pushOrMark(h, mark)
}

// retry queues h for another attempt after a failed renewal at now; or,
// with mark, marks it to be queued.
func (s *renewScheduler) retry(h *Hold, now time.Time, interval time.Duration, j float64, mark *uint8) {
	wait := time.Duration(float64(interval) * renewRetry * (renewDueMin + renewDueSpread*j))
	h.next.Due = now.Add(wait)
	h.early = now.Add(wait * 8 / 10)
	s.pushOrMark(h, mark)
}

func (s *renewScheduler) pushOrMark(h *Hold, mark *uint8) {
	if mark != nil {
		*mark |= requeueNext
		return
	}
	s.push(h)
}

// A batch's answers mark what they did to each hold's places in the
// queues, and batchAnswered makes it under the one lock it takes for the
// answer (requeueLocked), instead of two locks a hold.
const (
	requeueDeadline uint8 = 1 << iota // the deadline moved: watch it
	requeueNext                       // the next renewal is set: queue it
)

// requeueLocked watches the deadlines and queues the next renewals that
// marks (one for each of holds) ask for, unless the hold has ended or been
// orphaned since its answer was recorded: its end took it out of the
// queues before it took this lock, or takes it out after. A hold's
// deadline is read without its lock: only the goroutine that renewed it
// writes it, and not again before the hold is queued here.
func (s *renewScheduler) requeueLocked(holds []*Hold, marks []uint8) {
	var earliest time.Time
	for i, h := range holds {
		m := marks[i]
		if m == 0 || h.ended.Load() {
			continue
		}
		if m&requeueDeadline != 0 {
			h.dl.Due = h.deadline
			if h.dl.Queued() {
				s.deadlines.Fix(h)
			} else {
				s.deadlines.Push(h)
			}
			if earliest.IsZero() || h.dl.Due.Before(earliest) {
				earliest = h.dl.Due
			}
		}
		if m&requeueNext != 0 && !h.orphaned.Load() {
			s.queue.Push(h)
		}
	}
	if !earliest.IsZero() && (s.dlTimer == nil || earliest.Before(s.dlAt)) {
		s.armDeadlineLocked(earliest)
	}
}

func (s *renewScheduler) push(h *Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue.Push(h)
	s.armLocked()
}

// remove takes h out of the queues, if it is there.
func (s *renewScheduler) remove(h *Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unwatchLocked(h)
	if !h.next.Queued() {
		return
	}
	s.queue.Remove(h)
	s.armLocked()
}

// dequeue takes h out of the queue of renewals, if it is there, and
// leaves its deadline watched (Hold.Orphan).
func (s *renewScheduler) dequeue(h *Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.next.Queued() {
		return
	}
	s.queue.Remove(h)
	s.armLocked()
}

// unwatch takes h's deadline out of the queue of deadlines.
func (s *renewScheduler) unwatch(h *Hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unwatchLocked(h)
}

func (s *renewScheduler) unwatchLocked(h *Hold) {
	s.deadlines.Remove(h)
	if s.deadlines.Len() == 0 && s.dlTimer != nil {
		s.armDeadlineLocked(time.Time{}) // stop it
	}
}

// watch sets h's deadline in the queue of deadlines, called with h's lock
// held when a renewal (or the acquisition) moved it.
func (s *renewScheduler) watch(h *Hold, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.dl.Due = deadline
	if h.dl.Queued() {
		s.deadlines.Fix(h)
	} else {
		s.deadlines.Push(h)
	}
	if s.dlTimer == nil || deadline.Before(s.dlAt) {
		s.armDeadlineLocked(deadline)
	}
}

// armDeadlineLocked sets the deadline timer for at, or stops it when at
// is zero.
func (s *renewScheduler) armDeadlineLocked(at time.Time) {
	if s.dlTimer != nil {
		s.dlTimer.Stop()
		s.dlTimer = nil
	}
	s.dlGen++
	if at.IsZero() {
		return
	}
	gen := s.dlGen
	s.dlTimer, s.dlAt = s.c.clock.AfterFunc(at.Sub(s.c.clock.Now()), func() { s.deadlinesDue(gen) }), at
}

// deadlinesDue runs when the deadline timer fires: it takes out the holds
// whose deadlines have been reached, sets the timer for the earliest of
// the rest, and ends those holds unless a renewal has just moved their
// deadlines. The timer may fire a little before its time by the client's
// clock (a clock whose rate differs from the timer's, or rounding): then
// it takes out nothing and is set again for the rest.
func (s *renewScheduler) deadlinesDue(gen uint64) {
	s.mu.Lock()
	if gen != s.dlGen {
		s.mu.Unlock()
		return
	}
	s.dlTimer = nil // this one has fired
	now := s.c.clock.Now()
	var reached []*Hold
	for s.deadlines.Len() > 0 && !now.Before(s.deadlines.Peek().dl.Due) {
		reached = append(reached, s.deadlines.Pop())
	}
	if s.deadlines.Len() > 0 {
		s.armDeadlineLocked(s.deadlines.Peek().dl.Due)
	}
	s.mu.Unlock()
	// The Holds' locks come before the scheduler's.
	for _, h := range reached {
		h.checkDeadline(now)
	}
}

// armLocked sets the timer for the head of the queue, or stops it when the
// queue is empty or the Client is at its bound (an answer then starts the
// next batch).
func (s *renewScheduler) armLocked() {
	if s.queue.Len() == 0 || s.inFlight >= s.limit {
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
			s.timerGen++
		}
		return
	}
	at := s.queue.Peek().next.Due
	if s.timer != nil {
		if s.timerAt.Equal(at) {
			return
		}
		s.timer.Stop()
	}
	s.timerGen++
	gen := s.timerGen
	s.timer, s.timerAt = s.c.clock.AfterFunc(at.Sub(s.c.clock.Now()), func() { s.fire(gen) }), at
}

// fire starts the renewals that are due. A timer that was stopped or
// replaced after its callback had started does nothing: the current one
// covers the queue.
func (s *renewScheduler) fire(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.timerGen {
		return
	}
	s.timer = nil // this one has fired
	s.startLocked()
}

// answered frees the request slot of a renewal that has been answered (or
// given up) and starts the renewals that waited for one.
func (s *renewScheduler) answered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	s.startLocked()
}

// batchAnswered is answered for a batch sent at sent and answered (or
// given up) at now, whose holds' shortest renewal interval is interval: it
// sets the window first, and requeues holds as marks say (nil: none).
func (s *renewScheduler) batchAnswered(sent, now time.Time, interval time.Duration, failed bool, holds []*Hold, marks []uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if marks != nil {
		s.requeueLocked(holds, marks)
	}
	starved := s.queue.Len() > 0 && !s.queue.Peek().next.Due.After(now)
	s.window.answer(sent, now, interval, failed, starved)
	s.limit = s.window.size
	s.inFlight--
	s.startLocked()
}

// startLocked renews, when the head of the queue is due, every hold whose
// window has opened, as far as the bound allows, and sets the timer for
// what remains.
func (s *renewScheduler) startLocked() {
	now := s.c.clock.Now()
	if s.queue.Len() == 0 || s.queue.Peek().next.Due.After(now) {
		s.armLocked()
		return
	}
	for s.inFlight < s.limit && s.queue.Len() > 0 && !s.queue.Peek().early.After(now) {
		s.inFlight++
		if s.batcher == nil {
			go s.renewOne(s.queue.Pop())
			continue
		}
		batch := make([]*Hold, 0, min(s.queue.Len(), MaxRenewBatch))
		for len(batch) < MaxRenewBatch && s.queue.Len() > 0 && !s.queue.Peek().early.After(now) {
			batch = append(batch, s.queue.Pop())
		}
		go s.renewBatch(batch)
	}
	s.armLocked()
}

// renewOne renews h alone, on a backend without RenewBatch. Release
// cancels the request through the Hold's context.
func (s *renewScheduler) renewOne(h *Hold) {
	defer s.answered()
	sent := s.c.clock.Now()
	if !h.sendable(sent) {
		return
	}
	cur := h.Lease()
	renewed, err := s.c.backend.Renew(h.ctx, cur, h.ttl)
	h.renewed(sent, s.c.clock.Now(), cur, renewed, err, s.c.rand(), nil)
}

// renewBatch renews holds in one RenewBatch call. The call ends when it is
// answered or when the last of the holds' safe deadlines passes, after which
// none of them could use its answer.
func (s *renewScheduler) renewBatch(holds []*Hold) {
	renewals := make([]Renewal, 0, len(holds))
	live := holds[:0]
	var (
		last     time.Time
		interval time.Duration // the shortest of the holds'
	)
	now := s.c.clock.Now()
	for _, h := range holds {
		h.mu.Lock()
		if h.sendableLocked(now) {
			live = append(live, h)
			renewals = append(renewals, Renewal{Lease: h.lease, TTL: h.ttl})
			if h.deadline.After(last) {
				last = h.deadline
			}
			if i := h.grantedTTLLocked() / 3; interval == 0 || i < interval {
				interval = i
			}
		}
		h.mu.Unlock()
	}
	if len(live) == 0 {
		s.answered()
		return
	}
	sent := s.c.clock.Now()
	ctx, cancel := context.WithCancel(context.Background())
	stop := s.c.clock.AfterFunc(last.Sub(sent), cancel)
	defer func() {
		stop.Stop()
		cancel()
	}()
	res, err := s.batcher.RenewBatch(ctx, renewals)
	answered := s.c.clock.Now() // one reading for the batch: its holds' answers came together
	if err == nil && len(res) != len(live) {
		err = fmt.Errorf("%w: lease: a batch of %d renewals was answered with %d", ErrUnavailable, len(live), len(res))
	}
	j := s.c.rand() // one jitter for the batch, so that its holds stay together
	if err != nil && len(live) > 1 && ctx.Err() == nil && !errors.Is(err, ErrUnavailable) {
		// Refused whole, not failed: the refusal may be for the sake of
		// one renewal (leasehttp: a key the credential no longer covers,
		// a TTL out of the server's bounds), and would be again each time
		// that renewal rode with the others, losing them all. Each alone,
		// a refusal costs only its own hold.
		s.renewEach(ctx, live, renewals, j)
		s.batchAnswered(sent, answered, interval, true, nil, nil)
		return
	}
	marks := make([]uint8, len(live))
	for i, h := range live {
		if err != nil {
			h.renewed(sent, answered, renewals[i].Lease, Lease{}, err, j, &marks[i])
			continue
		}
		h.renewed(sent, answered, renewals[i].Lease, res[i].Lease, res[i].Err, j, &marks[i])
	}
	s.batchAnswered(sent, answered, interval, err != nil, live, marks)
}

// renewEachInFlight is how many of a refused batch's renewals renewEach
// has in flight at once.
const renewEachInFlight = 8

// renewEach renews each of live (renewals, in their order) in a batch of its
// own, at most renewEachInFlight at once, within ctx: a batch the backend
// refused whole, asked again so that each hold is judged by its own answer,
// from the send time of its own request. j is the jitter for their next
// renewals.
func (s *renewScheduler) renewEach(ctx context.Context, live []*Hold, renewals []Renewal, j float64) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, renewEachInFlight)
	for i, h := range live {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			sent := s.c.clock.Now()
			if !h.sendable(sent) {
				return
			}
			res, err := s.batcher.RenewBatch(ctx, renewals[i:i+1])
			if err == nil && len(res) != 1 {
				err = fmt.Errorf("%w: lease: a batch of 1 renewal was answered with %d", ErrUnavailable, len(res))
			}
			if err != nil {
				h.renewed(sent, s.c.clock.Now(), renewals[i].Lease, Lease{}, err, j, nil)
				return
			}
			h.renewed(sent, s.c.clock.Now(), renewals[i].Lease, res[0].Lease, res[0].Err, j, nil)
		})
	}
	wg.Wait()
}

// sendable reports whether h is still held at now, so that a renewal sent
// now could keep it; a hold whose deadline has passed while it waited is
// lost here, if its deadline timer has not run yet.
func (h *Hold) sendable(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sendableLocked(now)
}

func (h *Hold) sendableLocked(now time.Time) bool {
	if h.ended.Load() || h.orphaned.Load() {
		return false
	}
	if !now.Before(h.deadline) {
		h.loseLocked()
		return false
	}
	return true
}

// renewed records the outcome of renewing cur with a request sent at sent
// and answered at now: the new deadline and the next renewal, a retry, or
// the loss. j is the jitter for the next renewal. With mark, the deadline
// and the next renewal are marked for the batch's requeueLocked rather
// than set in the scheduler's queues at once.
func (h *Hold) renewed(sent, now time.Time, cur, renewed Lease, err error, j float64, mark *uint8) {
	if err == nil {
		err = sameGeneration(cur, renewed)
	}
	switch {
	case errors.Is(err, errOtherGeneration):
		h.lose(fmt.Errorf("%w: %v", ErrLost, err))
	case errors.Is(err, ErrNotHeld):
		h.lose(fmt.Errorf("%w: backend no longer holds %q for token %d: %v", ErrLost, cur.Key, cur.Token, err))
	case err == nil:
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.ended.Load() {
			return
		}
		if !now.Before(h.deadline) {
			// The reply came after the deadline: the lease may have
			// expired and been taken in between.
			h.loseLocked()
			return
		}
		h.lease = renewed
		h.setDeadlineLocked(sent, now, mark)
		if !h.ended.Load() && !h.orphaned.Load() {
			h.c.sched.schedule(h, sent, h.grantedTTLLocked()/3, j, mark)
		}
	default:
		// Try again soon; the deadline timer ends the lease if we never
		// get through.
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.ended.Load() && !h.orphaned.Load() {
			h.c.sched.retry(h, now, h.grantedTTLLocked()/3, j, mark)
		}
	}
}
