package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// freeCmps hold when key has no generation and no queued waiters.
func (s *Store) freeCmps(key string) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(s.path(kindHolder, key)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(s.path(kindWaiter, key, "")), "=", 0).WithPrefix(),
	}
}

// ownedCmps hold when l is key's current generation: same token, same ID.
func (s *Store) ownedCmps(l lease.Lease) []clientv3.Cmp {
	h := s.path(kindHolder, l.Key)
	return append(idCmps(h, l.ID), clientv3.Compare(clientv3.CreateRevision(h), "=", int64(l.Token)))
}

// createOps start a generation of key on el, its holder key's value being
// value (holderValue). The holder key's create revision — this
// transaction's revision — is the token. hw reports that the ops also raise
// the high-water mark.
func (s *Store) createOps(key, value string, el *etcdLease, floor int64) (ops []clientv3.Op, hw bool) {
	ops = []clientv3.Op{clientv3.OpPut(s.path(kindHolder, key), value, clientv3.WithLease(el.id))}
	if op, ok := s.highWaterDue(floor); ok {
		ops = append(ops, op)
		hw = true
	}
	return ops, hw
}

func kvOf(resp *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if i >= len(resp.Responses) {
		return nil
	}
	rr := resp.Responses[i].GetResponseRange()
	if rr == nil || len(rr.Kvs) == 0 {
		return nil
	}
	return rr.Kvs[0]
}

// startAcquire is what Acquire and AcquireWait do first: check the
// arguments and the store, and take an etcd lease for the TTL (takeEarly).
func (s *Store) startAcquire(ctx context.Context, key, owner string, ttl time.Duration, early bool) (*etcdLease, *refresh, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return nil, nil, err
	}
	if err := s.usable(); err != nil {
		return nil, nil, err
	}
	el, ref, err := s.takeEarly(ctx, ttl, early)
	if err != nil {
		return nil, nil, fail(ctx, "acquire", key, err)
	}
	return el, ref, nil
}

// Acquire implements lease.Backend: one Txn in the common case, which
// creates the generation if the key is free and has no waiters, and
// otherwise reads the holder — without writing data. A Grant precedes it
// only when the Store has no idle etcd lease for the TTL; a pooled etcd
// lease that needs a keep-alive gets it alongside the Txn (takeEarly).
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	el, ref, err := s.startAcquire(ctx, key, owner, ttl, true)
	if err != nil {
		return lease.Lease{}, err
	}
	id := lease.NewID()
	for retried := false; ; retried = true {
		floor := s.maxRev.Load()
		exp := s.estimate(el)
		if ref != nil {
			// A keep-alive goes out beside the Txn: once it succeeds, etcd
			// keeps the lease at least its TTL from now.
			if soon := time.UnixMicro(time.Now().Add(time.Duration(el.secs) * time.Second).UnixMicro()); soon.After(exp) {
				exp = soon
			}
		}
		value := holderValue(id, owner, ttl, el.secs, exp)
		create, hw := s.createOps(key, value, el, floor)
		resp, err := s.txn(ctx, &txnReq{key: key, hw: hw, cmps: s.freeCmps(key), then: create,
			els: []clientv3.Op{clientv3.OpGet(s.path(kindHolder, key))}})
		kaErr := ref.wait()
		ref = nil
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			// Refused, so not applied: the pooled etcd lease is gone
			// (expired before its keep-alive, or revoked by another Store
			// that moved a generation off it). Once more on a new one.
			if el, err = s.grant(ctx, ttl); err != nil {
				return lease.Lease{}, fail(ctx, "acquire", key, err)
			}
			continue
		}
		if err != nil {
			if kaErr != nil {
				s.revoke(el.id) // not vouched for: not pooled again either way
			} else {
				s.lost(el, err) // we may have created a generation on it
			}
			return lease.Lease{}, failUnknown(ctx, "acquire", key, err)
		}
		if err := s.observe(floor, resp.Header); err != nil {
			s.revoke(el.id)
			return lease.Lease{}, err
		}
		if !resp.Succeeded {
			if kaErr == nil {
				s.give(el)
			} // else etcd may not keep it for the TTL: not pooled again
			return lease.Lease{}, s.heldError(key, kvOf(resp, 0))
		}
		if kaErr != nil {
			if errors.Is(kaErr, errLeaseGone) && !retried {
				// The etcd lease expired after the Txn but before the
				// keep-alive arrived, and took the generation with it. Once
				// more on a new one.
				if el, err = s.grant(ctx, ttl); err != nil {
					return lease.Lease{}, fail(ctx, "acquire", key, err)
				}
				continue
			}
			// The keep-alive sent beside the Txn failed: etcd may expire the
			// generation just created before its TTL. End it (best effort:
			// if the revoke fails too, it lingers until etcd expires it).
			s.revoke(el.id)
			return lease.Lease{}, failUnknown(ctx, "acquire", key, kaErr)
		}
		return s.granted(key, owner, id, ttl, el, resp.Header.Revision, exp)
	}
}

