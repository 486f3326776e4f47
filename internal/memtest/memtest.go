// Package memtest makes memstore stores for tests: New fails the test
// instead of returning memstore.New's error, so that a test reads as the
// code it checks.
package memtest

import (
	"testing"

	"github.com/leasehq/lease/memstore"
)

// New returns memstore.New(opts...), failing tb if New refuses an option.
func New(tb testing.TB, opts ...memstore.Option) *memstore.Store {
	tb.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		tb.Fatalf("memstore.New: %v", err)
	}
	return s
}
