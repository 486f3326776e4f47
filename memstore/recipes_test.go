package memstore_test

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/recipetest"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
func TestRecipes(t *testing.T) {
	recipetest.Run(t, func(t *testing.T) lease.Backend { return memtest.New(t) }, recipetest.Options{})
}
