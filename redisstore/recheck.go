package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehq/lease"
)

// The persistence settings New checked can change while the Store runs:
// CONFIG SET appendfsync everysec, no-appendfsync-on-rewrite yes or an
// eviction policy, a restart with another redis.conf, a failover (Sentinel,
// a Cluster replica promoted) to a node configured otherwise. A token
// granted then can be issued again after a crash (I1, I7). acquire.lua
// reads appendonly in every grant, but no script can read the others; so a
// Store that checked its server (neither AllowVolatile nor AssumeDurable)
// reads them all again, as New did (CONFIG GET on every node the client
// knows, the cluster's topology read anew), every recheckEvery, in a
// goroutine of its own: a grant only loads the last verdict, an atomic
// pointer, and never waits for a check. While the last verdict found a
// setting that cannot keep tokens rising, every grant (Acquire, Bump) is
// refused with an error matching ErrVolatile and lease.ErrUnavailable that
// names the setting, the node and the fix; renewals, releases, reads and
// watches go on, as they issue no token. The check after the setting is
// fixed lets grants through again.
//
// A check that cannot run is not a pass. One that the server answers with
// an error (CONFIG renamed or forbidden since) refuses at once, as New
// would. One that gets no answer (the server or a node unreachable, a
// timeout) keeps the last verdict, and is tried again sooner (from 10 ms,
// doubling up to recheckEvery), so that a server back from a restart or a
// failover is read at once; when checks have failed so for recheckPatience
// periods in a row (5 s), grants are refused until one succeeds. A server
// that cannot be reached refuses grants by itself; the patience keeps a
// short outage from holding grants back after it, and a check that can
// never run from refusing nothing.
//
// What this cannot close: a grant made on a node between its change and
// the next check, at most recheckEvery (plus the check's own round trip)
// after a CONFIG SET, a restart or a failover.

const (
	// recheckEvery is how often a Store re-reads the persistence settings.
	recheckEvery = time.Second
	// recheckPatience is how many periods checks may go without an answer
	// before grants are refused.
	recheckPatience = 5
	// recheckTimeout bounds one check (go-redis' own read timeouts and
	// retries may hold it longer where it ignores the context).
	recheckTimeout = 5 * time.Second
	// recheckRetry is the first pause after a check that got no answer.
	recheckRetry = 10 * time.Millisecond
)

// grantRefused returns the refusal of a grant while the last re-check found
// the server's persistence volatile, or nil.
func (s *Store) grantRefused() error {
	if p := s.volatile.Load(); p != nil {
		return *p
	}
	return nil
}

// recheck re-reads the persistence settings with check every period until
// ctx (the Store's life) ends, and keeps the verdict in s.volatile.
func (s *Store) recheck(ctx context.Context, every time.Duration, check func(context.Context) error) {
	var (
		failingSince time.Time // the first of the checks in a row that got no answer
		pause        = every
		retry        = recheckRetry
	)
	t := time.NewTimer(pause)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, max(every, recheckTimeout))
		err := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		pause = every
		switch {
		case err == nil:
			failingSince, retry = time.Time{}, recheckRetry
			s.volatile.Store(nil)
		case errors.Is(err, ErrVolatile):
			failingSince, retry = time.Time{}, recheckRetry
			s.refuseGrants(every, err)
		default:
			now := time.Now()
			if failingSince.IsZero() {
				failingSince = now
			}
			if d := now.Sub(failingSince); d >= recheckPatience*every {
				s.refuseGrants(every, fmt.Errorf("%w: cannot read the persistence settings for %v (last: %v), so cannot prove that a token granted now survives a restart; "+
					"grants resume once a check reads them; if the server is durable but answers CONFIG GET too slowly, pass redisstore.AssumeDurable()",
					ErrVolatile, d.Round(time.Millisecond), err))
			}
			pause, retry = min(retry, every), min(2*retry, every)
		}
		t.Reset(pause)
	}
}

// refuseGrants makes err, what a check found, the refusal of every grant
// until a check passes.
func (s *Store) refuseGrants(every time.Duration, err error) {
	e := fmt.Errorf("%w: no grant while the server's persistence is not what the store started with "+
		"(the store checks it every %v and grants again once it is fixed): %w", lease.ErrUnavailable, every, err)
	s.volatile.Store(&e)
}