// granted finishes a successful acquisition at revision rev: the holder
// key's create and mod revision; exp is the expiry its value holds.
func (s *Store) granted(key, owner string, id lease.ID, ttl time.Duration, el *etcdLease, rev int64, exp time.Time) (lease.Lease, error) {
	tok, err := tokenOf(rev)
	if err != nil {
		s.revoke(el.id)
		return lease.Lease{}, err
	}
	s.hold(id, el, tok, rev)
	return lease.Lease{Key: key, Owner: owner, Token: tok, ID: id, TTL: ttl, Expires: exp}, nil
}

// heldError describes why a free-key comparison failed.
func (s *Store) heldError(key string, h *mvccpb.KeyValue) error {
	if h == nil {
		return fmt.Errorf("%w: etcdstore: %q has waiters queued", lease.ErrHeld, key)
	}
	l, err := leaseFrom(key, h, time.Now())
	if err != nil {
		return err
	}
	return &lease.HeldError{Key: key, Owner: l.Owner, Token: l.Token, Expires: l.Expires}
}

// Renew implements lease.Backend. With the TTL's etcd lease TTL unchanged it
// checks the generation (a read-only Txn), keeps its etcd lease alive and
// writes the holder key again, so that watchers see the renewal; with
// another it moves the generation's keys to an etcd lease of the new TTL,
// keeping the token (a key's create revision survives a Put).
func (s *Store) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateLease(l); err != nil {
		return lease.Lease{}, err
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	for attempt := 1; ; attempt++ {
		out, moved, err := s.renew(ctx, l, ttl)
		if !moved {
			return out, err
		}
		// A concurrent Renew moved the generation to another etcd lease
		// between our read and our write: read it again.
		if attempt == 3 || ctx.Err() != nil {
			return lease.Lease{}, fmt.Errorf("%w: etcdstore: renew %q: the lease kept moving between etcd leases under concurrent renewals", lease.ErrUnavailable, l.Key)
		}
	}
}

// stillOurs reports whether holder key kv is still generation l's.
func stillOurs(l lease.Lease, kv *mvccpb.KeyValue) bool {
	return kv != nil && kv.CreateRevision == int64(l.Token) && bytes.HasPrefix(kv.Value, []byte(l.ID.Reveal()+"\x00"))
}

