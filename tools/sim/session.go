package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehq/lease"
)

// The Session workload's accounts: each is a key, and a register of the
// same name.
const sessionAccounts = 4

func accountKey(i int) string { return fmt.Sprintf("acct/%d", i) }

// sessionWorker is the Session workload's application: a transfer between
// two or three accounts. It opens a lease.Session, acquires the accounts
// into it in key order (so that no two workers wait for each other in a
// cycle), one step apart, and then for a few steps, while the session's Err
// is nil, writes to every account's register with that account's token;
// then it closes the session.
//
// Checked: SessionWhole (G1) each time the worker finds the session's Err
// nil and acts on all of it; GuardOrder at each account's register; and,
// as every workload, TokenOrder at the backend. Half the clients' backends
// (seeded) renew through RenewBatch, one message for each batch the
// Client's scheduler sends, so a batch is delayed or lost whole.
func (s *Sim) sessionWorker(c *simClient) {
	defer close(c.done)
	who := c.name()
	for {
		if !s.waitStep(c) {
			return
		}
		n := 2 + c.rng.IntN(2)
		idx := c.rng.Perm(sessionAccounts)[:n]
		slices.Sort(idx)
		sess := c.client.NewSession()
		holds, ok := s.joinSession(c, sess, idx)
		if ok {
			s.mu.Lock()
			s.stats.Sessions++
			s.asideLocked(c.idx, workerLane, "%s holds %s in one session", who, describeHolds(holds))
			s.mu.Unlock()
			for range 1 + c.rng.IntN(3) {
				if !s.waitStep(c) {
					break
				}
				if s.sessionErr(sess, holds) != nil {
					break // the group is over: stop the transfer
				}
				s.checkWhole(who, holds)
				// The pause that matters falls here, between the check and
				// the writes landing, as for a lock.
				for _, h := range holds {
					s.writeAs(c, h.Key(), who, h.Token())
				}
			}
		}
		_ = sess.Close(context.WithoutCancel(c.ctx))
		if s.cfg.LooseSession {
			releaseAll(c, holds)
		}
	}
}

// releaseAll releases the LooseSession control's holds, which the
// session's Close does not know.
func releaseAll(c *simClient, holds []*lease.Hold) {
	for _, h := range holds {
		_ = h.Release(context.WithoutCancel(c.ctx))
	}
}

// joinSession acquires the accounts idx into sess, one step apart, with
// Acquire or (seeded) TryAcquire; false if one fails or the worker ends,
// with the holds it took.
func (s *Sim) joinSession(c *simClient, sess *lease.Session, idx []int) ([]*lease.Hold, bool) {
	var holds []*lease.Hold
	for i, a := range idx {
		if i > 0 && !s.waitStep(c) {
			return holds, false
		}
		var (
			h   *lease.Hold
			err error
		)
		// With LooseSession the holds are the Client's own, not tied to
		// each other; Close below then releases none of them.
		acquire, try := sess.Acquire, sess.TryAcquire
		if s.cfg.LooseSession {
			acquire, try = c.client.Acquire, c.client.TryAcquire
		}
		if c.rng.IntN(3) == 0 {
			h, err = try(c.ctx, accountKey(a), s.cfg.TTL)
		} else {
			h, err = acquire(c.ctx, accountKey(a), s.cfg.TTL)
		}
		if err != nil {
			return holds, false
		}
		s.mu.Lock()
		s.stats.Acquired++
		s.mu.Unlock()
		holds = append(holds, h)
	}
	return holds, true
}

// sessionErr is what the worker asks before it acts on the group: the
// session's Err, or, with Config.LooseSession (holds not in the session),
// the Err of the hold it acquired last alone.
func (s *Sim) sessionErr(sess *lease.Session, holds []*lease.Hold) error {
	if s.cfg.LooseSession {
		return holds[len(holds)-1].Err()
	}
	return sess.Err()
}

// checkWhole: the worker is about to act on every hold of its session, so
// each must be the backend's current lease on its key at this instant
// (SessionWhole).
func (s *Sim) checkWhole(who string, holds []*lease.Hold) {
	for _, h := range holds {
		l, err := s.store.Get(context.Background(), h.Key())
		switch {
		case err != nil:
			s.violate(SessionWhole, "%s acts on its session of %s, but the backend holds no lease on %s (token %d lost)",
				who, describeHolds(holds), h.Key(), h.Token())
			return
		case l.Token != h.Token():
			s.violate(SessionWhole, "%s acts on its session of %s, but the backend's current lease on %s is token %d (%s)",
				who, describeHolds(holds), h.Key(), l.Token, l.Owner)
			return
		}
	}
}

func describeHolds(holds []*lease.Hold) string {
	parts := make([]string, len(holds))
	for i, h := range holds {
		parts[i] = fmt.Sprintf("%s token %d", h.Key(), h.Token())
	}
	return strings.Join(parts, ", ")
}

// batchBackend is a client's view of the backend that also offers
// lease.BatchRenewer: a batch is one message, applied whole on delivery
// (each renewal standing alone, as memstore.Renew answers it) or lost whole.
type batchBackend struct{ *simBackend }

var _ lease.BatchRenewer = batchBackend{}

func (b batchBackend) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	parts := make([]string, len(renewals))
	for i, r := range renewals {
		parts[i] = fmt.Sprintf("%stoken %d", keyDesc(r.Lease.Key), r.Lease.Token)
	}
	v, err := b.send(ctx, "renew batch ["+strings.Join(parts, ", ")+"]", func() (any, error) {
		out := make([]lease.RenewResult, len(renewals))
		for i, r := range renewals {
			l, err := b.s.store.Renew(context.Background(), r.Lease, r.TTL)
			if err == nil {
				b.s.renewed(l)
			}
			out[i] = lease.RenewResult{Lease: l, Err: err}
		}
		b.s.mu.Lock()
		b.s.stats.Batches++
		b.s.mu.Unlock()
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]lease.RenewResult), nil
}

// batchWatchBackend is watchBackend with batchBackend's RenewBatch.
type batchWatchBackend struct{ watchBackend }

func (b batchWatchBackend) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	return batchBackend{b.simBackend}.RenewBatch(ctx, renewals)
}
