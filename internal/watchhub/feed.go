package watchhub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// Version orders one key's states in an engine that streams its changes
// apart from the reads a snapshot makes (PostgreSQL NOTIFY, Redis pub/sub):
// the token, then the instant of the grant or renewal on the engine's clock,
// then whether the lease has ended.
type Version struct {
	Token lease.Token
	At    time.Time // the grant's or last renewal's instant; zero once ended
	Ended bool      // released or expired
}

// After reports whether v is a later state of the key than w.
func (v Version) After(w Version) bool {
	switch {
	case v.Token != w.Token:
		return v.Token > w.Token
	case v.Ended != w.Ended:
		return v.Ended
	}
	return v.At.After(w.At)
}

// Entry is one key's state in a snapshot: its lease (Key always; the rest
// if held or as it was last) and its version.
type Entry struct {
	Lease   lease.Lease
	Held    bool
	Version Version
}

// Feed is the in-process half of a watch on an engine that tells every
// change, from the statement or script that makes it, on a stream one
// reader receives in the engine's order, and whose snapshot is read apart
// from that stream (pgstore, redisstore). It keeps the last state the
// stream told of each key under a watched prefix and publishes to a Hub:
//
//   - the reader calls Change for each change, in the stream's order;
//   - a watch subscribes to the Hub, reads its snapshot (each key with its
//     Version), sends a barrier down the stream (Barrier) and, once the
//     reader has passed it, calls Join: every change made before the
//     snapshot's reads has then reached Change, so for each key the later of
//     the snapshot's state and the stream's is the key's state at the
//     barrier, and the changes after it are the ones still to come;
//   - Expired, which the engines do not stream, comes from a timer on the
//     engine's clock (Expiries) that asks the backend to check each due
//     lease (check); the backend reports an expiry with Change, and a lease
//     still live with Retrack. A lease's successor's Acquired also tells
//     the expiry, first, if it was not told yet.
//
// Close ends it: every watcher breaks. All methods are safe for concurrent
// use.
type Feed struct {
	hub   *Hub
	clock lease.Clock
	exp   *Expiries
	check func(leases []lease.Lease)

	mu       sync.Mutex
	keys     map[string]Entry // the last state told for keys under a watched prefix
	barriers map[string]chan struct{}
	done     chan struct{} // closed by Close
	err      error
}

// NewFeed returns a Feed publishing to hub, timing expiries on clock (the
// engine's) and calling check, in a timer's goroutine, with the leases
// watchers were told are held whose expiry the clock has reached.
func NewFeed(hub *Hub, clock lease.Clock, check func(leases []lease.Lease)) *Feed {
	f := &Feed{hub: hub, clock: clock, check: check, keys: map[string]Entry{},
		barriers: map[string]chan struct{}{}, done: make(chan struct{})}
	f.exp = NewExpiries(clock, f.due)
	return f
}

// Hub returns the hub the feed publishes to.
func (f *Feed) Hub() *Hub { return f.hub }

// Clock returns the engine's clock the feed times expiries on.
func (f *Feed) Clock() lease.Clock { return f.clock }

// Done is closed when the feed is closed.
func (f *Feed) Done() <-chan struct{} { return f.done }

// Err returns the error Close was given, or nil while the feed is open.
func (f *Feed) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Change tells the feed of a change the stream reported, of kind (Acquired,
// Renewed, Released, or Expired for an expiry the backend verified), to l
// at version v. A change no later than the one last told for its key is
// one the watchers already know of (a snapshot told it, or the backend
// reported an expiry twice) and is dropped; an Expired is published only
// for the lease the watchers were told is held.
func (f *Feed) Change(kind lease.EventKind, l lease.Lease, v Version) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || !f.hub.Watched(l.Key) {
		return
	}
	cur, known := f.keys[l.Key]
	if known && !v.After(cur.Version) {
		return
	}
	l.ID = lease.ID{}
	switch kind {
	case lease.Acquired, lease.Renewed:
		if known && cur.Held && cur.Lease.Token != l.Token {
			f.endLocked(lease.Expired, cur) // its successor proves it expired
		}
		f.keys[l.Key] = Entry{Lease: l, Held: true, Version: v}
		f.hub.Publish(kind, l)
		f.exp.Track(l)
	case lease.Released, lease.Expired:
		switch {
		case known && cur.Held && cur.Lease.Token == l.Token:
			f.endLocked(kind, cur)
		case kind == lease.Released:
			f.hub.Publish(kind, l)
		}
		f.keys[l.Key] = Entry{Lease: l, Version: v}
	}
}

// Known returns the last version told of key, if the feed keeps one (key
// is under a watched prefix and was told of): a backend whose versions of
// a key only rise checks a change against it before Change drops it as
// one the watchers know of, to catch its data going back.
func (f *Feed) Known(key string) (Version, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.keys[key]
	return e.Version, ok
}

