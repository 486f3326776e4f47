package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

var _ lease.Watcher = (*Store)(nil)

// Watch implements lease.Watcher with an etcd watch. A watch reads the
// entries under the prefix at one revision R (a linearizable range read:
// one instant of the store) and watches the Store's keys after R (an etcd
// watch from R whose events of R are dropped), so that
// its state and its changes meet at R with nothing missed or told twice,
// in revision order. It keeps each key's entries, oldest first (the first
// holds), and etcd's watch carries each change:
//
//   - Acquired: an entry created for a key that had none, or the oldest
//     entry left once the holder's went (a waiter's turn: its lease has the
//     expiry its entry showed then — a waiter writes its entry with each
//     keep-alive — and the token is its create revision);
//   - Renewed: the holder's entry written again. Renew therefore writes
//     the entry (a Raft write) besides keeping its etcd lease alive, which
//     alone etcd does not tell watchers;
//   - Released: the holder's entry deleted in the same revision as its
//     release mark (kindReleased), which Release writes in its Txn;
//   - Expired: the holder's entry deleted without a mark: etcd revoked its
//     expired etcd lease.
//
// Writes and deletions of waiters' entries change the watch's state but
// are not told.
//
// Expiry is etcd's: Expired comes when etcd deletes the entry, which
// it does when the generation's etcd lease expires on the leader: up to
// about 2.5 s after the lease's TTL (see the package documentation: etcd
// lease TTLs are whole seconds plus one, checked every 0.5 s), and then
// within the watch's delivery, a round trip. Leases in events carry the
// expiry the call that wrote them returned (an estimate on the writer's
// clock); an ended lease is told as it was last told.
//
// A watch breaks with an error matching lease.ErrUnavailable when etcd
// cancels it (the revision was compacted, the member lost its leader, the
// client closed), when etcd sends it nothing for watchSilenceLimit (5 s)
// though it asks for progress after each watchProgressAfter (1 s) of
// silence — a link that drops everything without closing, a hung member:
// its picture may then be stale — and when its reader leaves more than
// watchhub.DefaultBuffer (1024) events unread. Its first read gives up
// after watchStartLimit (10 s), which leaves room for a large prefix.
// Each watch is an etcd watch of its own over the Store's prefix, filtered
// here: it costs etcd a watcher and the client every change under the
// Store's prefix while it lasts.
func (s *Store) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the etcd watch when the caller stops
		for ev, err := range watchhub.Watch(wctx, prefix, s.startWatch) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// WatchKey implements lease.KeyWatcher: Watch of exactly key, whose
// changes alone reach the watcher's buffer. The etcd watch still covers
// the key's prefix (its entries and marks are keys under it); the changes
// of other keys are dropped before the buffer.
func (s *Store) WatchKey(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for ev, err := range watchhub.WatchKey(wctx, key, s.startWatch) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// releasedOp marks key's release, in the Txn that deletes its holder's entry.
func (s *Store) releasedOp(key string) clientv3.Op {
	return clientv3.OpPut(s.path(kindReleased, key), "")
}

// startWatch reads the state at one revision, records it in a hub of the
// watch's own and starts the goroutine that publishes the changes after
// it; the goroutine ends with ctx.
func (s *Store) startWatch(ctx context.Context, sc watchhub.Scope) (*watchhub.Sub, error) {
	prefix := sc.Prefix
	if err := s.usable(); err != nil {
		return nil, err
	}
	floor := s.maxRev.Load()
	// Bounded: over a link that drops everything the read would wait for
	// good, and the watch's reader with it.
	gctx, cancel := context.WithTimeoutCause(ctx, watchStartLimit,
		fmt.Errorf("etcd did not answer the watch's first read within %v: %w", watchStartLimit, errSilent))
	// The store id is read at the same revision: a watch of data wiped
	// and written past the revisions the Store saw (lease.Follow's, after
	// the last broke) would show it as the Store's (wiped.go).
	tresp, err := s.cli.Txn(gctx).Then(clientv3.OpGet(s.path(kindEntry, prefix), clientv3.WithPrefix()), s.idGet()).Commit()
	cancel()
	if err != nil {
		return nil, fail(gctx, "watch", prefix, err)
	}
	if err := s.observe(floor, tresp.Header); err != nil {
		return nil, err
	}
	if err := s.checkID(kvOf(tresp, 1), "watching"); err != nil {
		return nil, err
	}
	resp := tresp.Responses[0].GetResponseRange()
	hub := watchhub.New("etcdstore", watchhub.DefaultBuffer)
	sub, err := hub.SubscribeScope(sc)
	if err != nil {
		return nil, err
	}
	st := &watchState{s: s, queues: map[string][]*mvccpb.KeyValue{}, told: map[string]lease.Lease{}}
	for _, kv := range resp.Kvs {
		k, ok := s.leaseKeyOf(kv.Key)
		if !ok {
			continue
		}
		st.add(k, kv)
	}
	for k, q := range st.queues {
		l, err := s.watchLease(k, q[0])
		if err != nil {
			sub.Close()
			return nil, err
		}
		st.told[k] = l
	}
	for _, l := range sortedLeases(st.told) {
		sub.Held(l)
	}
	// The etcd watch starts at the state's revision R, not R+1, and its
	// events of R are dropped: etcd answers a progress request only for
	// watches that start at or below its current revision, and a watch
	// from R+1 where nothing is written would never hear one.
	rev := tresp.Header.Revision
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.prefix, clientv3.WithPrefix(),
		clientv3.WithRev(rev))
	go s.publishChanges(ctx, hub, prefix, st, rev, wch)
	return sub, nil
}

