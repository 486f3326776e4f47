package boltstore_test

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/recipetest"
)

// TestRecipes runs the recipe suite (election and semaphore under faults).
func TestRecipes(t *testing.T) {
	t.Parallel()
	recipetest.Run(t, func(t *testing.T) lease.Backend { s, _ := open(t); return s }, recipetest.Options{})
}
