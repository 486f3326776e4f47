package pgstore

import (
	"context"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/recipetest"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
// PostgreSQL has no FIFO wait: waiters poll, woken by notifications.
func TestRecipes(t *testing.T) {
	db := newTestDB(t, 40)
	recipetest.Run(t, func(t *testing.T) lease.Backend { return db.store(t) }, recipetest.Options{
		NoFIFO: true,
		Waiting: func(_ context.Context, b lease.Backend, key string) (int, error) {
			return waitingFor(b.(*Store), key), nil
		},
	})
}

// waitingFor returns how many WaitChange calls of s listen for key: the
// waiters that have tried key, found it held and wait for word of its
// release. A waiter between two tries is not counted.
func waitingFor(s *Store, key string) int {
	s.notify.mu.Lock()
	defer s.notify.mu.Unlock()
	return len(s.notify.waiters[key])
}