// watchState is what a watch knows: each key's entries, oldest first, and
// the lease it last told of each key's holder.
type watchState struct {
	s      *Store
	queues map[string][]*mvccpb.KeyValue
	told   map[string]lease.Lease
}

// add records entry kv of key k, written anew or for the first time.
func (st *watchState) add(k string, kv *mvccpb.KeyValue) {
	q := st.queues[k]
	for i, e := range q {
		if bytes.Equal(e.Key, kv.Key) {
			q[i] = kv
			return
		}
	}
	i := len(q)
	for i > 0 && q[i-1].CreateRevision > kv.CreateRevision {
		i--
	}
	st.queues[k] = slices.Insert(q, i, kv)
}

// remove takes entry name out of key k's and reports whether it was the
// holder's.
func (st *watchState) remove(k string, name []byte) bool {
	q := st.queues[k]
	for i, e := range q {
		if bytes.Equal(e.Key, name) {
			q = slices.Delete(q, i, i+1)
			if len(q) == 0 {
				delete(st.queues, k)
			} else {
				st.queues[k] = q
			}
			return i == 0
		}
	}
	return false
}

func sortedLeases(m map[string]lease.Lease) []lease.Lease {
	out := make([]lease.Lease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b lease.Lease) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// watchLease is the lease entry kv describes, with the expiry its writer
// returned (or, in a value of an earlier version, the latest it can
// expire).
func (s *Store) watchLease(key string, kv *mvccpb.KeyValue) (lease.Lease, error) {
	l, err := leaseFrom(key, kv, time.Now())
	if err != nil {
		return lease.Lease{}, err
	}
	if in, err := decodeInfo(kv); err == nil && in.ExpUS != 0 {
		l.Expires = time.UnixMicro(in.ExpUS)
	}
	return l, nil
}

// publishChanges publishes the changes wch reports after revision seen of
// the holders of keys under prefix until ctx ends, etcd cancels the watch
// or falls silent, which breaks it.
func (s *Store) publishChanges(ctx context.Context, hub *watchhub.Hub, prefix string, st *watchState, seen int64, wch clientv3.WatchChan) {
	marks := s.path(kindReleased, "")
	broken := func(err error) {
		hub.Close(fmt.Errorf("etcdstore: watch of %q: %w: %w", prefix, lease.ErrUnavailable, err))
	}
	// etcd is asked for progress after each watchProgressAfter of silence;
	// a watch that hears nothing for watchSilenceLimit, not even that,
	// breaks: its picture may be stale, and a link that stays open while
	// it drops everything would otherwise keep it open for good.
	rctx := clientv3.WithRequireLeader(ctx)
	quiet := time.NewTimer(watchProgressAfter)
	defer quiet.Stop()
	heard := time.Now()
	for {
		var resp clientv3.WatchResponse
		select {
		case r, ok := <-wch:
			if !ok {
				// The channel closed: ctx ended (the watch is over), or
				// the client closed.
				if ctx.Err() == nil {
					broken(errors.New("the etcd watch ended"))
				}
				return
			}
			resp = r
		case <-quiet.C:
			if silent := time.Since(heard); silent >= watchSilenceLimit {
				broken(fmt.Errorf("etcd sent nothing for %v, not even the progress asked for: %w", silent.Round(time.Millisecond), errSilent))
				return
			}
			s.requestProgress(rctx)
			s.checkStoreID(ctx)
			quiet.Reset(watchProgressAfter)
			continue
		case <-s.stopped:
			hub.Close(s.usable()) // matches lease.ErrUnavailable
			return
		case <-ctx.Done():
			return
		}
		heard = time.Now()
		quiet.Reset(watchProgressAfter)
		if err := resp.Err(); err != nil {
			broken(err)
			return
		}
		for len(resp.Events) > 0 && resp.Events[0].Kv.ModRevision <= seen {
			resp.Events = resp.Events[1:] // in the state read already
		}
		// A release deletes the holder's entry and writes its mark in one
		// revision, whose events come in one response (which may hold
		// several revisions, and a key's release in more than one).
		type mark struct {
			key string
			rev int64
		}
		released := map[mark]bool{}
		for _, ev := range resp.Events {
			if k, ok := strings.CutPrefix(string(ev.Kv.Key), marks); ok && ev.Type == mvccpb.PUT {
				released[mark{k, ev.Kv.ModRevision}] = true
			}
			if string(ev.Kv.Key) == s.idKey {
				// Written once, never changed: the prefix's data was
				// wiped and made anew (wiped.go).
				kv := ev.Kv
				if ev.Type == mvccpb.DELETE {
					kv = nil
				}
				if err := s.checkID(kv, "watching"); err != nil {
					hub.Close(err)
					return
				}
			}
		}
		for _, ev := range resp.Events {
			k, ok := s.leaseKeyOf(ev.Kv.Key)
			if !ok || !strings.HasPrefix(k, prefix) {
				continue
			}
			switch ev.Type {
			case mvccpb.PUT:
				had := len(st.queues[k]) > 0
				st.add(k, ev.Kv)
				if q := st.queues[k]; q[0] != ev.Kv {
					continue // a waiter's entry
				}
				l, err := s.watchLease(k, ev.Kv)
				if err != nil {
					broken(err)
					return
				}
				kind := lease.Renewed
				if !had {
					kind = lease.Acquired
				}
				st.told[k] = l
				hub.Publish(kind, l)
			case mvccpb.DELETE:
				if !st.remove(k, ev.Kv.Key) {
					continue // a waiter's entry
				}
				kind := lease.Expired
				if released[mark{k, ev.Kv.ModRevision}] {
					kind = lease.Released
				}
				hub.Publish(kind, st.told[k])
				delete(st.told, k)
				if q := st.queues[k]; len(q) > 0 { // the next in line holds
					l, err := s.watchLease(k, q[0])
					if err != nil {
						broken(err)
						return
					}
					st.told[k] = l
					hub.Publish(lease.Acquired, l)
				}
			}
		}
	}
}

// How a watch tells a live etcd from a silent link: after
// watchProgressAfter without a response it asks etcd for a progress
// notification (a response without events, which every watch on the
// client's stream gets), and after watchSilenceLimit without any response
// it breaks. The limit leaves room for several lost asks and an etcd
// leader election (which a watch requiring a leader is cancelled by
// anyway).
const (
	watchProgressAfter = time.Second
	watchSilenceLimit  = 5 * time.Second
	// watchStartLimit bounds a watch's first read, the prefix's entries.
	watchStartLimit = 10 * time.Second
)

// errSilent is why a watch ended when etcd did not answer it.
var errSilent = errors.New("the link to etcd is down or drops everything")

// requestProgress asks etcd for a progress notification on the watch stream
// of ctx (whose metadata names the stream), at most once per
// watchProgressAfter for all of the Store's watches: etcd answers every
// watch on the stream at once. It does not wait: a silent link can block
// the send until ctx ends.
func (s *Store) requestProgress(ctx context.Context) {
	now := time.Now().UnixNano()
	next := s.progressNext.Load()
	if now < next || !s.progressNext.CompareAndSwap(next, now+int64(watchProgressAfter)) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, watchSilenceLimit)
		defer cancel()
		_ = s.cli.RequestProgress(ctx)
	}()
}
