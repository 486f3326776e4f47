package leasetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// renewBatch checks lease.BatchRenewer: each renewal as Renew would make
// it, answered in order, one that is no longer held refused alone, and a
// malformed batch refused whole with nothing renewed.
// heldTTL is the TTL of the leases a batch renews (to longTTL) or must
// leave as they were: other than longTTL, so that a renewal shows, and
// long enough that none expires before the checks read it however slow
// the way to the backend. Four times the expiry TTL (200 ms) ran out
// through leasehttp under -race on a loaded host between the first
// acquire and the batch, and the check blamed the batch.
const heldTTL = longTTL / 2

func (s *suite) renewBatch(t *testing.T) {
	t.Run("EachAsRenew", func(t *testing.T) {
		b := s.newBackend(t)
		br := b.(lease.BatchRenewer)
		ttl := heldTTL
		var held []lease.Lease
		for _, name := range []string{"a", "b", "c"} {
			held = append(held, mustAcquire(t, b, key(t, name), "worker-"+name, ttl))
		}
		// A superseded lease: released, and its key held by another since.
		gone := mustAcquire(t, b, key(t, "superseded"), "worker-r", ttl)
		if err := b.Release(ctxFor(t), gone); err != nil {
			t.Fatal(err)
		}
		successor := mustAcquire(t, b, gone.Key, "worker-s", ttl)
		// A lease named by its token without its secret (I4).
		other := mustAcquire(t, b, key(t, "forged"), "worker-f", ttl)
		forged := other
		forged.ID = lease.NewID()
		refused := map[lease.ID]lease.Lease{gone.ID: successor, forged.ID: other} // → what must stay as it was
		renewals := []lease.Renewal{
			{Lease: held[2], TTL: longTTL},
			{Lease: gone, TTL: longTTL},
			{Lease: held[0], TTL: longTTL},
			{Lease: forged, TTL: longTTL},
			{Lease: held[1], TTL: longTTL},
		}
		before := time.Now()
		res, err := br.RenewBatch(ctxFor(t), renewals)
		after := time.Now()
		if err != nil {
			t.Fatalf("RenewBatch: %v", err)
		}
		if len(res) != len(renewals) {
			t.Fatalf("RenewBatch answered %d renewals of %d", len(res), len(renewals))
		}
		for i, r := range renewals {
			got := res[i]
			if stays, ok := refused[r.Lease.ID]; ok {
				if !errIs(got.Err, lease.ErrNotHeld) {
					t.Errorf("renewal %d, of a lease superseded or without its ID: %+v, %v; want ErrNotHeld", i, got.Lease, got.Err)
				}
				if g, err := b.Get(ctxFor(t), stays.Key); err != nil || g.Token != stays.Token || g.TTL != ttl {
					t.Errorf("a refused renewal changed %s: Get = %+v, %v; want token %d with TTL %v", stays.Key, g, err, stays.Token, ttl)
				}
				continue
			}
			if got.Err != nil {
				t.Errorf("renewal %d, of %s: %v", i, r.Lease.Key, got.Err)
				continue
			}
			l := got.Lease
			if l.Key != r.Lease.Key || l.Token != r.Lease.Token || l.ID != r.Lease.ID || l.Owner != r.Lease.Owner || l.TTL != longTTL {
				t.Errorf("renewal %d answered %+v for %+v renewed to %v (out of order, or not as Renew, I2)", i, l, r.Lease, longTTL)
			}
			s.checkExpires(t, "RenewBatch", l.Expires, longTTL, before, after)
			if g, err := b.Get(ctxFor(t), l.Key); err != nil || g.TTL != longTTL || g.Token != l.Token {
				t.Errorf("Get(%s) after RenewBatch: %+v, %v; want the renewal, TTL %v", l.Key, g, err, longTTL)
			}
		}
	})
	t.Run("FullMixedBatch", func(t *testing.T) {
		// A batch of MaxRenewBatch: leases held, one named twice, one
		// expired, one released, one superseded beside its successor, one
		// on a key never acquired. Each is answered as Renew would answer
		// it alone, and none fails another.
		b := s.newBackend(t)
		br := b.(lease.BatchRenewer)
		ttl := s.cfg.expiryTTL
		expired := mustAcquire(t, b, key(t, "expired"), "worker-e", ttl)
		released := mustAcquire(t, b, key(t, "released"), "worker-r", heldTTL)
		if err := b.Release(ctxFor(t), released); err != nil {
			t.Fatal(err)
		}
		gone := mustAcquire(t, b, key(t, "stolen"), "worker-g", heldTTL)
		if err := b.Release(ctxFor(t), gone); err != nil {
			t.Fatal(err)
		}
		successor := mustAcquire(t, b, gone.Key, "worker-s", heldTTL)
		unknown := lease.Lease{Key: key(t, "never"), Owner: "nobody", Token: 1, ID: lease.NewID(), TTL: heldTTL}
		s.waitExpired(t, b, expired.Key, ttl)
		twice := mustAcquire(t, b, key(t, "twice"), "worker-t", heldTTL)
		refused := map[lease.ID]bool{expired.ID: true, released.ID: true, gone.ID: true, unknown.ID: true}
		renewals := []lease.Renewal{
			{Lease: twice, TTL: longTTL},
			{Lease: expired, TTL: longTTL},
			{Lease: released, TTL: longTTL},
			{Lease: gone, TTL: longTTL},
			{Lease: successor, TTL: longTTL},
			{Lease: unknown, TTL: longTTL},
			{Lease: twice, TTL: longTTL},
		}
		for i := 0; len(renewals) < lease.MaxRenewBatch; i++ {
			renewals = append(renewals, lease.Renewal{Lease: mustAcquire(t, b, key(t, fmt.Sprintf("held/%d", i)), "worker-h", heldTTL), TTL: longTTL})
		}
		before := time.Now()
		res, err := br.RenewBatch(ctxFor(t), renewals)
		after := time.Now()
		if err != nil {
			t.Fatalf("RenewBatch of %d: %v", len(renewals), err)
		}
		if len(res) != len(renewals) {
			t.Fatalf("RenewBatch answered %d renewals of %d", len(res), len(renewals))
		}
		for i, r := range renewals {
			got := res[i]
			if refused[r.Lease.ID] {
				if !errIs(got.Err, lease.ErrNotHeld) {
					t.Errorf("renewal %d, of %s (expired, released, superseded or never held): %+v, %v; want ErrNotHeld", i, r.Lease.Key, got.Lease, got.Err)
				}
				continue
			}
			if got.Err != nil {
				t.Errorf("renewal %d, of %s: %v", i, r.Lease.Key, got.Err)
				continue
			}
			l := got.Lease
			if l.Key != r.Lease.Key || l.Token != r.Lease.Token || l.ID != r.Lease.ID || l.TTL != longTTL {
				t.Errorf("renewal %d answered %+v for %+v renewed to %v", i, l, r.Lease, longTTL)
			}
			s.checkExpires(t, "RenewBatch", l.Expires, longTTL, before, after)
		}
		for _, k := range []string{expired.Key, released.Key, unknown.Key} {
			if g, err := b.Get(ctxFor(t), k); !errIs(err, lease.ErrNotFound) {
				t.Errorf("a refused renewal brought %s back: Get = %+v, %v", k, g, err)
			}
		}
		if g, err := b.Get(ctxFor(t), successor.Key); err != nil || g.Token != successor.Token || g.TTL != longTTL {
			t.Errorf("the successor beside its superseded lease: Get = %+v, %v; want token %d renewed to %v", g, err, successor.Token, longTTL)
		}
	})
	t.Run("MalformedRefusedWhole", func(t *testing.T) {
		b := s.newBackend(t)
		br := b.(lease.BatchRenewer)
		ttl := heldTTL
		l := mustAcquire(t, b, key(t, "k"), "worker", ttl)
		bad := l
		bad.ID = lease.ID{}
		tooMany := make([]lease.Renewal, lease.MaxRenewBatch+1)
		for i := range tooMany {
			tooMany[i] = lease.Renewal{Lease: l, TTL: longTTL}
		}
		for name, batch := range map[string][]lease.Renewal{
			"empty":    nil,
			"too many": tooMany,
			"zero ID":  {{Lease: l, TTL: longTTL}, {Lease: bad, TTL: longTTL}},
			"bad TTL":  {{Lease: l, TTL: longTTL}, {Lease: l, TTL: time.Nanosecond}},
			"bad key":  {{Lease: l, TTL: longTTL}, {Lease: lease.Lease{Key: "", Token: l.Token, ID: l.ID}, TTL: longTTL}},
		} {
			if res, err := br.RenewBatch(ctxFor(t), batch); !errIs(err, lease.ErrInvalid) || res != nil {
				t.Errorf("RenewBatch of a batch with %s: %v, %v; want nothing and ErrInvalid", name, res, err)
			}
		}
		if g, err := b.Get(ctxFor(t), l.Key); err != nil || g.TTL != ttl {
			t.Errorf("a refused batch renewed its well-formed lease: Get = %+v, %v; want TTL %v", g, err, ttl)
		}
	})
}
