package memstore_test

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest"
	"github.com/leasehq/lease/memstore"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend { return memstore.New() })
}
