package redisstore_test

import (
	"regexp"
	"sync"
	"testing"

	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// TestStoreID: Stores on one namespace, starting at once or later, report
// one StoreID; another namespace, or another server, has another.
func TestStoreID(t *testing.T) {
	srv := redistest.Start(t)
	ns := testNamespace()
	const n = 4
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i] = open(t, srv, redisstore.WithNamespace(ns)).StoreID() })
	}
	wg.Wait()
	if !regexp.MustCompile(`^redis:` + ns + `:[0-9a-f]{32}$`).MatchString(ids[0]) {
		t.Fatalf("StoreID %q: want redis:%s: and 32 hex digits", ids[0], ns)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("Stores on one namespace report StoreIDs %q", ids)
		}
	}
	if later := open(t, srv, redisstore.WithNamespace(ns)).StoreID(); later != ids[0] {
		t.Fatalf("a later Store's StoreID %q, the first's %q", later, ids[0])
	}
	suffix := func(id string) string { return id[len(id)-32:] }
	if other := open(t, srv).StoreID(); suffix(other) == suffix(ids[0]) {
		t.Fatalf("another namespace's StoreID %q has the id of %q", other, ids[0])
	}
	if other := open(t, redistest.Start(t), redisstore.WithNamespace(ns)).StoreID(); other == ids[0] {
		t.Fatalf("another server's store on the same namespace has the StoreID %q", other)
	}
}
