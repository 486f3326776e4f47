package redisstore_test

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/recipetest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
// Redis has no FIFO wait: waiters poll, woken by notifications.
func TestRecipes(t *testing.T) {
	srv := redistest.Start(t)
	ns := redisstore.WithNamespace(testNamespace())
	recipetest.Run(t, func(t *testing.T) lease.Backend { return open(t, srv, ns) }, recipetest.Options{NoFIFO: true})
}
