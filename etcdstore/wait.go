package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// AcquireWait implements lease.WaitAcquirer. Holder and waiters of a key
// are its entries, each attached to its caller's own etcd lease and
// ordered by create revision: the oldest holds. The first call is one Txn
// that creates the caller's entry; if the key had none, it holds at once.
// Otherwise it waits, without writing, until every entry older than its
// own is gone — released, expired, or left — and then holds with its
// entry's create revision as token: a hand-off costs the releaser's Txn and
// the watch event that tells the next in line, as concurrency.Election's
// does. The waiter learns it from a watch of the key's deletions, registered
// before it reads which entries are older (a watch created at the current
// revision is synced: a deletion is delivered at once rather than at etcd's
// next 100 ms resync).
//
// A waiter holds only if its own entry still exists: if its etcd lease
// expired or was revoked while it waited, the deletion of its entry comes
// before (or with) that of the last older one, and it returns an error
// matching lease.ErrUnavailable instead of a lease (the bug Jepsen found
// in etcd 3.4.3's Mutex, fixed in etcd PR #11408). While it waits it keeps
// its etcd lease alive and writes its entry again with each keep-alive
// (at a third of its etcd TTL), so that the expiry its entry shows when it comes
// to hold is the one it returns.
func (s *Store) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	el, _, err := s.startAcquire(ctx, key, owner, ttl, true, false)
	if err != nil {
		return lease.Lease{}, err
	}
	id := lease.NewID()
	var floor int64
	var exp time.Time
	var resp *clientv3.TxnResponse
	for retried := false; ; retried = true {
		floor = s.maxRev.Load()
		exp = s.estimate(el)
		value := holderValue(id, owner, ttl, el.secs, exp)
		// Both branches create our entry, named for holding at once or
		// for waiting; the comparison tells which.
		first, hw := s.createOps(s.firstKey(key), value, el, floor)
		queued := append([]clientv3.Op{clientv3.OpPut(s.entryKey(key, el.id), value, clientv3.WithLease(el.id))},
			first[1:]...) // the same high-water raise, if any: one branch runs
		// Each branch reads the store id last (wiped.go).
		first = append(first, s.idGet())
		queued = append(queued, s.idGet())
		resp, err = s.txn(ctx, &txnReq{key: key, hw: hw, cmps: s.freeCmps(key), then: first, els: queued})
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			// Refused, so not applied: the pooled etcd lease is gone (see
			// Release). Once more on a new one.
			if el, err = s.grant(ctx, etcdTTL(ttl, true)); err != nil {
				return lease.Lease{}, fail(ctx, "acquire", key, err)
			}
			continue
		}
		break
	}
	if err != nil {
		s.lost(el, err) // we may have created an entry on it
		return lease.Lease{}, failUnknown(ctx, "acquire", key, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		s.revoke(el.id)
		return lease.Lease{}, err
	}
	if err := s.checkID(kvOf(resp, len(resp.Responses)-1), fmt.Sprintf("granting %q", key)); err != nil {
		// Its entry, made in data not the Store's, goes with its etcd
		// lease: no token of it is handed out.
		s.revokeSurely(el)
		return lease.Lease{}, err
	}
	rev := resp.Header.Revision
	if resp.Succeeded {
		return s.granted(key, s.firstKey(key), owner, id, ttl, el, rev, rev, exp)
	}
	q := &waiter{s: s, key: key, owner: owner, ttl: ttl, id: id, el: el,
		name: s.entryKey(key, el.id), rev: rev, wrote: []written{{rev, exp}}}
	return q.wait(ctx)
}

// waiter is one AcquireWait call's place in the queue.
type waiter struct {
	s     *Store
	key   string
	owner string
	ttl   time.Duration
	id    lease.ID
	el    *etcdLease
	name  string    // its entry's etcd key
	rev   int64     // its entry's create revision: the place in the queue, the token
	wrote []written // its writes of the entry, oldest first
}

