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

// freeCmps hold when key has no entries: no holder and nobody waiting.
func (s *Store) freeCmps(key string) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.entries(key)), "=", 0).WithPrefix()}
}

// ownedCmps hold when entry e is l's: it exists with l's token (its create
// revision) and ID. An entry that exists with the token of a lease handed
// out is the holder: the lease was handed out only once every older entry
// was gone, and entries created later are younger.
func ownedCmps(l lease.Lease, e string) []clientv3.Cmp {
	return append(idCmps(e, l.ID), clientv3.Compare(clientv3.CreateRevision(e), "=", int64(l.Token)))
}

// firstEntry reads the oldest of key's entries: its holder.
func (s *Store) firstEntry(key string) clientv3.Op {
	return clientv3.OpGet(s.entries(key), clientv3.WithFirstCreate()...)
}

// createOps create key's entry e (firstKey or entryKey) on el, its value
// being value (holderValue). Its create revision — this transaction's
// revision — is the token it holds with, now if key had no entries, else
// once the older ones are gone. hw reports that the ops also raise the
// high-water mark.
func (s *Store) createOps(e, value string, el *etcdLease, floor int64) (ops []clientv3.Op, hw bool) {
	ops = []clientv3.Op{clientv3.OpPut(e, value, clientv3.WithLease(el.id))}
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
func (s *Store) startAcquire(ctx context.Context, key, owner string, ttl time.Duration, tight, early bool) (*etcdLease, *refresh, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return nil, nil, err
	}
	if err := s.usable(); err != nil {
		return nil, nil, err
	}
	el, ref, err := s.takeEarly(ctx, ttl, tight, early)
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
	el, ref, err := s.startAcquire(ctx, key, owner, ttl, false, true)
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
		create, hw := s.createOps(s.firstKey(key), value, el, floor)
		resp, err := s.txn(ctx, &txnReq{key: key, hw: hw, cmps: append(s.freeCmps(key), s.idCmp()), then: create,
			els: []clientv3.Op{s.firstEntry(key), s.idGet()}})
		kaErr := ref.wait()
		ref = nil
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
			// Refused, so not applied: the pooled etcd lease is gone
			// (expired before its keep-alive, or revoked by another Store
			// that moved a generation off it). Once more on a new one.
			if el, err = s.grant(ctx, etcdTTL(ttl, false)); err != nil {
				return lease.Lease{}, fail(ctx, "acquire", key, err)
			}
			continue
		}
		if err != nil {
			if kaErr != nil {
				s.revokeSurely(el) // not vouched for, and may carry the generation
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
			if err := s.checkID(kvOf(resp, 1), fmt.Sprintf("granting %q", key)); err != nil {
				return lease.Lease{}, err // nothing written (wiped.go)
			}
			return lease.Lease{}, s.heldError(key, kvOf(resp, 0))
		}
		if kaErr != nil {
			if errors.Is(kaErr, errLeaseGone) && !retried {
				// The etcd lease expired after the Txn but before the
				// keep-alive arrived, and took the generation with it. Once
				// more on a new one.
				if el, err = s.grant(ctx, etcdTTL(ttl, false)); err != nil {
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
		return s.granted(key, s.firstKey(key), owner, id, ttl, el, resp.Header.Revision, resp.Header.Revision, exp)
	}
}

// granted finishes a successful acquisition whose entry e, on el, was
// created at revision rev (the token) and last written at modRev; exp is
// the expiry its value holds.
func (s *Store) granted(key, e, owner string, id lease.ID, ttl time.Duration, el *etcdLease, rev, modRev int64, exp time.Time) (lease.Lease, error) {
	tok, err := tokenOf(rev)
	if err != nil {
		s.revoke(el.id)
		return lease.Lease{}, err
	}
	s.hold(id, el, tok, e, modRev)
	return lease.Lease{Key: key, Owner: owner, Token: tok, ID: id, TTL: ttl, Expires: exp}, nil
}

// heldError describes why a free-key comparison failed; h is key's oldest
// entry, its holder.
func (s *Store) heldError(key string, h *mvccpb.KeyValue) error {
	if h == nil { // gone between the comparison and the read: cannot happen within one Txn
		return fmt.Errorf("%w: etcdstore: %q is held", lease.ErrHeld, key)
	}
	l, err := leaseFrom(key, h, time.Now())
	if err != nil {
		return err
	}
	return &lease.HeldError{Key: key, Owner: l.Owner, Token: l.Token, Expires: l.Expires}
}

// Renew implements lease.Backend. With the TTL's etcd lease TTL unchanged it
// checks the generation (a read-only Txn), keeps its etcd lease alive and
// writes its entry again, so that watchers see the renewal; with another it
// moves the entry to an etcd lease of the new TTL, keeping the token (a
// key's create revision survives a Put).
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

// stillOurs reports whether entry kv is still generation l's.
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
	// The holder is key's oldest entry: read it (a read-only Txn, not a
	// Raft write) and check it is l's.
	resp, err := s.txn(ctx, &txnReq{key: l.Key, then: []clientv3.Op{s.firstEntry(l.Key)}})
	if err != nil {
		return lease.Lease{}, false, fail(ctx, "renew", l.Key, err)
	}
	if err := s.observe(floor, resp.Header); err != nil {
		return lease.Lease{}, false, err
	}
	h := kvOf(resp, 0)
	if !stillOurs(l, h) {
		return lease.Lease{}, false, notHeld(l)
	}
	hk := string(h.Key)
	in, err := decodeInfo(h)
	if err != nil {
		return lease.Lease{}, false, err
	}
	cur := clientv3.LeaseID(h.Lease)
	// Writes that name cur must find the generation still on it: otherwise
	// a concurrent Renew moved it off, and cur may be back in a pool or
	// carry another generation.
	onCur := append(ownedCmps(l, hk), clientv3.Compare(clientv3.LeaseValue(hk), "=", int64(cur)))
	el := s.heldLease(l.ID, cur, in.EtcdTTL)
	out := l
	out.Owner, out.TTL = in.Owner, ttl

	// A generation keeps its etcd lease while that fits the TTL, tight or
	// not (etcdTTL), and is moved to a new one of its kind otherwise.
	tight := in.EtcdTTL == etcdTTL(time.Duration(in.TTLms)*time.Millisecond, true)
	if secs := in.EtcdTTL; secs == etcdTTL(ttl, tight) {
		if err := s.keepAlive(ctx, el); err == errLeaseGone {
			// Expired with the entry, or revoked by a concurrent Renew
			// that moved the entry off it: read again to tell which.
			again, err := s.cli.Get(ctx, hk)
			if err != nil {
				return lease.Lease{}, false, fail(ctx, "renew", l.Key, err)
			}
			if len(again.Kvs) == 1 && stillOurs(l, again.Kvs[0]) && clientv3.LeaseID(again.Kvs[0].Lease) != cur {
				return lease.Lease{}, true, nil
			}
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
		s.hold(l.ID, el, l.Token, hk, resp.Header.Revision) // the mod revision Release will compare
		out.Expires = exp
		return out, false, nil
	}

	nel, err := s.take(ctx, ttl, tight)
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
	// The old etcd lease has no keys now, but its ID names the entry
	// (entryKey): revoked, never pooled, so that no new entry of the key
	// can take the name while this one has it.
	s.unhold(l.ID, cur)
	s.revoke(cur)
	s.hold(l.ID, nel, l.Token, hk, resp.Header.Revision)
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
// the revision of its last write (or read) of the entry: a token other
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
	if tok, h, modRev, known := s.generation(l.ID); known {
		if k, _ := s.leaseKeyOf([]byte(h)); tok != l.Token || k != l.Key {
			return notHeld(l) // an ID names one generation, of one key, whose token never changes
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
	// A lease this Store did not grant or renew (or one written since by
	// another Store): read the holder's entry to learn its name, then
	// delete it if it is still l's.
	floor := s.maxRev.Load()
	first, err := s.cli.Get(ctx, s.entries(l.Key), clientv3.WithFirstCreate()...)
	if err != nil {
		return fail(ctx, "release", l.Key, err)
	}
	if err := s.observe(floor, first.Header); err != nil {
		return err
	}
	if len(first.Kvs) == 0 || !stillOurs(l, first.Kvs[0]) {
		return notHeld(l)
	}
	h := string(first.Kvs[0].Key)
	floor = s.maxRev.Load()
	resp, err := s.txn(ctx, &txnReq{key: l.Key, cmps: ownedCmps(l, h), then: []clientv3.Op{clientv3.OpDelete(h, clientv3.WithPrevKV()), s.releasedOp(l.Key)}})
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
	resp, err := s.cli.Get(ctx, s.entries(key), clientv3.WithFirstCreate()...)
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

// List implements lease.Backend with linearizable range reads at one
// revision: the entries from just past the cursor's key to the end of the
// prefix, in etcd's byte order, grouped by lease key, each key's holder
// being its oldest entry. A key's entries are contiguous; a read that ends
// inside a key's entries is followed by one from that key's first entry
// (with room for twice as many entries if it was the only key read).
// Without waiters that is one read of the page and one more entry.
func (s *Store) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, after, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	if err := s.usable(); err != nil {
		return lease.ListPage{}, err
	}
	from := s.path(kindEntry, prefix)
	if after >= prefix {
		// Past every entry of after (after, NUL, name): keys hold no
		// control characters, so every later key sorts above this.
		from = s.path(kindEntry, after) + "\x01"
	}
	end := clientv3.GetPrefixRangeEnd(s.path(kindEntry, prefix))
	floor := s.maxRev.Load()
	var rev int64
	n := int64(limit) + 1
	now := time.Now()
	out := make([]lease.Lease, 0, min(limit+1, 1024))
	for len(out) <= limit {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(n)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, from, opts...)
		if err != nil {
			return lease.ListPage{}, fail(ctx, "list", prefix, err)
		}
		if rev == 0 {
			if err := s.observe(floor, resp.Header); err != nil {
				return lease.ListPage{}, err
			}
			rev = resp.Header.Revision
		}
		kvs := resp.Kvs // etcd sorts by key: each lease key's entries together
		if resp.More {
			// The last key's entries may go on past the read: leave it
			// for the next.
			last, _ := s.leaseKeyOf(kvs[len(kvs)-1].Key)
			for len(kvs) > 0 {
				if k, _ := s.leaseKeyOf(kvs[len(kvs)-1].Key); k != last {
					break
				}
				kvs = kvs[:len(kvs)-1]
			}
			if len(kvs) == 0 { // one key's entries filled the read
				n *= 2
				continue
			}
		}
		for i := 0; i < len(kvs); {
			k, ok := s.leaseKeyOf(kvs[i].Key)
			if !ok {
				return lease.ListPage{}, fmt.Errorf("%w: etcdstore: unexpected key %q in the entries", lease.ErrUnavailable, kvs[i].Key)
			}
			first := kvs[i]
			for i++; i < len(kvs); i++ {
				if k2, _ := s.leaseKeyOf(kvs[i].Key); k2 != k {
					break
				}
				if kvs[i].CreateRevision < first.CreateRevision {
					first = kvs[i]
				}
			}
			l, err := leaseFrom(k, first, now)
			if err != nil {
				return lease.ListPage{}, err
			}
			out = append(out, l)
		}
		if !resp.More {
			break
		}
		last, _ := s.leaseKeyOf(kvs[len(kvs)-1].Key)
		from = s.path(kindEntry, last) + "\x01"
	}
	return lease.PageOf(out, limit), nil
}
