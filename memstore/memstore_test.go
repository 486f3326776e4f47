package memstore_test

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend { return memtest.New(t) })
}
