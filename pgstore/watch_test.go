package pgstore

import (
	"testing"

	"github.com/leasehq/lease/leasetest"
)

// TestWatchBreaksWhenListenerKilled: the server ends the listening
// connection (pg_terminate_backend), so changes may go unheard; every
// watch must say so with ErrUnavailable rather than go quiet, and a new
// watch must start from the current state, changes made meanwhile
// included.
func TestWatchBreaksWhenListenerKilled(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	leasetest.TestWatchBreak(t, s, func(t *testing.T) {
		s.watch.mu.Lock()
		pid := s.watch.pid
		s.watch.mu.Unlock()
		var killed bool
		if err := db.pool.QueryRow(testCtx(t), `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
			t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, killed, err)
		}
	}, nil)
}
