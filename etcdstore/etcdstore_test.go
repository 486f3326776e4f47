package etcdstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/leasetest"
)

func TestMain(m *testing.M) { etcdtest.VerifyTestMain(m) }

// A Store is an io.Closer like every store, so that code closing whatever
// backend it was given closes this one too.
var _ io.Closer = (*etcdstore.Store)(nil)

// uniquePrefix gives each test its own namespace, so that tests can share
// one etcd (LEASE_TEST_ETCD_ENDPOINTS).
func uniquePrefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "etcdstore-test/" + hex.EncodeToString(b[:]) + "/"
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, endpoints []string, opts ...etcdstore.Option) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.Open(ctxFor(t), endpoints, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// etcd lease TTLs are whole seconds, at least 1 s: the suite's expiring
// leases use 1 s, held by etcd for up to ~2.5 s (see the package doc).
// A watch hears of an expiry when etcd deletes the key, up to ~2.5 s after
// the TTL (watch.go): the bound allows 3 s.
var suiteOpts = []leasetest.Option{leasetest.ExpiryTTL(time.Second), leasetest.Settle(3 * time.Second),
	leasetest.WatchExpiryBound(3 * time.Second)}

func TestConformance(t *testing.T) {
	// Beside the package's other parallel tests (TestIdleStoreKeepsItsConnection
	// waits a minute), on an etcd of its own.
	t.Parallel()
	eps := etcdtest.Start(t)
	prefix := uniquePrefix(t)
	opts := append(suiteOpts, leasetest.Reopen(func(t *testing.T, old lease.Backend) lease.Backend {
		if err := old.(*etcdstore.Store).Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return open(t, eps, etcdstore.WithPrefix(prefix))
	}))
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend {
		return open(t, eps, etcdstore.WithPrefix(prefix))
	}, opts...)
}

func TestConformanceCluster(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	prefix := uniquePrefix(t)
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend {
		return open(t, c.Endpoints(), etcdstore.WithPrefix(prefix))
	}, suiteOpts...)
}

func TestPrefixValidation(t *testing.T) {
	eps := etcdtest.Start(t)
	for _, p := range []string{"", "a", "lease", "a/\x00/", "a/\n/"} {
		if _, err := etcdstore.Open(ctxFor(t), eps, etcdstore.WithPrefix(p)); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("WithPrefix(%q): err = %v, want ErrInvalid", p, err)
		}
	}
	if _, err := etcdstore.Open(ctxFor(t), nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Open without endpoints: err = %v, want ErrInvalid", err)
	}
	if _, err := etcdstore.New(nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New(nil): err = %v, want ErrInvalid", err)
	}
}

// TestPrefixesDisjoint checks that Stores whose prefixes start with one
// another never see each other's keys (etcd issue #6278).
func TestPrefixesDisjoint(t *testing.T) {
	eps := etcdtest.Start(t)
	base := uniquePrefix(t)
	prefixes := []string{base + "a/", base + "ab/", base + "a/b/", base + "a//", base + "a/h/"}
	keys := []string{"x", "b/x", "h/x", "ab/x", "/x"}
	stores := make([]*etcdstore.Store, len(prefixes))
	for i, p := range prefixes {
		stores[i] = open(t, eps, etcdstore.WithPrefix(p))
	}
	// Each store takes every key; none is reported held by another store.
	for i, s := range stores {
		for _, k := range keys {
			l, err := s.Acquire(ctxFor(t), k, prefixes[i], time.Minute)
			if err != nil {
				t.Fatalf("store %q: Acquire(%q): %v (another prefix's key?)", prefixes[i], k, err)
			}
			if l.Owner != prefixes[i] {
				t.Fatalf("store %q: owner %q", prefixes[i], l.Owner)
			}
		}
	}
	for i, s := range stores {
		page, err := s.List(ctxFor(t), "", lease.Page{})
		if err != nil {
			t.Fatal(err)
		}
		all := page.Leases
		if len(all) != len(keys) {
			t.Errorf("store %q lists %d leases, want its own %d: %+v", prefixes[i], len(all), len(keys), all)
		}
		for _, l := range all {
			if l.Owner != prefixes[i] {
				t.Errorf("store %q lists %q owned by %q", prefixes[i], l.Key, l.Owner)
			}
		}
	}
}

// TestStoreID: Stores on one cluster with one prefix have one StoreID,
// also when they start at once on a new prefix; a Store with another
// prefix, even one an operator takes for the same ("lease/" and
// "/lease/"), or on another cluster, has another; a long prefix still
// gives an id leasehttp.WithStoreID takes.
func TestStoreID(t *testing.T) {
	eps := etcdtest.Start(t)
	p := uniquePrefix(t)
	stores := make([]*etcdstore.Store, 6)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() {
			s, err := etcdstore.Open(ctxFor(t), eps, etcdstore.WithPrefix(p))
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { _ = s.Close() })
			stores[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	a := stores[0]
	for _, b := range stores[1:] {
		if a.StoreID() != b.StoreID() {
			t.Errorf("one prefix, two ids: %q and %q", a.StoreID(), b.StoreID())
		}
	}
	long := p + strings.Repeat("x", 300) + "/"
	others := []*etcdstore.Store{
		open(t, eps, etcdstore.WithPrefix("/"+p)),
		open(t, eps, etcdstore.WithPrefix(long)),
	}
	if os.Getenv(etcdtest.EnvEndpoints) == "" { // a cluster of its own
		others = append(others, open(t, etcdtest.Start(t), etcdstore.WithPrefix(p)))
	}
	for _, other := range others {
		id := other.StoreID()
		if id == a.StoreID() {
			t.Errorf("prefixes %q and another share the id %q", p, id)
		}
		srv, err := leasehttp.NewServer(other, leasehttp.WithStoreID(id))
		if err != nil {
			t.Errorf("WithStoreID(%q): %v", id, err)
			continue
		}
		srv.Close()
	}
}
