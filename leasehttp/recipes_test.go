package leasehttp_test

import (
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/recipetest"
	"github.com/leasehq/lease/leasehttp"
)

// TestRecipes runs the recipe suite through a live server whose wait cap
// is 30 ms, so that every wait in it is re-sent many times: whichever way
// the server waits, the line must keep its order.
func TestRecipes(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			recipetest.Run(t, func(t *testing.T) lease.Backend {
				_, hs := startServer(t, be.new(t), leasehttp.WithMaxWait(30*time.Millisecond))
				return newClient(t, hs.URL)
			}, recipetest.Options{Settle: 100 * time.Millisecond})
		})
	}
}
