package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// keepAliveLead is how much longer than the TTL a waiter keeps its etcd
// lease guaranteed, so that it still outlives the TTL when the claim lands.
const keepAliveLead = 250 * time.Millisecond

// AcquireWait implements lease.WaitAcquirer. Waiters queue in etcd in the
// order they arrive — each is a key under the lease key's waiter range,
// attached to the waiter's own etcd lease, ordered by create revision — and
// each waits only for the deletion of the one ahead of it (the head for the
// holder's), on watches registered before it reads the queue, so that a
// deletion is delivered at once rather than after etcd's 100 ms watch
// resync. The first call is one Txn: acquire if
// the key is free and nobody waits, else join the queue.
//
// A waiter claims the lease only in a Txn that also checks its own queue
// entry still exists with its create revision: if its etcd lease expired
// or was revoked while it waited, it has lost its place, and it returns an
// error matching lease.ErrUnavailable instead of a lease (the bug Jepsen
// found in etcd 3.4.3's Mutex, fixed in etcd PR #11408).
func (s *Store) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	el, _, err := s.startAcquire(ctx, key, owner, ttl, false)
	if err != nil {
		return lease.Lease{}, err
	}
	id := lease.NewID()
	var name [8]byte
	_, _ = rand.Read(name[:])
	w := s.path(kindWaiter, key, hex.EncodeToString(name[:]))
	var floor int64
	var value string
	var exp time.Time
	var resp *clientv3.TxnResponse
	for retried := false; ; retried = true {
		floor = s.maxRev.Load()
		exp = s.estimate(el)
		value = holderValue(id, owner, ttl, el.secs, exp)
		create, hw := s.createOps(key, value, el, floor)
		resp, err = s.txn(ctx, &txnReq{key: key, hw: hw, cmps: s.freeCmps(key), then: create,
			els: []clientv3.Op{clientv3.OpPut(w, owner, clientv3.WithLease(el.id))}})
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			// Refused, so not applied: the pooled etcd lease is gone (see
			// Release). Once more on a new one.
			if el, err = s.grant(ctx, ttl); err != nil {
				return lease.Lease{}, fail(ctx, "acquire", key, err)
			}
			continue
		}
		break
	}
	if err != nil {
		s.lost(el, err) // we may have created a generation or queued on it
		return lease.Lease{}, failUnknown(ctx, "acquire", key, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		s.revoke(el.id)
		return lease.Lease{}, err
	}
	if resp.Succeeded {
		return s.granted(key, owner, id, ttl, el, resp.Header.Revision, exp)
	}
	q := &waiter{s: s, key: key, owner: owner, ttl: ttl, id: id, el: el, name: w, rev: resp.Header.Revision}
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
	name  string // the queue entry's etcd key
	rev   int64  // its create revision: the place in the queue
}

func (q *waiter) wait(ctx context.Context) (lease.Lease, error) {
	s := q.s
	holder := s.path(kindHolder, q.key)
	queue := s.path(kindWaiter, q.key, "")
	var w *queueWatch
	defer func() { w.close() }()
	claim := false
	for {
		if time.Until(q.el.safeUntil()) < q.ttl+keepAliveLead {
			if err := s.keepAlive(ctx, q.el); err == errLeaseGone {
				return lease.Lease{}, q.lostPlace()
			} else if err != nil {
				return lease.Lease{}, q.abandon(ctx, err)
			}
		}
		if w == nil {
			var err error
			if w, err = q.watch(ctx, holder, queue); err != nil {
				if ctx.Err() != nil {
					return lease.Lease{}, q.leave(ctx)
				}
				return lease.Lease{}, q.abandon(ctx, err)
			}
		}
		floor := s.maxRev.Load()
		// Claim if our entry is still ours, nobody is ahead, and the key is
		// free; otherwise learn what to wait for. Unless a deletion we
		// waited for suggests we are next, only look (a read-only Txn is not
		// a Raft write): a failed claim is a write that changes nothing.
		reads := []clientv3.Op{
			clientv3.OpGet(q.name),
			clientv3.OpGet(queue, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(q.rev-1))...),
			clientv3.OpGet(holder),
		}
		req := &txnReq{key: q.key, els: reads, cmps: []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(q.name), "=", q.rev),
			clientv3.Compare(clientv3.CreateRevision(queue), ">", q.rev-1).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(holder), "=", 0),
		}}
		exp := s.estimate(q.el)
		value := holderValue(q.id, q.owner, q.ttl, q.el.secs, exp)
		if claim {
			create, hw := s.createOps(q.key, value, q.el, floor)
			req.then, req.hw = append([]clientv3.Op{clientv3.OpDelete(q.name)}, create...), hw
		}
		resp, err := s.txn(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				s.revoke(q.el.id) // the claim may have happened
				return lease.Lease{}, fmt.Errorf("etcdstore: waiting for %q: %w", q.key, context.Cause(ctx))
			}
			return lease.Lease{}, q.abandon(ctx, err)
		}
		if err := s.observe(floor, resp.Header); err != nil {
			s.revoke(q.el.id)
			return lease.Lease{}, err
		}
		if resp.Succeeded {
			if claim {
				return s.granted(q.key, q.owner, q.id, q.ttl, q.el, resp.Header.Revision, exp)
			}
			claim = true // we are next: claim at once
			continue
		}
		claim = true
		if mine := kvOf(resp, 0); mine == nil || mine.CreateRevision != q.rev {
			return lease.Lease{}, q.lostPlace()
		}
		var target string
		if pred := kvOf(resp, 1); pred != nil {
			target = string(pred.Key)
		} else if kvOf(resp, 2) != nil {
			target = holder
		} else {
			continue // it changed between the comparison and the reads
		}
		ok, err := q.waitDelete(ctx, w, target, resp.Header.Revision)
		if err != nil {
			return lease.Lease{}, err
		}
		if !ok {
			w.close()
			w = nil
			claim = false
		}
	}
}

