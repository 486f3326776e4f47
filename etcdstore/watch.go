package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

var _ lease.Watcher = (*Store)(nil)

// Watch implements lease.Watcher with an etcd watch. A watch reads the
// holder keys under the prefix at one revision R (a linearizable range
// read: one instant of the store) and watches the Store's keys from R+1,
// so that its state and its changes meet at R with nothing missed or told
// twice, in revision order. etcd's watch carries each change:
//
//   - Acquired: a holder key created (its first version);
//   - Renewed: a holder key written again. Renew therefore writes the
//     holder key (a Raft write) besides keeping its etcd lease alive, which
//     alone etcd does not tell watchers;
//   - Released: a holder key deleted in the same revision as its release
//     mark (kindReleased), which Release writes in its Txn;
//   - Expired: a holder key deleted without a mark: etcd revoked its
//     expired etcd lease.
//
// Expiry is etcd's: Expired comes when etcd deletes the holder key, which
// it does when the generation's etcd lease expires on the leader: up to
// about 2.5 s after the lease's TTL (see the package documentation: etcd
// lease TTLs are whole seconds plus one, checked every 0.5 s), and then
// within the watch's delivery, a round trip. Leases in events carry the
// expiry the call that wrote them returned (an estimate on the writer's
// clock); an ended lease is told as it was last told.
//
// A watch breaks with an error matching lease.ErrUnavailable when etcd
// cancels it (the revision was compacted, the member lost its leader, the
// client closed), and when its reader leaves more than
// watchhub.DefaultBuffer (1024) events unread. Each watch is an etcd watch
// of its own over the Store's prefix, filtered here: it costs etcd a watcher
// and the client every change under the Store's prefix while it lasts.
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

// releasedOp marks key's release, in the Txn that deletes its holder key.
func (s *Store) releasedOp(key string) clientv3.Op {
	return clientv3.OpPut(s.path(kindReleased, key), "")
}

// startWatch reads the state at one revision, records it in a hub of the
// watch's own and starts the goroutine that publishes the changes after
// it; the goroutine ends with ctx.
func (s *Store) startWatch(ctx context.Context, prefix string) (*watchhub.Sub, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	floor := s.maxRev.Load()
	resp, err := s.cli.Get(ctx, s.path(kindHolder, prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, fail(ctx, "watch", prefix, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		return nil, err
	}
	hub := watchhub.New("etcdstore", watchhub.DefaultBuffer)
	sub, err := hub.Subscribe(prefix)
	if err != nil {
		return nil, err
	}
	base := len(s.path(kindHolder, ""))
	told := map[string]lease.Lease{} // the leases the watch was told are held
	for _, kv := range resp.Kvs {
		l, err := s.watchLease(string(kv.Key[base:]), kv)
		if err != nil {
			sub.Close()
			return nil, err
		}
		sub.Held(l)
		told[l.Key] = l
	}
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.prefix, clientv3.WithPrefix(),
		clientv3.WithRev(resp.Header.Revision+1), clientv3.WithPrevKV())
	go s.publishChanges(ctx, hub, prefix, told, wch)
	return sub, nil
}

// watchLease is the lease holder key kv describes, with the expiry its
// writer returned (or, in a value of an earlier version, the latest it can
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

// publishChanges publishes the changes wch reports of holder keys under
// prefix until ctx ends or etcd cancels the watch, which breaks it.
func (s *Store) publishChanges(ctx context.Context, hub *watchhub.Hub, prefix string, told map[string]lease.Lease, wch clientv3.WatchChan) {
	holders, marks := s.path(kindHolder, ""), s.path(kindReleased, "")
	for resp := range wch {
		if err := resp.Err(); err != nil {
			hub.Close(fmt.Errorf("etcdstore: watch of %q: %w: %w", prefix, lease.ErrUnavailable, err))
			return
		}
		// A release deletes the holder key and writes its mark in one
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
		}
		for _, ev := range resp.Events {
			k, ok := strings.CutPrefix(string(ev.Kv.Key), holders)
			if !ok || !strings.HasPrefix(k, prefix) {
				continue
			}
			switch ev.Type {
			case mvccpb.PUT:
				l, err := s.watchLease(k, ev.Kv)
				if err != nil {
					hub.Close(fmt.Errorf("etcdstore: watch of %q: %w: %w", prefix, lease.ErrUnavailable, err))
					return
				}
				kind := lease.Renewed
				if ev.Kv.Version == 1 {
					kind = lease.Acquired
				}
				told[k] = l
				hub.Publish(kind, l)
			case mvccpb.DELETE:
				l, ok := told[k]
				if !ok && ev.PrevKv != nil {
					l, _ = s.watchLease(k, ev.PrevKv)
				}
				delete(told, k)
				kind := lease.Expired
				if released[mark{k, ev.Kv.ModRevision}] {
					kind = lease.Released
				}
				hub.Publish(kind, l)
			}
		}
	}
	// The channel closed: ctx ended (the watch is over), or the client
	// closed.
	if ctx.Err() == nil {
		hub.Close(fmt.Errorf("etcdstore: watch of %q: %w: %w", prefix, lease.ErrUnavailable, errors.New("the etcd watch ended")))
	}
}
