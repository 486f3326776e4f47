package memstore

import (
	"context"
	"iter"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

// Watch implements lease.Watcher. Each change is published under its key's
// lock, so a key's events come in the order the store made them; the
// snapshot takes each key's state under the same lock, so for each key
// nothing is missed or told twice between its Held event (or its absence)
// and the changes after Synced. The snapshot is not of one instant across
// keys, as the store has no lock over all of them.
//
// Expired is published by a timer on the store's clock (WithClock) set for
// the lease's expiry while a watcher's prefix covers its key: when the clock
// reaches the expiry, the lease ends and watchers are told, unless it was
// renewed meanwhile (the timer then waits for the new expiry). The bound is
// the timer's delay: on the real clock, that of time.AfterFunc plus the
// key's lock (well under a millisecond on an idle machine, more under
// load); on an injected clock, when its AfterFunc fires (leasetest/fakeclock
// fires it inside the Advance that reaches the expiry, so the event is out
// before Advance returns). A store nobody watches pays one atomic load per
// change; while anybody watches, a change costs a prefix comparison per
// watcher, one lock of each watcher it reaches, and a timer per watched
// lease.
//
// A watcher that leaves more than watchhub.DefaultBuffer (1024) events
// unread is cut off with an error matching lease.ErrUnavailable.
func (s *Store) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return watchhub.Watch(ctx, prefix, s.subscribe)
}

// WatchKey implements lease.KeyWatcher: Watch of exactly key, whose
// changes alone reach the watcher's buffer.
func (s *Store) WatchKey(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return watchhub.WatchKey(ctx, key, s.subscribe)
}

// subscribe adds a watcher and then records each key's state under the
// key's lock: changes published for the key before that are in it (the
// hub drops them), changes after it are not. Entries added to the index
// after the table is read start after the subscription, so all their
// changes reach the watcher.
func (s *Store) subscribe(_ context.Context, sc watchhub.Scope) (*watchhub.Sub, error) {
	sub, err := s.watch.SubscribeScope(sc)
	if err != nil {
		return nil, err
	}
	s.idx.entries(func(e *entry) {
		if !sc.Matches(e.key) {
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.dead {
			return // swept: the key's new entry, if any, is newer than sub
		}
		now := s.now()
		s.expireLocked(e, now) // an expiry nobody timed is told now, before the state
		if !e.held {
			sub.Free(e.key)
			return
		}
		sub.Held(s.lease(e))
		e.watched = true
		s.armLocked(e, now)
	})
	return sub, nil
}

// publishLocked tells the watchers of e's key of kind and of its lease as it is
// now, and notes whether any watches the lease still held, for armLocked.
// With nobody watching it costs one atomic load.
func (s *Store) publishLocked(e *entry, kind lease.EventKind) {
	if !s.watch.Active() {
		e.watched = false
		return
	}
	e.watched = s.watch.Publish(kind, s.lease(e)) && e.held
}