// renew is one attempt of Renew; moved reports that the generation was
// moved to another etcd lease meanwhile and nothing was done.
func (s *Store) renew(ctx context.Context, l lease.Lease, ttl time.Duration) (_ lease.Lease, moved bool, _ error) {
	if err := s.usable(); err != nil {
		return lease.Lease{}, false, err
	}
	floor := s.maxRev.Load()
	hk := s.path(kindHolder, l.Key)
	resp, err := s.txn(ctx, &txnReq{key: l.Key, cmps: s.ownedCmps(l), then: []clientv3.Op{clientv3.OpGet(hk)}})
	if err != nil {
		return lease.Lease{}, false, fail(ctx, "renew", l.Key, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		return lease.Lease{}, false, err
	}
	if !resp.Succeeded {
		return lease.Lease{}, false, notHeld(l)
	}
	h := kvOf(resp, 0)
	in, err := decodeInfo(h)
	if err != nil {
		return lease.Lease{}, false, err
	}
	cur := clientv3.LeaseID(h.Lease)
	// Writes that name cur must find the generation still on it: otherwise
	// a concurrent Renew moved it off, and cur may be back in a pool or
	// carry another generation.
	onCur := append(s.ownedCmps(l), clientv3.Compare(clientv3.LeaseValue(hk), "=", int64(cur)))
	el := s.heldLease(l.ID, cur, in.EtcdTTL)
	out := l
	out.Owner, out.TTL = in.Owner, ttl

	if secs := etcdTTL(ttl); secs == in.EtcdTTL {
		if err := s.keepAlive(ctx, el); err == errLeaseGone {
			return lease.Lease{}, false, notHeld(l)
		} else if err != nil {
			return lease.Lease{}, false, fail(ctx, "renew", l.Key, err)
		}
		// The renewal is written, although the keep-alive alone renews the
		// etcd lease: the write is what a watch (watch.go) sees.
		exp := s.estimate(el)
		value := holderValue(l.ID, in.Owner, ttl, secs, exp)
		put := clientv3.OpPut(hk, value, clientv3.WithLease(cur))
		resp, err := s.txn(ctx, &txnReq{key: l.Key, cmps: onCur, then: []clientv3.Op{put}, els: []clientv3.Op{clientv3.OpGet(hk)}})
		if err != nil {
			return lease.Lease{}, false, failUnknown(ctx, "renew", l.Key, err)
		}
		if !resp.Succeeded {
			if stillOurs(l, kvOf(resp, 0)) {
				return lease.Lease{}, true, nil
			}
			return lease.Lease{}, false, notHeld(l)
		}
		s.hold(l.ID, el, l.Token, resp.Header.Revision) // the mod revision Release will compare
		out.Expires = exp
		return out, false, nil
	}

	nel, err := s.take(ctx, ttl)
	if err != nil {
		return lease.Lease{}, false, fail(ctx, "renew", l.Key, err)
	}
	exp := s.estimate(nel)
	value := holderValue(l.ID, in.Owner, ttl, nel.secs, exp)
	resp, err = s.txn(ctx, &txnReq{key: l.Key, cmps: onCur, then: []clientv3.Op{
		clientv3.OpPut(hk, value, clientv3.WithLease(nel.id)),
	}, els: []clientv3.Op{clientv3.OpGet(hk)}})
	if err != nil {
		s.revoke(nel.id) // revoking would end the generation if the move happened: the outcome is unknown either way
		return lease.Lease{}, false, failUnknown(ctx, "renew", l.Key, err)
	}
	if !resp.Succeeded {
		s.give(nel)
		if stillOurs(l, kvOf(resp, 0)) {
			return lease.Lease{}, true, nil
		}
		return lease.Lease{}, false, notHeld(l)
	}
	// The old etcd lease has no keys now.
	if old := s.unhold(l.ID, cur); old != nil {
		s.give(old)
	} else {
		s.revoke(cur)
	}
	s.hold(l.ID, nel, l.Token, resp.Header.Revision)
	out.Expires = exp
	return out, false, nil
}

func notHeld(l lease.Lease) error {
	return fmt.Errorf("%w: etcdstore: %q token %d is not the current lease", lease.ErrNotHeld, l.Key, l.Token)
}

// Release implements lease.Backend: one Txn that deletes the generation if
// it is l's, and writes its release mark (so that a watch tells it from an
// expiry). Its etcd lease, then keyless, goes back to the pool (or is
// revoked if this Store did not grant it).
//
// For a generation this Store granted or renewed, it knows the token and
// the revision of its last write (or read) of the holder key: a token other
// than the known one is refused without a round trip (an ID names one
// generation, whose token never changes), and the Txn compares the holder
// key's mod revision with that revision alone — one integer comparison
// instead of three, no read back. Every write of a key gets a new revision,
// so an equal mod revision means the key is exactly as this Store left it:
// the same generation (a new one is created at a later revision), on the
// same etcd lease, which is therefore still this Store's (a move to another,
// by Renew with another TTL, is a write). (Were it moved away and back by
// another Store, which revokes the etcd lease it moves off, the pooled etcd
// lease would be gone; the Acquire that finds it so, refused before
// anything is applied, retries once on a new one.) If the comparison fails
// — the lease is gone, or another Store wrote the key meanwhile — the
// generic comparisons decide.
func (s *Store) Release(ctx context.Context, l lease.Lease) error {
	if err := lease.ValidateLease(l); err != nil {
		return err
	}
	if err := s.usable(); err != nil {
		return err
	}
	h := s.path(kindHolder, l.Key)
	if tok, modRev, known := s.generation(l.ID); known {
		if tok != l.Token {
			return notHeld(l)
		}
		floor := s.maxRev.Load()
		resp, err := s.txn(ctx, &txnReq{key: l.Key, cmps: []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(h), "=", modRev)},
			then: []clientv3.Op{clientv3.OpDelete(h), s.releasedOp(l.Key)}})
		if err != nil {
			return failUnknown(ctx, "release", l.Key, err)
		}
		if err := s.observe(floor, resp.Header); err != nil {
			return err
		}
		if resp.Succeeded {
			if el := s.unheld(l.ID); el != nil {
				s.give(el)
			}
			return nil
		}
	}
	floor := s.maxRev.Load()
	resp, err := s.txn(ctx, &txnReq{key: l.Key, cmps: s.ownedCmps(l), then: []clientv3.Op{clientv3.OpDelete(h, clientv3.WithPrevKV()), s.releasedOp(l.Key)}})
	if err != nil {
		return failUnknown(ctx, "release", l.Key, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		return err
	}
	if !resp.Succeeded {
		return notHeld(l)
	}
	var cur clientv3.LeaseID
	if dr := resp.Responses[0].GetResponseDeleteRange(); dr != nil && len(dr.PrevKvs) == 1 {
		cur = clientv3.LeaseID(dr.PrevKvs[0].Lease)
	}
	if el := s.unhold(l.ID, cur); el != nil {
		s.give(el)
	} else {
		s.revoke(cur)
	}
	return nil
}