// queueWatch is a waiter's two watches, on the holder key and on the key's
// queue, for deletions only. They are registered before the waiter reads
// the queue and kept while it waits: a watch created from a past revision
// joins etcd's unsynced watchers and sees its events only at the next
// 100 ms resync (the trap that caps concurrency.Mutex, whose waiter watches
// from the revision it read), while one created at the current revision is
// synced and gets each deletion as soon as it is committed.
type queueWatch struct {
	cancel        context.CancelFunc
	holder, queue clientv3.WatchChan
}

func (w *queueWatch) close() {
	if w != nil {
		w.cancel()
	}
}

// watch registers the waiter's watches and waits until etcd confirms both.
func (q *waiter) watch(ctx context.Context, holder, queue string) (*queueWatch, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &queueWatch{
		cancel: cancel,
		holder: q.s.cli.Watch(wctx, holder, clientv3.WithFilterPut(), clientv3.WithCreatedNotify()),
		queue:  q.s.cli.Watch(wctx, queue, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()),
	}
	for _, ch := range []clientv3.WatchChan{w.holder, w.queue} {
		select {
		case wr, ok := <-ch:
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
	}
	return w, nil
}

// waitDelete waits, on w, for the deletion of target after revision seen
// (or of our own entry), for the time our etcd lease needs its next
// keep-alive, or for ctx's end (then it leaves the queue and returns ctx's
// error). It returns false if a watch ended and must be registered again.
func (q *waiter) waitDelete(ctx context.Context, w *queueWatch, target string, seen int64) (bool, error) {
	due := time.Until(q.el.safeUntil()) - q.ttl - keepAliveLead
	t := time.NewTimer(max(due, 10*time.Millisecond))
	defer t.Stop()
	relevant := func(wr clientv3.WatchResponse) bool {
		for _, ev := range wr.Events {
			k := string(ev.Kv.Key)
			if ev.Kv.ModRevision > seen && (k == target || k == q.name) {
				return true
			}
		}
		return false
	}
	for {
		select {
		case wr, ok := <-w.holder:
			if !ok || wr.Err() != nil {
				return false, nil
			}
			if relevant(wr) {
				return true, nil
			}
		case wr, ok := <-w.queue:
			if !ok || wr.Err() != nil {
				return false, nil
			}
			if relevant(wr) {
				return true, nil
			}
		case <-t.C:
			return true, nil
		case <-ctx.Done():
			return false, q.leave(ctx)
		}
	}
}

// leave takes our entry out of the queue after ctx ended, and returns ctx's
// error.
func (q *waiter) leave(ctx context.Context) error {
	s := q.s
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	resp, err := s.txn(cctx, &txnReq{key: q.key,
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(q.name), "=", q.rev)},
		then: []clientv3.Op{clientv3.OpDelete(q.name)}})
	switch {
	case err != nil:
		s.revoke(q.el.id)
	case resp.Succeeded:
		s.give(q.el) // keyless again
	}
	return fmt.Errorf("etcdstore: waiting for %q: %w", q.key, context.Cause(ctx))
}

// abandon handles a failed etcd call while queued: the outcome of a claim
// may be unknown, so revoking our etcd lease ends whatever it carries —
// the queue entry and any generation we might just have created.
func (q *waiter) abandon(ctx context.Context, err error) error {
	q.s.revoke(q.el.id)
	return fail(ctx, "acquire (waiting)", q.key, err)
}

// lostPlace reports that our queue entry vanished while we waited.
func (q *waiter) lostPlace() error {
	q.s.revoke(q.el.id)
	return fmt.Errorf("%w: etcdstore: waiting for %q: our place in the queue is gone (its etcd lease %x expired or was revoked); not claiming the lease",
		lease.ErrUnavailable, q.key, int64(q.el.id))
}
