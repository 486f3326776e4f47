package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/recipetest"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
func TestRecipes(t *testing.T) {
	eps := etcdtest.Start(t)
	prefix := uniquePrefix(t)
	recipetest.Run(t, func(t *testing.T) lease.Backend { return open(t, eps, etcdstore.WithPrefix(prefix)) },
		recipetest.Options{
			Waiting: func(ctx context.Context, b lease.Backend, key string) (int, error) {
				return etcdstore.Waiting(ctx, b.(*etcdstore.Store), key)
			},
			ExpiryLag: 2 * time.Second,
		})
}
