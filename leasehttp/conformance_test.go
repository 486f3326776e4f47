package leasehttp_test

import (
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest"
	"github.com/leasehq/lease/memstore"
)

// TestConformance runs the backend suite against the Client talking to a
// live server, once over memstore's own FIFO wait and once with the server
// queueing waiters itself; the suite's WaitAcquirer test checks FIFO order
// through HTTP in both, and its Watch section the Client's Watch over
// GET /v1/watch.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*memstore.Store) lease.Backend
	}{
		{"BackendWaits", func(s *memstore.Store) lease.Backend { return s }},
		// The server queues waiters itself but still watches: the Watch
		// section runs in both.
		{"ServerQueues", func(s *memstore.Store) lease.Backend { return queuedWatcher{backendOnly{s}, s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, hs := startServer(t, tc.wrap(memtest.New(t)))
			c := newClient(t, hs.URL)
			leasetest.TestBackend(t, func(t *testing.T) lease.Backend { return c })
		})
	}
}

// queuedWatcher is a backend that watches but does not wait for keys
// itself.
type queuedWatcher struct {
	backendOnly
	lease.Watcher
}
