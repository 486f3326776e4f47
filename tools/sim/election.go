package sim

import (
	"context"
	"iter"
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
	e, err := election.New(c.client, s.cfg.TTL)
	if err != nil {
		panic(err) // valid by construction, as for the Client
	}
	who := c.name()
	if s.cfg.Runner {
		s.runnerWorker(c, e)
		return
	}
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

// runnerWorker is the Election worker of Config.Runner: it leads through
// election.Run in stints, writing to the register with the term's token
// one step at a time while the term's Err is nil (checked as the
// electionWorker's leader is), giving a term up now and then (Run
// campaigns again), and ending the stint now and then by cancelling Run's
// context while the process lives on. Half the clients (by seed) keep the
// term then (KeepTermOnCancel), and the backend must renew it at most once
// more (KeptTermEnds).
func (s *Sim) runnerWorker(c *simClient, e *election.Elector) {
	who := c.name()
	keep := c.rng.IntN(2) == 0
	var opts []election.RunOption
	if keep {
		opts = append(opts, election.KeepTermOnCancel())
	}
	for {
		if !s.waitStep(c) {
			return
		}
		stint, stop := context.WithCancel(c.ctx)
		var kept *election.Term // the term leading when the stint ended
		lead := func(ctx context.Context, term *election.Term) error {
			s.mu.Lock()
			s.stats.Terms++
			s.asideLocked(c.idx, workerLane, "%s leads, token %d (Run)", who, term.Token())
			s.mu.Unlock()
			for {
				if !s.waitStep(c) || ctx.Err() != nil {
					return nil
				}
				if !s.cfg.IgnoreDeadline {
					if term.Err() != nil {
						return nil
					}
					s.checkCurrent(who+" as leader", term.Hold)
				}
				s.writeAs(c, electionKey, who, term.Token())
				switch c.rng.IntN(6) {
				case 0:
					return nil // gives the term up: Run campaigns again at once
				case 1:
					kept = term
					stop() // the stint ends: Run stops the term and returns
					return nil
				}
			}
		}
		if s.cfg.KeepByHand {
			s.keepByHand(c, e, stint, lead)
		} else {
			_ = e.Run(stint, electionKey, who, lead, opts...)
		}
		stop()
		if keep && kept != nil && c.ctx.Err() == nil {
			s.mu.Lock()
			s.kept[generation{electionKey, kept.Token()}] = 0
			s.stats.Kept++
			s.asideLocked(c.idx, workerLane, "%s keeps token %d to expire", who, kept.Token())
			s.mu.Unlock()
		}
	}
}

// keepByHand is the KeepByHand control's stint: Run's loop written with
// Campaign, which at the stint's end (lead cancelled stint) drops the term
// with neither Resign nor anything that stops its renewals.
func (s *Sim) keepByHand(c *simClient, e *election.Elector, stint context.Context, lead election.Lead) {
	for stint.Err() == nil {
		term, err := e.Campaign(stint, electionKey, c.name())
		if err != nil {
			return
		}
		tctx, tcancel := context.WithCancel(stint)
		unhook := context.AfterFunc(term.Context(), tcancel)
		_ = lead(tctx, term)
		unhook()
		tcancel()
		if stint.Err() != nil {
			return // the stint ended: the term is dropped as it is
		}
		_ = term.Resign(context.WithoutCancel(c.ctx)) // given up, or lost
	}
}

// observer follows the election as another part of c's process would,
// with Elector.Observe, and checks each leader it reports (ObservedOrder).
// Observe follows a broken watch by itself (lease.FollowKey) and reads again
// after a lost read; when it ends with an error all the same (or the naive
// observer does), it observes again a moment later, still holding the
// reports to the same order: a new Observe starts from the leader of its
// moment, never an older one.
func (s *Sim) observer(c *simClient, done chan<- struct{}) {
	defer close(done)
	lc, err := lease.NewClient(s.backend(c, observerLane), c.opts...)
	if err != nil {
		panic(err) // valid by construction, as for the worker's
	}
	e, err := election.New(lc, s.cfg.TTL)
	if err != nil {
		panic(err)
	}
	var last lease.Token // the last non-zero token reported
	defer func() {
		s.mu.Lock()
		delete(s.observing, c)
		s.mu.Unlock()
	}()
	observe := e.Observe
	if s.cfg.NaiveObserver {
		observe = func(ctx context.Context, key string, _ ...lease.FollowOption) iter.Seq2[election.Leader, error] {
			return naiveObserve(ctx, s.backend(c, observerLane), key)
		}
	}
	for c.ctx.Err() == nil {
		for l, err := range observe(c.ctx, electionKey) {
			if err != nil {
				break
			}
			s.observed(c, l, &last)
		}
		s.mu.Lock()
		delete(s.observing, c) // reporting nothing until it observes again
		s.mu.Unlock()
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
	s.observing[c] = l
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

// checkObserved checks E4 (ObservedFresh) for every observer that follows
// a watch (one that reads instead reads again at Expires, and its read may
// be slow): the leader it
// reports as current must not have expired on the backend by the
// observer's own clock (the clock Observe judges Expires on; a drift
// between it and the backend's moves the moment by as much).
func (s *Sim) checkObserved() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, l := range s.observing {
		if l.Token == 0 || c.crashed || !c.watch {
			continue
		}
		g := s.grants[generation{electionKey, l.Token}]
		if g == nil {
			continue // ObservedOrder says so
		}
		if now := c.clock.Now(); now.Sub(g.expires) > time.Millisecond {
			s.violateLocked(ObservedFresh, "%s still reports leader token %d, %v after its term expired on the backend (by its own clock)",
				c.name(), l.Token, now.Sub(g.expires))
			return
		}
	}
}

// naiveObserve is the NaiveObserver control: Observe as it was before it
// timed Expires. It believes the watch (or, without one, reports once).
func naiveObserve(ctx context.Context, b lease.Backend, key string) iter.Seq2[election.Leader, error] {
	return func(yield func(election.Leader, error) bool) {
		w, ok := b.(lease.Watcher)
		if !ok {
			<-ctx.Done()
			return
		}
		cur := election.Leader{Key: key}
		synced := false
		for ev, err := range lease.WatchKey(ctx, w, key) {
			if err != nil {
				yield(election.Leader{}, err)
				return
			}
			switch ev.Kind {
			case lease.Synced:
				synced = true
				if !yield(cur, nil) {
					return
				}
				continue
			case lease.Held, lease.Acquired:
				cur = election.Leader{Key: key, Value: ev.Lease.Owner, Token: ev.Lease.Token, Expires: ev.Lease.Expires}
			case lease.Released, lease.Expired:
				if ev.Lease.Token != cur.Token {
					continue
				}
				cur = election.Leader{Key: key}
			default:
				continue
			}
			if synced && !yield(cur, nil) {
				return
			}
		}
	}
}