// Get implements lease.Backend with one linearizable read.
func (s *Store) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, err
	}
	if err := s.usable(); err != nil {
		return lease.Lease{}, err
	}
	floor := s.maxRev.Load()
	resp, err := s.cli.Get(ctx, s.path(kindHolder, key))
	if err != nil {
		return lease.Lease{}, fail(ctx, "get", key, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		return lease.Lease{}, err
	}
	if len(resp.Kvs) == 0 {
		return lease.Lease{}, fmt.Errorf("%w: etcdstore: %q", lease.ErrNotFound, key)
	}
	return leaseFrom(key, resp.Kvs[0], time.Now())
}

// List implements lease.Backend with one linearizable range read per page:
// the holder keys from just past the cursor's key to the end of the prefix,
// in etcd's byte order, limited to the page and one more. Holder keys exist
// only while their leases do, so the range reads nothing else.
func (s *Store) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, after, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	if err := s.usable(); err != nil {
		return lease.ListPage{}, err
	}
	from := s.path(kindHolder, prefix)
	if after >= prefix {
		from = s.path(kindHolder, after+"\x00") // the first key after it: keys hold no NUL
	}
	floor := s.maxRev.Load()
	resp, err := s.cli.Get(ctx, from,
		clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.path(kindHolder, prefix))),
		clientv3.WithLimit(int64(limit)+1))
	if err != nil {
		return lease.ListPage{}, fail(ctx, "list", prefix, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		return lease.ListPage{}, err
	}
	base := len(s.path(kindHolder, ""))
	now := time.Now()
	out := make([]lease.Lease, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs { // etcd sorts by key
		l, err := leaseFrom(string(kv.Key[base:]), kv, now)
		if err != nil {
			return lease.ListPage{}, err
		}
		out = append(out, l)
	}
	return lease.PageOf(out, limit), nil
}
