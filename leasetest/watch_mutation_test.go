package leasetest_test

// Mutants of the Watch section (see mutation_test.go): memstore's watch
// with one thing broken, each a way a backend's watch could go wrong.

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehq/lease"
)

func init() { mutants = append(mutants, watchMutants...) }

// filtered is memstore's watch with f applied to each item: f returns the
// items to yield in its place (none to drop it).
func filtered(w *wrapper, f func(ev lease.Event, err error) []lease.Event) {
	w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
		return func(yield func(lease.Event, error) bool) {
			for ev, err := range w.s.Watch(ctx, prefix) {
				if err != nil {
					yield(ev, err)
					return
				}
				for _, out := range f(ev, err) {
					if !yield(out, nil) {
						return
					}
				}
			}
		}
	}
}

// relay yields src's items and the events sent on extra as they come,
// ranging over src in a goroutine of its own.
func relay(ctx context.Context, src func(ctx context.Context) iter.Seq2[lease.Event, error], extra <-chan lease.Event) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		type item struct {
			ev  lease.Event
			err error
		}
		ch := make(chan item)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer close(ch)
			for ev, err := range src(ctx) {
				select {
				case ch <- item{ev, err}:
				case <-ctx.Done():
					return
				}
			}
		}()
		defer func() { cancel(); <-done }()
		for {
			select {
			case it, ok := <-ch:
				if !ok || !yield(it.ev, it.err) {
					return
				}
			case ev := <-extra:
				if !yield(ev, nil) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}

// skipToSynced reads a watch past its current state.
func skipToSynced(next func() (lease.Event, error, bool)) error {
	for {
		ev, err, ok := next()
		switch {
		case !ok:
			return errors.New("watch ended")
		case err != nil:
			return err
		case ev.Kind == lease.Synced:
			return nil
		}
	}
}

// listThenWatch is a watch that does not take its state and subscribe as
// one step: List, then (after gap) subscribe; or, with subscribeFirst,
// subscribe, then (after gap) List, telling the changes since the
// subscription after Synced.
func listThenWatch(w *wrapper, subscribeFirst bool, gap time.Duration) {
	w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
		return func(yield func(lease.Event, error) bool) {
			if err := lease.ValidatePrefix(prefix); err != nil {
				yield(lease.Event{}, err)
				return
			}
			next, stop := iter.Pull2(w.s.Watch(ctx, prefix))
			defer stop()
			var list []lease.Lease
			var err error
			if subscribeFirst {
				if err = skipToSynced(next); err == nil {
					// real time: the gap in which the conformance suite's
					// changes, made on the real clock, land.
					time.Sleep(gap)
					list, err = memList(ctx, w.s, prefix)
				}
			} else {
				if list, err = memList(ctx, w.s, prefix); err == nil {
					time.Sleep(gap) // real time: as above
					err = skipToSynced(next)
				}
			}
			if err != nil {
				if ctx.Err() == nil {
					yield(lease.Event{}, err)
				}
				return
			}
			for _, l := range list {
				if !yield(lease.Event{Kind: lease.Held, Lease: l}, nil) {
					return
				}
			}
			if !yield(lease.Event{Kind: lease.Synced}, nil) {
				return
			}
			for {
				ev, err, ok := next()
				if !ok || !yield(ev, err) || err != nil {
					return
				}
			}
		}
	}
}

