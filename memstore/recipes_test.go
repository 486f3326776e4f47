package memstore_test

import (
	"context"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/recipetest"
	"github.com/leasehq/lease/memstore"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
func TestRecipes(t *testing.T) {
	recipetest.Run(t, func(t *testing.T) lease.Backend { return memtest.New(t) }, recipetest.Options{
		Waiting: func(_ context.Context, b lease.Backend, key string) (int, error) {
			return memstore.Waiting(b.(*memstore.Store), key), nil
		},
	})
}
