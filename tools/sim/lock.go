package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehq/lease"
)

// worker is the Lock workload's application: acquire, then write (and
// sometimes read) a few times while it believes it holds the lease, then
// release.
func (s *Sim) worker(c *simClient) {
	defer close(c.done)
	name := fmt.Sprintf("c%d", c.idx)
	for {
		if !s.waitStep(c) {
			return
		}
		h, err := c.client.Acquire(c.ctx, lockKey, s.cfg.TTL)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.stats.Acquired++
		s.mu.Unlock()
		for range 3 {
			if !s.waitStep(c) {
				break
			}
			if h.Err() != nil {
				break // the client told us: stop
			}
			s.checkHeld(name, h)
			// The pause that matters falls here: after the check, before the write lands.
			s.writeAs(c, lockKey, name, h.Token())
		}
		_ = h.Release(context.WithoutCancel(c.ctx))
	}
}

// checkHeld: the client says it holds h, so the backend's expiry for h's
// token must not have passed (HeldInTime, I5).
func (s *Sim) checkHeld(name string, h *lease.Hold) {
	s.mu.Lock()
	var exp time.Time
	if g := s.grants[generation{h.Key(), h.Token()}]; g != nil {
		exp = g.expires
	}
	s.mu.Unlock()
	if now := time.Now(); !now.Before(exp) {
		s.violate(HeldInTime, "%s's client reports token %d held at %v, but the backend expired it at %v",
			name, h.Token(), now.Sub(s.start), exp.Sub(s.start))
	}
}

// checkCurrent: the client says it holds h, and its worker is about to act
// on it, so the backend's current lease on h's key must be h's generation
// (HeldIsCurrent). what names the worker's role for the report.
func (s *Sim) checkCurrent(what string, h *lease.Hold) {
	l, err := s.store.Get(context.Background(), h.Key())
	switch {
	case err != nil:
		s.violate(HeldIsCurrent, "%s acts on %s token %d at %v, but the backend holds no lease there",
			what, h.Key(), h.Token(), time.Since(s.start))
	case l.Token != h.Token():
		s.violate(HeldIsCurrent, "%s acts on %s token %d at %v, but the backend's current lease there is token %d (%s)",
			what, h.Key(), h.Token(), time.Since(s.start), l.Token, l.Owner)
	}
}