var watchMutants = []mutant{
	{name: "WatchSkipsSynced", breaks: "Watch does not mark the end of the current state",
		caughtBy: []string{"Watch/InitialState", "Watch/Changes"},
		install: func(w *wrapper) {
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				if ev.Kind == lease.Synced {
					return nil
				}
				return []lease.Event{ev}
			})
		}},
	{name: "WatchLeaksIDs", breaks: "events carry the lease's secret ID (I4)",
		caughtBy: []string{"Watch/Changes"},
		install: func(w *wrapper) {
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				if l, ok := w.lastOf(ev.Lease.Key); ok && l.Token == ev.Lease.Token {
					ev.Lease.ID = l.ID
				}
				return []lease.Event{ev}
			})
		}},
	{name: "WatchHeldUnordered", breaks: "the current state does not come in key order",
		caughtBy: []string{"Watch/InitialState"},
		install: func(w *wrapper) {
			var held []lease.Event
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				switch ev.Kind {
				case lease.Held:
					held = append(held, ev)
					return nil
				case lease.Synced:
					slices.Reverse(held)
					out := append(held, ev)
					held = nil
					return out
				}
				return []lease.Event{ev}
			})
		}},
	{name: "WatchPrefixAsPattern", breaks: "Watch reads its prefix as a LIKE or glob pattern",
		caughtBy: []string{"Watch/InitialState", "Watch/Changes"},
		install: func(w *wrapper) {
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					if err := lease.ValidatePrefix(prefix); err != nil {
						yield(lease.Event{}, err)
						return
					}
					match := globPrefix(prefix)
					for ev, err := range w.s.Watch(ctx, "") {
						if err == nil && ev.Kind != lease.Synced && !match.MatchString(ev.Lease.Key) {
							continue
						}
						if !yield(ev, err) {
							return
						}
					}
				}
			}
		}},
	{name: "WatchJoinDisturbsOthers", breaks: "a watch that starts makes the watches already running miss a change",
		caughtBy: []string{"Watch/SnapshotConsistent"},
		install: func(w *wrapper) {
			var joins atomic.Int64
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					seen := joins.Add(1)
					for ev, err := range w.s.Watch(ctx, prefix) {
						if err == nil && ev.Kind == lease.Released {
							if n := joins.Load(); n != seen {
								seen = n
								continue // the first release after another watch started
							}
						}
						if !yield(ev, err) {
							return
						}
					}
				}
			}
		}},
	{name: "WatchDropsRenewed", breaks: "renewals are not told",
		caughtBy: []string{"Watch/Changes"},
		install: func(w *wrapper) {
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				if ev.Kind == lease.Renewed {
					return nil
				}
				return []lease.Event{ev}
			})
		}},
	{name: "WatchReleasedAsExpired", breaks: "a release is told as an expiry",
		caughtBy: []string{"Watch/Changes"},
		install: func(w *wrapper) {
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				if ev.Kind == lease.Released {
					ev.Kind = lease.Expired
				}
				return []lease.Event{ev}
			})
		}},
	{name: "WatchExpiredNever", breaks: "expiries are not told",
		caughtBy: []string{"Watch/Expiry"},
		install: func(w *wrapper) {
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				if ev.Kind == lease.Expired {
					return nil
				}
				return []lease.Event{ev}
			})
		}},
	{name: "WatchExpiredEarly", breaks: "Expired is told before the lease's TTL has passed",
		caughtBy: []string{"Watch/Expiry"},
		install: func(w *wrapper) {
			// Leases really expire after lease.MinTTL; everything else,
			// events included, shows the TTL asked for.
			var rep reported
			show := func(real lease.Lease, ttl time.Duration) lease.Lease {
				shown := real
				shown.TTL, shown.Expires = ttl, real.Expires.Add(ttl-real.TTL)
				rep.set(real, shown)
				return shown
			}
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, lease.MinTTL)
				if err != nil {
					return l, err
				}
				return show(l, ttl), nil
			}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				r, err := w.renew(ctx, l, lease.MinTTL)
				if err != nil {
					return r, err
				}
				return show(r, ttl), nil
			}
			rep.hookGetList(w)
			filtered(w, func(ev lease.Event, _ error) []lease.Event {
				ev.Lease = rep.fix(ev.Lease)
				return []lease.Event{ev}
			})
		}},
	{name: "WatchExpiredLate", breaks: "Expired is told later than the backend's bound after the expiry",
		caughtBy: []string{"Watch/Expiry"},
		install: func(w *wrapper) {
			const late = 1500 * time.Millisecond // the suite's default bound is 1 s
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				extra := make(chan lease.Event, 64)
				src := func(ctx context.Context) iter.Seq2[lease.Event, error] {
					return func(yield func(lease.Event, error) bool) {
						for ev, err := range w.s.Watch(ctx, prefix) {
							if ev.Kind == lease.Expired {
								time.AfterFunc(late, func() { extra <- ev })
								continue
							}
							if !yield(ev, err) {
								return
							}
						}
					}
				}
				return relay(ctx, src, extra)
			}
		}},
	{name: "WatchExpiredAtFirstExpiry", breaks: "Expired is told at a lease's first expiry though a renewal moved it on",
		caughtBy: []string{"Watch/RenewedNotExpired"},
		install: func(w *wrapper) {
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				extra := make(chan lease.Event, 64)
				var mu sync.Mutex
				told := map[string]bool{}
				src := func(ctx context.Context) iter.Seq2[lease.Event, error] {
					return func(yield func(lease.Event, error) bool) {
						for ev, err := range w.s.Watch(ctx, prefix) {
							l, vk := ev.Lease, viewKey(ev.Lease.Key, ev.Lease.Token)
							switch ev.Kind {
							case lease.Held, lease.Acquired: // a timer that no renewal stops
								time.AfterFunc(time.Until(l.Expires), func() {
									mu.Lock()
									told[vk] = true
									mu.Unlock()
									select {
									case extra <- lease.Event{Kind: lease.Expired, Lease: l}:
									default:
									}
								})
							case lease.Expired:
								mu.Lock()
								dup := told[vk]
								mu.Unlock()
								if dup {
									continue
								}
							}
							if !yield(ev, err) {
								return
							}
						}
					}
				}
				return relay(ctx, src, extra)
			}
		}},
	{name: "WatchSnapshotGap", breaks: "Watch lists the state and subscribes after: changes in between are lost",
		caughtBy: []string{"Watch/SnapshotConsistent"},
		install:  func(w *wrapper) { listThenWatch(w, false, time.Millisecond) }},
	{name: "WatchSnapshotOverlap", breaks: "Watch subscribes and lists the state after: changes in between are told twice",
		caughtBy: []string{"Watch/SnapshotConsistent"},
		install:  func(w *wrapper) { listThenWatch(w, true, time.Millisecond) }},
	{name: "WatchDropsSilently", breaks: "a slow reader misses events without being told",
		caughtBy: []string{"Watch/SlowReader"},
		install: func(w *wrapper) {
			// Read memstore's watch at once into a small ring that drops
			// the oldest event when full.
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					ctx, cancel := context.WithCancel(ctx)
					defer cancel()
					var (
						mu    sync.Mutex
						ring  []lease.Event
						errAt error
						wake  = make(chan struct{}, 1)
					)
					go func() {
						for ev, err := range w.s.Watch(ctx, prefix) {
							mu.Lock()
							if err != nil {
								errAt = err
							} else {
								if len(ring) == 16 {
									ring = ring[1:]
								}
								ring = append(ring, ev)
							}
							mu.Unlock()
							select {
							case wake <- struct{}{}:
							default:
							}
						}
					}()
					for {
						mu.Lock()
						var ev lease.Event
						ok, err := len(ring) > 0, errAt
						if ok {
							ev, ring = ring[0], ring[1:]
						}
						mu.Unlock()
						switch {
						case ok:
							if !yield(ev, nil) {
								return
							}
							continue
						case err != nil:
							yield(lease.Event{}, err)
							return
						}
						select {
						case <-wake:
						case <-ctx.Done():
							return
						}
					}
				}
			}
		}},
	{name: "WatchBreaksWithoutError", breaks: "a watch cut off for reading slowly just ends, without an error",
		caughtBy: []string{"Watch/SlowReader"},
		install: func(w *wrapper) {
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					for ev, err := range w.s.Watch(ctx, prefix) {
						if errors.Is(err, lease.ErrUnavailable) || !yield(ev, err) {
							return
						}
					}
				}
			}
		}},
	{name: "WatchBlocksStore", breaks: "a change waits for every watcher to take it: a slow reader holds the store up",
		caughtBy: []string{"Watch/SlowReader"},
		install: func(w *wrapper) {
			type sub struct {
				prefix string
				ch     chan lease.Event
				done   chan struct{}
			}
			var (
				mu   sync.Mutex
				subs = map[*sub]bool{}
			)
			publish := func(kind lease.EventKind, l lease.Lease) {
				l.ID = lease.ID{}
				mu.Lock()
				var to []*sub
				for s := range subs {
					if len(l.Key) >= len(s.prefix) && l.Key[:len(s.prefix)] == s.prefix {
						to = append(to, s)
					}
				}
				mu.Unlock()
				for _, s := range to {
					select {
					case s.ch <- lease.Event{Kind: kind, Lease: l}:
					case <-s.done:
					}
				}
			}
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if err == nil {
					publish(lease.Acquired, l)
				}
				return l, err
			}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				r, err := w.renew(ctx, l, ttl)
				if err == nil {
					publish(lease.Renewed, r)
				}
				return r, err
			}
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				err := w.release(ctx, l)
				if err == nil {
					publish(lease.Released, l)
				}
				return err
			}
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					if err := lease.ValidatePrefix(prefix); err != nil {
						yield(lease.Event{}, err)
						return
					}
					s := &sub{prefix: prefix, ch: make(chan lease.Event, 16), done: make(chan struct{})}
					mu.Lock()
					subs[s] = true
					mu.Unlock()
					defer func() {
						mu.Lock()
						delete(subs, s)
						mu.Unlock()
						close(s.done)
					}()
					list, err := memList(ctx, w.s, prefix)
					if err != nil {
						yield(lease.Event{}, err)
						return
					}
					for _, l := range list {
						if !yield(lease.Event{Kind: lease.Held, Lease: l}, nil) {
							return
						}
					}
					if !yield(lease.Event{Kind: lease.Synced}, nil) {
						return
					}
					for {
						select {
						case ev := <-s.ch:
							if !yield(ev, nil) {
								return
							}
						case <-ctx.Done():
							return
						}
					}
				}
			}
		}},
	{name: "WatchCancelIsError", breaks: "a watch whose context ended yields the context's error",
		caughtBy: []string{"Watch/ContextEnds"},
		install: func(w *wrapper) {
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					for ev, err := range w.s.Watch(ctx, prefix) {
						if !yield(ev, err) {
							return
						}
					}
					if err := ctx.Err(); err != nil {
						yield(lease.Event{}, err)
					}
				}
			}
		}},
	{name: "WatchAcceptsBadPrefix", breaks: "Watch does not check its prefix",
		caughtBy: []string{"Watch/BadPrefix"},
		install: func(w *wrapper) {
			w.h.watch = func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
				return func(yield func(lease.Event, error) bool) {
					if lease.ValidatePrefix(prefix) != nil {
						yield(lease.Event{Kind: lease.Synced}, nil) // nothing can be under it
						return
					}
					for ev, err := range w.s.Watch(ctx, prefix) {
						if !yield(ev, err) {
							return
						}
					}
				}
			}
		}},
}