// written is one write of a waiter's entry: its revision and the expiry
// the value holds.
type written struct {
	rev int64
	exp time.Time
}

// at returns the last write at or before revision r.
func (q *waiter) at(r int64) written {
	w := q.wrote[0]
	for _, x := range q.wrote {
		if x.rev <= r {
			w = x
		}
	}
	return w
}

func (q *waiter) wait(ctx context.Context) (lease.Lease, error) {
	s := q.s
	var w *queueWatch
	defer func() { w.close() }()
	var older map[string]bool // the entries older than ours still there
	var seen int64            // the revision older was read at
	for {
		if !time.Now().Before(q.el.keepAliveDue()) {
			if err := q.keepAlive(ctx); err != nil {
				return lease.Lease{}, err
			}
		}
		if w == nil {
			var err error
			if w, err = q.watch(ctx); err != nil {
				if ctx.Err() != nil {
					return lease.Lease{}, q.leave(ctx)
				}
				return lease.Lease{}, q.abandon(ctx, err)
			}
			// With the watch in place, read our entry and the older ones.
			floor := s.maxRev.Load()
			resp, err := s.txn(ctx, &txnReq{key: q.key, then: []clientv3.Op{
				clientv3.OpGet(q.name, clientv3.WithKeysOnly()),
				clientv3.OpGet(s.entries(q.key), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(q.rev-1)),
			}})
			if err != nil {
				if ctx.Err() != nil {
					return lease.Lease{}, q.leave(ctx)
				}
				return lease.Lease{}, q.abandon(ctx, err)
			}
			if err := s.observe(floor, resp.Header); err != nil {
				s.revoke(q.el.id)
				return lease.Lease{}, err
			}
			if mine := kvOf(resp, 0); mine == nil || mine.CreateRevision != q.rev {
				return lease.Lease{}, q.lostPlace()
			}
			seen = resp.Header.Revision
			older = map[string]bool{}
			for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
				older[string(kv.Key)] = true
			}
		}
		if len(older) == 0 {
			return q.holds(seen)
		}
		at, ok, err := q.waitOlder(ctx, w, older, seen)
		switch {
		case err != nil:
			return lease.Lease{}, err
		case !ok:
			w.close()
			w = nil
		case at != 0:
			return q.holds(at)
		}
	}
}

// holds returns the lease, held since revision at, when the last older
// entry went: with the expiry our entry showed then, which is what a watch
// reports.
func (q *waiter) holds(at int64) (lease.Lease, error) {
	last := q.wrote[len(q.wrote)-1]
	return q.s.granted(q.key, q.name, q.owner, q.id, q.ttl, q.el, q.rev, last.rev, q.at(at).exp)
}

// keepAlive keeps our etcd lease alive and writes our entry again with the
// expiry it now has.
func (q *waiter) keepAlive(ctx context.Context) error {
	s := q.s
	if err := s.keepAlive(ctx, q.el); err == errLeaseGone {
		return q.lostPlace()
	} else if err != nil {
		return q.abandon(ctx, err)
	}
	floor := s.maxRev.Load()
	exp := s.estimate(q.el)
	resp, err := s.txn(ctx, &txnReq{key: q.key,
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(q.name), "=", q.rev)},
		then: []clientv3.Op{clientv3.OpPut(q.name, holderValue(q.id, q.owner, q.ttl, q.el.secs, exp), clientv3.WithLease(q.el.id))}})
	if err != nil {
		if ctx.Err() != nil {
			s.revokeSurely(q.el) // the write may have happened; we may hold
			return fmt.Errorf("etcdstore: waiting for %q: %w", q.key, context.Cause(ctx))
		}
		return q.abandon(ctx, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		s.revoke(q.el.id)
		return err
	}
	if !resp.Succeeded {
		return q.lostPlace()
	}
	q.wrote = append(q.wrote, written{resp.Header.Revision, exp})
	return nil
}

