package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehq/lease"
)

// An acquire statement whose caller gives up, or whose answer is lost, may
// still grant a lease: nobody would know its ID, and the key would be held
// for its TTL by nobody. The Store does not let that happen where it can
// help it. A caller's end does not cancel the statement (the acquire
// batcher is detached): its answer is awaited, and a lease granted to a
// caller that left is released at once (orphaned). A statement that fails
// after it was sent — the connection broken or killed, the server
// restarted, the statement's bound reached — is settled: the backend that
// ran it is ended if it still runs it, and once it is gone, the leases
// granted under the statement's IDs (chosen before it was sent) are
// released (settle). Either way the release can only end a lease that
// statement granted, never a later holder's. The backend is known by its
// PID and the statement's text: were the PID reused within the seconds of
// settling by another session running an acquire statement of the same
// text (another pgstore's), that one would be ended too, and settled by
// its own Store.

// acquireBound bounds an acquire statement that no caller can cancel: a
// server that has not answered by then is taken for gone, and what the
// statement may have granted is settled.
const acquireBound = 30 * time.Second

// acquireContext is the context of an acquire statement (the acquire
// batcher's detached): the Store's life, not its callers', for at most
// acquireBound.
func (s *Store) acquireContext([]*call[acquireReq, lease.Lease]) (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.bg.Context(), s.acquireBound)
}

// orphaned releases the lease granted to c, whose caller gave up before the
// answer came, in the background, for at most its TTL (it has expired
// by then anyway).
func (s *Store) orphaned(c *call[acquireReq, lease.Lease]) {
	if c.err != nil {
		return // held, or the statement failed and is being settled
	}
	l := c.res
	s.bg.Go(func(life context.Context) {
		ctx, cancel := context.WithTimeout(life, l.TTL)
		defer cancel()
		_ = s.Release(ctx, l)
	})
}

// settle ends the leases that the acquire statement sql, sent for calls
// on the connection of backend pid and answered with an error, may have
// granted. It tries again while the server cannot be reached, for as long
// as the longest of their TTLs: a grant has expired by then, unless the
// statement went on at the server for longer still (a server that cannot
// be reached cannot be asked to stop it).
func (s *Store) settle(pid uint32, sql string, calls []*call[acquireReq, lease.Lease]) {
	keys := make([]string, len(calls))
	ids := make([][]byte, len(calls))
	var ttl time.Duration
	for i, c := range calls {
		keys[i], ids[i] = c.key, c.res.ID[:]
		ttl = max(ttl, c.res.TTL)
	}
	s.bg.Retry(time.Now().Add(ttl), func(ctx context.Context) bool {
		return s.settleOnce(ctx, pid, sql, keys, ids) == nil
	})
}

// settleOnce waits until the backend pid no longer runs sql, then releases
// the unexpired leases of keys granted under ids.
func (s *Store) settleOnce(ctx context.Context, pid uint32, sql string, keys []string, ids [][]byte) error {
	rows, err := s.pool.Query(ctx, s.q.stopped, int32(pid), sql)
	if err != nil {
		return err
	}
	for rows.Next() {
		var gone bool
		if err := rows.Scan(&gone); err != nil {
			rows.Close()
			return err
		}
		if !gone {
			rows.Close()
			return fmt.Errorf("pgstore: backend %d still runs an acquire statement", pid)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = s.pool.Query(ctx, s.q.granted, keys, ids)
	if err != nil {
		return err
	}
	var granted []lease.Lease
	for rows.Next() {
		l := lease.Lease{}
		if err := rows.Scan(&l.Key, &l.Token); err != nil {
			rows.Close()
			return err
		}
		granted = append(granted, l)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, l := range granted {
		for i, k := range keys {
			if k == l.Key {
				copy(l.ID[:], ids[i])
			}
		}
		if err := s.Release(ctx, l); err != nil && !errors.Is(err, lease.ErrNotHeld) {
			return err
		}
	}
	return nil
}
