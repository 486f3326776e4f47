package pgstore

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/recipetest"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
// PostgreSQL has no FIFO wait: waiters poll, woken by notifications.
func TestRecipes(t *testing.T) {
	db := newTestDB(t, 40)
	recipetest.Run(t, func(t *testing.T) lease.Backend { return db.store(t) }, recipetest.Options{NoFIFO: true})
}
