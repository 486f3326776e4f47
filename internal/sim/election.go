package sim

import (
	"context"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
)

// electionKey is the key the Election workload's workers campaign on; the
// register their leaders write is named the same.
const electionKey = "leader"

// electionWorker is the Election workload's application: campaign, and
// while the term holds, write to the election's register with the term's
// token, one write per step, resigning now and then (a term also ends by a
// pause past its TTL, or a crash). Beside it runs an observer.
//
// Checked: HeldIsCurrent each time the worker finds its term's Err nil
// (E1: it then acts as leader, so no two workers act as leader at once);
// GuardOrder at the register (E2: once the register has accepted a write of
// a term, it accepts no write of an older term, so two leaders' accepted
// writes never interleave); ObservedOrder in the observer (E3).
func (s *Sim) electionWorker(c *simClient) {
	defer close(c.done)
	observed := make(chan struct{})
	go s.observer(c, observed)
	defer func() { <-observed }()
	e, err := election.New(s.backend(c, workerLane), s.cfg.TTL, c.opts...)
	if err != nil {
		panic(err) // valid by construction, as for the Client
	}
	who := c.name()
	for {
		if !s.waitStep(c) {
			return
		}
		term, err := e.Campaign(c.ctx, electionKey, who)
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.stats.Terms++
		s.asideLocked(c.idx, workerLane, "%s leads, token %d", who, term.Token())
		s.mu.Unlock()
		for {
			if !s.waitStep(c) {
				break
			}
			if !s.cfg.IgnoreDeadline {
				if term.Err() != nil {
					break // the term is over: stop acting as leader
				}
				s.checkCurrent(who+" as leader", term.Hold)
			}
			// As with a lock, the pause that matters falls here.
			s.writeAs(c, electionKey, who, term.Token())
			if c.rng.IntN(4) == 0 {
				break
			}
		}
		_ = term.Resign(context.WithoutCancel(c.ctx))
	}
}

// observer follows the election as another part of c's process would,
// with Elector.Observe, and checks each leader it reports (ObservedOrder).
// When Observe ends with an error (a lost read, a broken watch) it observes
// again a moment later, still holding the reports to the same order: a new
// Observe starts from the leader of its moment, never an older one.
func (s *Sim) observer(c *simClient, done chan<- struct{}) {
	defer close(done)
	e, err := election.New(s.backend(c, observerLane), s.cfg.TTL, c.opts...)
	if err != nil {
		panic(err)
	}
	var last lease.Token // the last non-zero token reported
	for c.ctx.Err() == nil {
		for l, err := range e.Observe(c.ctx, electionKey) {
			if err != nil {
				break
			}
			s.observed(c, l, &last)
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
		}
	}
}

func (s *Sim) observed(c *simClient, l election.Leader, last *lease.Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Observed++
	who := c.name()
	if l.Token == 0 {
		s.asideLocked(c.idx, observerLane, "%s observes no leader", who)
		return
	}
	s.asideLocked(c.idx, observerLane, "%s observes %s, token %d", who, l.Value, l.Token)
	g := s.grants[generation{electionKey, l.Token}]
	switch {
	case l.Token < *last:
		s.violateLocked(ObservedOrder, "%s observed leader token %d after token %d", who, l.Token, *last)
	case g == nil:
		s.violateLocked(ObservedOrder, "%s observed leader token %d, which the backend never granted", who, l.Token)
	case g.owner != l.Value:
		s.violateLocked(ObservedOrder, "%s observed leader token %d as %q, but it was granted to %q", who, l.Token, l.Value, g.owner)
	}
	*last = l.Token
}
