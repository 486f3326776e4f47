package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

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
// A check runs on a client of the Store's own (recheckClient: the same
// servers and options, one connection a node), which Close closes under a
// check in flight: go-redis reads a reply on past its context's end, until
// its read timeout, so a check stuck on a silent link (packets dropped, the
// connection left open) held Close for that long (5 s by default,
// whatever ReadTimeout says otherwise).
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
// ctx (the Store's life) ends, and keeps the verdict in s.volatile. own, if
// not nil, is the client check reads through: it is closed when ctx ends,
// ending a check in flight, and before recheck returns.
func (s *Store) recheck(ctx context.Context, every time.Duration, check func(context.Context) error, own io.Closer) {
	if own != nil {
		closed := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { _ = own.Close(); close(closed) })
		defer func() {
			if stop() {
				_ = own.Close()
			} else {
				<-closed // no goroutine outlives the Store's Close
			}
		}()
	}
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

// recheckClient returns a client for the re-checks on the servers client
// is on, with its options (address, dialer, TLS, credentials, timeouts,
// OnConnect) but pools of one connection a node and no client-side cache,
// or nil for a client of another type. A failover (Sentinel) client's copy
// dials anew for every check: go-redis drops the original's connections to
// an old master on failover, not the copy's, and a check must read the
// master the grants go to.
func recheckClient(client redis.UniversalClient) redis.UniversalClient {
	switch c := client.(type) {
	case *redis.Client:
		o := *c.Options()
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns = 1, 0, 1, 0
		o.PushNotificationProcessor = nil
		o.ClientSideCacheConfig, o.ClientSideCache = nil, nil
		if o.Addr == "FailoverClient" { // NewFailoverClient's
			o.ConnMaxLifetime, o.ConnMaxLifetimeJitter = time.Nanosecond, 0
		}
		return redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *c.Options()
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 1, 0, 1
		o.PushNotificationProcessor = nil
		return redis.NewClusterClient(&o)
	}
	return nil
}

// refuseGrants makes err, what a check found, the refusal of every grant
// until a check passes.
func (s *Store) refuseGrants(every time.Duration, err error) {
	e := fmt.Errorf("%w: no grant while the server's persistence is not what the store started with "+
		"(the store checks it every %v and grants again once it is fixed): %w", lease.ErrUnavailable, every, err)
	s.volatile.Store(&e)
}
