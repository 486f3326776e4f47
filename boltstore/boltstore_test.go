package boltstore_test

import (
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/leasetest"
)

func TestMain(m *testing.M) {
	if flipChild() || crashChild() {
		return
	}
	goleak.VerifyTestMain(m)
}

// open opens a store in a fresh file and closes it when the test ends.
func open(t testing.TB, opts ...boltstore.Option) (*boltstore.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.db")
	return openAt(t, path, opts...), path
}

func openAt(t testing.TB, path string, opts ...boltstore.Option) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path, opts...)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	leasetest.TestBackend(t,
		func(t *testing.T) lease.Backend { s, _ := open(t); return s },
		leasetest.Reopen(func(t *testing.T, old lease.Backend) lease.Backend {
			s := old.(*boltstore.Store)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return openAt(t, s.Path())
		}),
	)
}

// TestConformanceWithoutLog runs the suite on the log-less variant that
// BenchmarkCompareBoltLog measures the log against: a variant that broke
// the contract would prove nothing by being fast.
func TestConformanceWithoutLog(t *testing.T) {
	t.Parallel()
	leasetest.TestBackend(t,
		func(t *testing.T) lease.Backend { s, _ := open(t, boltstore.WithoutLogForBench()); return s },
		leasetest.Reopen(func(t *testing.T, old lease.Backend) lease.Backend {
			s := old.(*boltstore.Store)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return openAt(t, s.Path(), boltstore.WithoutLogForBench())
		}),
	)
}