// queueWatch is a waiter's watch of its key's entries, for deletions only.
// It is registered before the waiter reads which entries are older and
// kept while it waits: a watch created from a past revision joins etcd's
// unsynced watchers and sees its events only at the next 100 ms resync (the
// trap that caps concurrency.Mutex, whose waiter watches from the revision
// it read), while one created at the current revision is synced and gets
// each deletion as soon as it is committed.
type queueWatch struct {
	cancel context.CancelFunc
	ch     clientv3.WatchChan
}

func (w *queueWatch) close() {
	if w != nil {
		w.cancel()
	}
}

// watch registers the waiter's watch and waits until etcd confirms it.
func (q *waiter) watch(ctx context.Context) (*queueWatch, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &queueWatch{cancel: cancel,
		ch: q.s.cli.Watch(wctx, q.s.entries(q.key), clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())}
	select {
	case wr, ok := <-w.ch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("watching the queue: %v", wr.Err())
		}
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	return w, nil
}

// waitOlder waits, on w, for the deletions after revision seen of the
// entries in older, taking each out. It returns the revision at which the
// last went (at), 0 when our etcd lease needs its next keep-alive, ok false
// if the watch ended and must be registered again (older is then read
// anew), or an error: our own entry was deleted first, or ctx ended (then
// it leaves the queue).
func (q *waiter) waitOlder(ctx context.Context, w *queueWatch, older map[string]bool, seen int64) (at int64, ok bool, _ error) {
	due := time.Until(q.el.keepAliveDue())
	t := time.NewTimer(max(due, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case wr, open := <-w.ch:
			if !open || wr.Err() != nil {
				return 0, false, nil
			}
			for _, ev := range wr.Events { // in revision order
				if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= seen {
					continue
				}
				k := string(ev.Kv.Key)
				if k == q.name {
					return 0, true, q.lostPlace()
				}
				if older[k] {
					delete(older, k)
					if len(older) == 0 {
						// Our own entry's deletion, if it came in the
						// same revision, is in this response too.
						for _, ev2 := range wr.Events {
							if ev2.Type == mvccpb.DELETE && string(ev2.Kv.Key) == q.name && ev2.Kv.ModRevision <= ev.Kv.ModRevision {
								return 0, true, q.lostPlace()
							}
						}
						return ev.Kv.ModRevision, true, nil
					}
				}
			}
		case <-t.C:
			return 0, true, nil
		case <-ctx.Done():
			return 0, false, q.leave(ctx)
		}
	}
}

// leave takes our entry out of the queue after ctx ended, and returns ctx's
// error. If the entry had come to hold meanwhile, that is a release: the
// Txn writes the release mark too.
func (q *waiter) leave(ctx context.Context) error {
	s := q.s
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	resp, err := s.txn(cctx, &txnReq{key: q.key,
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(q.name), "=", q.rev)},
		then: []clientv3.Op{clientv3.OpDelete(q.name), s.releasedOp(q.key)}})
	switch {
	case err != nil:
		s.revoke(q.el.id)
	case resp.Succeeded:
		s.give(q.el) // keyless again
	}
	return fmt.Errorf("etcdstore: waiting for %q: %w", q.key, context.Cause(ctx))
}

// abandon handles a failed etcd call while queued: our entry may have come
// to hold, or a write of it may have happened, so revoking our etcd lease
// ends whatever it carries.
func (q *waiter) abandon(ctx context.Context, err error) error {
	q.s.revokeSurely(q.el) // its entry may hold by now
	return fail(ctx, "acquire (waiting)", q.key, err)
}

// lostPlace reports that our entry vanished while we waited.
func (q *waiter) lostPlace() error {
	q.s.revoke(q.el.id)
	return fmt.Errorf("%w: etcdstore: waiting for %q: our place in the queue is gone (its etcd lease %x expired or was revoked); not holding the lease",
		lease.ErrUnavailable, q.key, int64(q.el.id))
}
