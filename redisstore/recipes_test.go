package redisstore_test

import (
	"context"
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
	recipetest.Run(t, func(t *testing.T) lease.Backend { return open(t, srv, ns) }, recipetest.Options{
		NoFIFO: true,
		// A waiter that polls, woken by a notification, is one that
		// waits for one: at most one counted.
		Waiting: func(ctx context.Context, b lease.Backend, key string) (int, error) {
			ok, err := b.(*redisstore.Store).Waiting(ctx, key)
			if ok {
				return 1, err
			}
			return 0, err
		},
	})
}