// endLocked publishes the end of cur, told held, and forgets its expiry.
func (f *Feed) endLocked(kind lease.EventKind, cur Entry) {
	f.exp.Forget(cur.Lease.Key)
	f.keys[cur.Lease.Key] = Entry{Lease: cur.Lease, Version: Version{Token: cur.Lease.Token, Ended: true}}
	f.hub.Publish(kind, cur.Lease)
}

// Barrier returns a fresh name for a barrier the backend sends down its
// stream, and a channel closed once the reader reports it (Passed) or the
// feed closes.
func (f *Feed) Barrier() (string, <-chan struct{}) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		close(ch)
		return name, ch
	}
	f.barriers[name] = ch
	return name, ch
}

// Passed tells the feed that the reader met barrier name in the stream.
// Names it did not hand out (another process's barriers) are ignored.
func (f *Feed) Passed(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.barriers[name]; ok {
		delete(f.barriers, name)
		close(ch)
	}
}

// WaitBarrier sends a barrier with send and waits until the reader has
// passed it: every change the engine made before send began has then
// reached Change.
func (f *Feed) WaitBarrier(ctx context.Context, send func(ctx context.Context, name string) error) error {
	name, passed := f.Barrier()
	if err := send(ctx, name); err != nil {
		f.mu.Lock()
		delete(f.barriers, name)
		f.mu.Unlock()
		return err
	}
	select {
	case <-passed:
		if err := f.Err(); err != nil {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Join records sub's snapshot, snap, read after sub subscribed and before a
// barrier the reader has passed (see Feed). For each key the later of the
// snapshot's state and the stream's is the one the watcher starts from; a
// lease the stream last told held whose key the snapshot finds ended (or
// held again with a newer token) expired meanwhile, and its watchers are
// told so first.
func (f *Feed) Join(sub *Sub, snap []Entry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	for _, e := range snap {
		k := e.Lease.Key
		if !sub.Matches(k) {
			continue
		}
		st := e
		st.Lease.ID = lease.ID{}
		if cur, known := f.keys[k]; known && !e.Version.After(cur.Version) {
			st = cur
		} else {
			if known && cur.Held {
				f.endLocked(lease.Expired, cur)
			}
			f.keys[k] = st
		}
		if st.Held {
			sub.Held(st.Lease)
			f.exp.Track(st.Lease)
		} else {
			sub.Free(k)
		}
	}
	return nil
}

// Start is a new watch of sc on the feed, in the order Feed needs:
// subscribe, read the state (snapshot), pass a barrier (barrier, which
// returns once every change made before it began has reached the feed),
// and join the two. On any error the subscription is closed and the error
// returned as it is, for the backend to wrap.
func (f *Feed) Start(ctx context.Context, sc Scope, snapshot func(ctx context.Context) ([]Entry, error), barrier func(ctx context.Context) error) (*Sub, error) {
	sub, err := f.hub.SubscribeScope(sc)
	if err != nil {
		return nil, err
	}
	snap, err := snapshot(ctx)
	if err == nil {
		err = barrier(ctx)
	}
	if err == nil {
		err = f.Join(sub, snap)
	}
	if err != nil {
		sub.Close()
		return nil, err
	}
	return sub, nil
}

// due hands the backend the leases whose expiry the clock reached that
// are still told held.
func (f *Feed) due(keys []string) {
	f.mu.Lock()
	var leases []lease.Lease
	for _, k := range keys {
		if e, ok := f.keys[k]; ok && e.Held {
			leases = append(leases, e.Lease)
		}
	}
	f.mu.Unlock()
	if len(leases) > 0 {
		f.check(leases)
	}
}

// Retrack tells the feed that check found l (its key and token) still live
// until expires on the engine's clock: its expiry is timed again, no sooner
// than a millisecond from now, so that a clock a little ahead of the
// engine's does not spin.
func (f *Feed) Retrack(l lease.Lease, expires time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.keys[l.Key]; !ok || !e.Held || e.Lease.Token != l.Token || f.err != nil {
		return
	}
	l.Expires = expires
	if floor := f.clock.Now().Add(time.Millisecond); l.Expires.Before(floor) {
		l.Expires = floor
	}
	f.exp.Track(l)
}

// Close cuts every watcher off with err, which must match
// lease.ErrUnavailable, and stops the timers. The first Close's error
// stands.
func (f *Feed) Close(err error) {
	f.mu.Lock()
	if f.err != nil {
		f.mu.Unlock()
		return
	}
	if err == nil {
		err = errors.New("watchhub: feed closed")
	}
	f.err = err
	for name, ch := range f.barriers {
		delete(f.barriers, name)
		close(ch)
	}
	close(f.done)
	f.keys = nil
	f.mu.Unlock()
	f.hub.Close(err)
	f.exp.Stop()
}

// OffsetClock is the local clock moved by an offset to match an engine's,
// as a lease.Clock for timing expiries the engine judges.
type OffsetClock struct{ Offset time.Duration }

// Now returns the local time plus the offset.
func (c OffsetClock) Now() time.Time { return time.Now().Add(c.Offset) }

// AfterFunc is time.AfterFunc.
func (c OffsetClock) AfterFunc(d time.Duration, f func()) lease.Timer { return time.AfterFunc(d, f) }
