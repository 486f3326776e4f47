package boltstore

import (
	"bytes"
	"context"
	"iter"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

// watchState is the store's side of its watchers. Everything in it but
// the hub and the expiries (each safe for concurrent use) belongs to the
// commit loop, which orders every change: it notes each change as it
// applies it, publishes the batch's changes once the batch is durable, and
// only then takes the snapshots of the watches in the batch, so that a
// watch's state and its first change are one batch apart, with nothing
// between them and nothing twice.
type watchState struct {
	hub      *watchhub.Hub
	expiries *watchhub.Expiries // the leases watchers were told are held
	pending  []lease.Event      // the batch's changes, published once it is durable
}

// watchOp is what opWatch and opWatchExpire carry.
type watchOp struct {
	scope watchhub.Scope // opWatch
	sub   *watchhub.Sub  // opWatch: the subscription, once taken
	keys  []string       // opWatchExpire: keys whose expiry the clock reached
}

// storeClock is the store's clock as a lease.Clock.
type storeClock struct{ s *Store }

func (c storeClock) Now() time.Time { return c.s.now() }
func (c storeClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	return c.s.afterFunc(d, f)
}

func (w *watchState) init(s *Store) {
	w.hub = watchhub.New("boltstore", watchhub.DefaultBuffer)
	w.expiries = watchhub.NewExpiries(storeClock{s}, func(keys []string) {
		// The commit loop decides; a closed store ends the check.
		_ = s.submit(context.Background(), &op{kind: opWatchExpire, watch: &watchOp{keys: keys}})
	})
}

// close cuts the watchers off with err, once the commit loop has stopped
// or the store has failed.
func (w *watchState) close(err error) {
	w.hub.Close(err)
	w.expiries.Stop()
}

// Watch implements lease.Watcher. The commit loop publishes a batch's
// changes once its log record is durable, so a watcher is never told of a
// change a crash could undo (as Get and List, it sees releases only once
// durable), and takes a watch's snapshot after publishing the batch the
// watch arrived in: one instant of the store, with every change after it.
//
// Expired comes when the store's clock reaches a watched lease's expiry:
// a timer on that clock (WithClock) hands the key to the commit loop,
// which reports the lease unless it was renewed meanwhile. The bound is
// that timer's delay plus up to two batches of the commit loop (the one
// under way and the one the check joins, each applied and, if it wrote,
// made durable with one fdatasync): a few milliseconds on an idle store,
// more while it is busy or its disk slow. Like a lease's other changes,
// its expiry is told to watchers only: the record stays until its key is
// next written (see the package comment).
//
// A watcher that leaves more than watchhub.DefaultBuffer (1024) events
// unread is cut off with an error matching lease.ErrUnavailable, as every
// watcher is when the store is closed or fails.
func (s *Store) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return watchhub.Watch(ctx, prefix, s.startWatch)
}

// WatchKey implements lease.KeyWatcher: Watch of exactly key, whose
// changes alone reach the watcher's buffer.
func (s *Store) WatchKey(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return watchhub.WatchKey(ctx, key, s.startWatch)
}

// startWatch subscribes from the commit loop (snapshot).
func (s *Store) startWatch(ctx context.Context, sc watchhub.Scope) (*watchhub.Sub, error) {
	o := &op{kind: opWatch, watch: &watchOp{scope: sc}}
	if err := s.submit(ctx, o); err != nil {
		return nil, err
	}
	return o.watch.sub, o.err
}

// noteWatch notes a change the commit loop applied, to publish once its
// batch is durable. It costs an atomic load when nobody watches.
func (s *Store) noteWatch(kind lease.EventKind, l lease.Lease) {
	w := &s.watch
	if !w.hub.Active() {
		return
	}
	w.pending = append(w.pending, lease.Event{Kind: kind, Lease: l})
	switch kind {
	case lease.Acquired, lease.Renewed:
		if w.hub.Watched(l.Key) {
			w.expiries.Track(l)
		}
	case lease.Released:
		w.expiries.Take(l.Key, l.Token)
	}
}

// noteExpired notes the expiry of key's lease rec, found no longer live,
// if watchers were told it is held and not yet that it ended. The record
// stays until the key is next written, so this is called each time the
// loop meets it; Take makes it once.
func (s *Store) noteExpired(key string, rec record) {
	if s.watch.expiries.Take(key, rec.token) {
		s.watch.pending = append(s.watch.pending, lease.Event{Kind: lease.Expired, Lease: rec.lease(key)})
	}
}

// applyWatch runs a watch's operations in the commit loop: an expiry
// check looks at each key (current notes the expiry of a lease no longer
// live, and hands the key to a waiter), and times the expiry of the lease
// now live if anybody watches it, else forgets the key (it may have been
// renewed or released while nobody watched); a subscription waits for
// publishWatch.
func (s *Store) applyWatch(t *txn, o *op, now time.Time) {
	if o.kind != opWatchExpire {
		return
	}
	for _, key := range o.watch.keys {
		rec, held, err := s.current(t, key, now)
		if err != nil {
			o.err = err
			return
		}
		if held && s.watch.hub.Watched(key) {
			s.watch.expiries.Track(rec.lease(key))
		} else {
			s.watch.expiries.Forget(key)
		}
	}
}

// publishWatch ends a batch for the watchers: if it was made durable
// (err nil), its changes are published and then its watches subscribe and
// take their snapshots. A batch that failed fails the store, and with it
// every watcher (fail), so its changes are dropped.
func (s *Store) publishWatch(batch []*op, err error) {
	w := &s.watch
	if err == nil {
		for _, ev := range w.pending {
			w.hub.Publish(ev.Kind, ev.Lease)
		}
	}
	clear(w.pending)
	w.pending = w.pending[:0]
	if err != nil {
		return
	}
	for _, o := range batch {
		if o.kind == opWatch {
			o.watch.sub, o.err = s.snapshot(o.watch.scope)
		}
	}
}

// snapshot subscribes a watcher of sc and records the leases live in it. Leases no longer live whose expiry watchers await are
// reported first, to the watchers already there: the new one's state
// does not hold them, and it is not told of them.
func (s *Store) snapshot(sc watchhub.Scope) (*watchhub.Sub, error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.live == nil { // a failed checkpoint left none
		if err := s.failure(); err != nil {
			return nil, err
		}
		return nil, errClosed
	}
	now := s.now()
	var live []lease.Lease
	p := []byte(sc.Prefix)
	c := s.live.leases.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		rec, err := decodeRecord(string(k), v)
		if err != nil {
			return nil, err
		}
		if rec.live(now) {
			if sc.Matches(string(k)) {
				live = append(live, rec.lease(string(k)))
			}
		} else if s.watch.expiries.Take(string(k), rec.token) {
			s.watch.hub.Publish(lease.Expired, rec.lease(string(k)))
		}
	}
	sub, err := s.watch.hub.SubscribeScope(sc)
	if err != nil {
		return nil, err
	}
	for _, l := range live {
		sub.Held(l)
		s.watch.expiries.Track(l)
	}
	return sub, nil
}
