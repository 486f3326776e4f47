package boltstore

import (
	"bytes"
	"context"
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// Acquire implements lease.Backend. A key found held is answered from a
// read of the store's state: a failed try writes nothing and causes no
// fsync. A free key is granted by the commit loop, and the lease returned
// only once the log record of its token is fsynced.
//
// The holder and token a "held" answer names may be of a batch whose log
// record is not yet durable; a crash could then issue that token again to
// someone else, after this caller was told of it (I1). So that answer waits
// for the batches the read saw to be durable, as Get and List do; when none
// is in flight, which is when no write is waiting for an fsync, it waits
// for nothing. A key the read finds free goes on to the commit loop, which
// decides afresh.
func (s *Store) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	if s.noLog && s.committing() {
		// The commit loop is committing the transaction the read would
		// wait for: go to the loop, which decides afresh, so as to be in
		// its next batch, as a caller of the logged store would be.
		return s.acquireInLoop(ctx, key, owner, ttl)
	}
	var held error
	pending, err := s.read(ctx, func(leases *bolt.Bucket) error {
		rec, ok, err := getLease(leases, key)
		if err == nil && ok && rec.live(s.now()) {
			held = rec.heldError(key)
		}
		return err
	})
	if err != nil {
		return lease.Lease{}, err
	}
	if held != nil {
		if err := s.waitDurable(ctx, pending); err != nil {
			return lease.Lease{}, err
		}
		return lease.Lease{}, held
	}
	return s.acquireInLoop(ctx, key, owner, ttl)
}

func (s *Store) acquireInLoop(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	o := &op{kind: opAcquire, key: key, owner: owner, ttl: ttl}
	if err := s.submit(ctx, o); err != nil {
		return lease.Lease{}, err
	}
	return o.res, o.err
}

// committing reports whether someone holds txMu (noLog: the commit loop
// committing). A hint only.
func (s *Store) committing() bool {
	if s.txMu.TryLock() {
		s.txMu.Unlock()
		return false
	}
	return true
}

// AcquireWait implements lease.WaitAcquirer: waiters queue in this process in
// arrival order and are handed the key, inside the commit that frees it, on
// release or at expiry.
func (s *Store) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	w := &waiter{owner: owner, ttl: ttl, ch: make(chan result, 1)}
	o := &op{kind: opAcquireWait, ctx: ctx, key: key, owner: owner, ttl: ttl, w: w}
	if err := s.submit(ctx, o); err != nil {
		return lease.Lease{}, err
	}
	if !o.queued {
		return o.res, o.err
	}
	select {
	case r := <-w.ch:
		return r.l, r.err
	case <-ctx.Done():
	}
	s.wmu.Lock()
	left := s.dequeue(key, w)
	s.wmu.Unlock()
	if !left {
		// Handed the key (or failed) as ctx ended: give a grant back so the
		// next waiter gets it.
		if r := <-w.ch; r.err == nil {
			_ = s.Release(context.Background(), r.l)
		}
	}
	return lease.Lease{}, context.Cause(ctx)
}

// Renew implements lease.Backend.
func (s *Store) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := lease.ValidateLease(l); err != nil {
		return lease.Lease{}, err
	}
	if err := lease.ValidateTTL(ttl); err != nil {
		return lease.Lease{}, err
	}
	o := &op{kind: opRenew, l: l, ttl: ttl}
	if err := s.submit(ctx, o); err != nil {
		return lease.Lease{}, err
	}
	return o.res, o.err
}

// RenewBatch implements lease.BatchRenewer: the renewals are applied one
// by one, in the order of their keys (a key's own in their order), in one
// batch of the commit loop, and made durable by one log record and one
// fdatasync, however many there are; each is answered at its own index.
func (s *Store) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	o := &op{kind: opRenewBatch, renewals: renewals, results: make([]lease.RenewResult, len(renewals))}
	if err := s.submit(ctx, o); err != nil {
		return nil, err
	}
	if o.err != nil {
		return nil, o.err // the batch failed as a whole
	}
	for _, r := range o.results {
		if r.Err != nil && !errors.Is(r.Err, lease.ErrNotHeld) {
			return nil, r.Err // the store failed while applying it
		}
	}
	return o.results, nil
}

// Release implements lease.Backend. The key's token high-water mark stays.
//
// A release is answered once the commit loop has applied it, before its log
// record is durable (see answerReleases): from then on this Store reads the
// lease as gone (Get and List also wait for the record), and a crash before
// the record is durable only leaves the lease held until its TTL, as a
// holder that never released would.
func (s *Store) Release(ctx context.Context, l lease.Lease) error {
	if err := lease.ValidateLease(l); err != nil {
		return err
	}
	o := &op{kind: opRelease, l: l}
	if err := s.submit(ctx, o); err != nil {
		return err
	}
	return o.err
}

// Get implements lease.Backend.
func (s *Store) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Lease{}, err
	}
	var l lease.Lease
	err := s.view(ctx, func(leases *bolt.Bucket) error {
		rec, ok, err := getLease(leases, key)
		if err != nil {
			return err
		}
		if !ok || !rec.live(s.now()) {
			return lease.ErrNotFound
		}
		l = rec.lease(key)
		l.ID = lease.ID{}
		return nil
	})
	return l, err
}

// List implements lease.Backend: a cursor seeks to the later of the prefix
// and the key after the page's cursor, and reads on in key order (bbolt
// keeps keys in byte order) until it has the page and one lease more. The
// leases bucket keeps a record for every key ever held, so a walk over many
// expired keys reads them too.
func (s *Store) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	limit, after, err := lease.ParseList(prefix, page)
	if err != nil {
		return lease.ListPage{}, err
	}
	var out []lease.Lease
	err = s.view(ctx, func(leases *bolt.Bucket) error {
		now := s.now()
		p := []byte(prefix)
		c := leases.Cursor()
		k, v := c.Seek([]byte(max(prefix, after)))
		if after != "" && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, p) && len(out) <= limit; k, v = c.Next() {
			rec, err := decodeRecord(string(k), v)
			if err != nil {
				return err
			}
			if rec.live(now) {
				l := rec.lease(string(k))
				l.ID = lease.ID{}
				out = append(out, l)
			}
		}
		return nil
	})
	if err != nil {
		return lease.ListPage{}, err
	}
	return lease.PageOf(out, limit), nil
}
