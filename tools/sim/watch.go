package sim

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/leasehq/lease"
)

// A stream is one lease.Watcher.Watch of a client over the simulated
// network, as one connection would carry it: the backend's events queue at
// the far end (out) in the backend's order, the driver delivers them one at
// a time in that order (or in any order, with Config.UnorderedWatch) or
// breaks the connection (a lost event, a backend restart), and the client
// reads what was delivered (in), then, after a break, one error matching
// lease.ErrUnavailable.
type stream struct {
	id     msgID // its events' ids: the client, its lane and the sequence number the watch opened with
	desc   string
	out    []lease.Event // made by the backend, not yet delivered
	canon  int           // out[:canon] is in canonical order (canonLocked)
	in     []lease.Event // delivered, not yet read
	broken bool
	silent bool          // the connection stopped delivering, without closing
	wake   chan struct{} // something was delivered, or the stream broke
	stop   context.CancelFunc
	done   chan struct{} // the backend's side has stopped
}

// errBroken is what a client's watch ends with when its connection broke.
var errBroken = fmt.Errorf("%w: sim: watch connection broken", lease.ErrUnavailable)

// watchBackend is a client's view of the backend that also offers
// lease.Watcher: memstore's own Watch, its events carried by a stream.
type watchBackend struct{ *simBackend }

var _ lease.Watcher = watchBackend{}

func (b watchBackend) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		if err := lease.ValidatePrefix(prefix); err != nil {
			yield(lease.Event{}, err)
			return
		}
		st, err := b.s.openStream(b.simBackend, prefix)
		if err != nil {
			if ctx.Err() == nil {
				yield(lease.Event{}, err)
			}
			return
		}
		defer b.s.closeStream(st)
		for {
			b.s.mu.Lock()
			if len(st.in) > 0 {
				ev := st.in[0]
				st.in = st.in[1:]
				b.s.mu.Unlock()
				if !yield(ev, nil) {
					return
				}
				continue
			}
			broken := st.broken
			b.s.mu.Unlock()
			if broken {
				if ctx.Err() == nil {
					yield(lease.Event{}, errBroken)
				}
				return
			}
			select {
			case <-st.wake:
			case <-ctx.Done():
				return
			}
		}
	}
}

// openStream starts a watch of prefix at the backend for b's client. Like
// a read it is not itself delayed or lost: what the network does to a watch
// it does to its events.
func (s *Sim) openStream(b *simBackend, prefix string) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case b.c.crashed:
		return nil, errCrashed
	case s.backendDownLocked():
		return nil, fmt.Errorf("%w: sim: backend restarting", lease.ErrUnavailable)
	}
	b.c.seq[b.lane]++
	st := &stream{
		id:   msgID{b.c.idx, b.lane, b.c.seq[b.lane], 2},
		desc: fmt.Sprintf("%s watch %s", b.name(), prefix),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	ctx, stop := context.WithCancel(context.Background())
	st.stop = stop
	// Kept in id order, whatever order the clients opened them in.
	s.streams = append(s.streams, st)
	slices.SortFunc(s.streams, func(a, b *stream) int {
		if a.id.less(b.id) {
			return -1
		}
		return 1
	})
	s.asideLocked(b.c.idx, b.lane, "%s opens", st.desc)
	go func() {
		defer close(st.done)
		for ev, err := range s.store.Watch(ctx, prefix) {
			s.mu.Lock()
			if err != nil {
				st.out = append(st.out, lease.Event{}) // the backend broke it: a break, after what came before
			} else {
				st.out = append(st.out, ev)
			}
			s.mu.Unlock()
		}
	}()
	return st, nil
}

// canonLocked puts the events st received since the last call — those the
// backend made between two quiet moments of the driver — in one order,
// whatever order the goroutines that made them ran in: two keys' timers
// due at one instant may fire either way round. Each key's events keep
// their order, and no event passes a Synced or a break: the order across
// keys is the only one a watch does not promise.
func (st *stream) canonLocked() {
	fresh := st.out[st.canon:]
	start := 0
	for i := 0; i <= len(fresh); i++ {
		if i == len(fresh) || fresh[i].Kind == lease.Synced || fresh[i].Kind == 0 {
			slices.SortStableFunc(fresh[start:i], func(a, b lease.Event) int { return strings.Compare(a.Lease.Key, b.Lease.Key) })
			start = i + 1
		}
	}
	st.canon = len(st.out)
}

// closeStream ends a watch its client stopped reading.
func (s *Sim) closeStream(st *stream) {
	s.mu.Lock()
	s.streams = slices.DeleteFunc(s.streams, func(x *stream) bool { return x == st })
	s.mu.Unlock()
	st.stop()
	<-st.done
}

// deliverEvent hands the k-th pending event of st to its client, or breaks
// st when the event is lost.
func (s *Sim) deliverEvent(st *stream, k int, lose bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := st.out[k]
	st.out = slices.Delete(st.out, k, k+1)
	if k < st.canon {
		st.canon--
	}
	switch {
	case lose || ev.Kind == 0:
		s.breakLocked(st)
	default:
		st.in = append(st.in, ev)
		s.stats.Events++
		if ev.Kind == lease.Synced {
			s.tracefLocked("%s <- synced", st.desc)
		} else {
			s.tracefLocked("%s <- %v %s token %d", st.desc, ev.Kind, ev.Lease.Key, ev.Lease.Token)
		}
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// breakLocked cuts st's connection: its client reads what was delivered,
// then an error.
func (s *Sim) breakLocked(st *stream) {
	if st.broken {
		return
	}
	st.broken = true
	s.stats.Breaks++
	s.tracefLocked("%s breaks", st.desc)
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// silenceLink makes one open watch, chosen by the seed, go silent: its
// events stay at the far end and its client hears nothing more, not even a
// break, until the client gives the watch up (or the backend restarts,
// which breaks every connection).
func (s *Sim) silenceLink() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var open []*stream
	for _, st := range s.streams {
		if !st.broken && !st.silent {
			open = append(open, st)
		}
	}
	if len(open) == 0 {
		return
	}
	st := open[s.rng.IntN(len(open))]
	st.silent = true
	s.stats.Silenced++
	s.tracefLocked("%s goes silent", st.desc)
}
