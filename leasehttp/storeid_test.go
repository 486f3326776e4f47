package leasehttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// TestClientRefusesAnotherStore: a Client listing two servers that name
// different stores (two replicas given different --backend prefixes)
// refuses the second's answers once the first has named its store, so
// that a key held through the first never looks free through the second;
// servers of one store, and servers without a store id, are used as
// before.
func TestClientRefusesAnotherStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		firstID string
		second  string // the second server's store id: "other" serves another store
		refused bool
	}{
		{"another store", "etcd:1:lease%2F", "etcd:1:%2Flease%2F", true},
		{"the same store", "etcd:1:lease%2F", "etcd:1:lease%2F", false},
		{"no store id", "etcd:1:lease%2F", "", false},
		{"no store id first", "", "etcd:1:lease%2F", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memtest.New(t)
			var opts1, opts2 []leasehttp.ServerOption
			if tc.firstID != "" {
				opts1 = append(opts1, leasehttp.WithStoreID(tc.firstID))
			}
			if tc.second != "" {
				opts2 = append(opts2, leasehttp.WithStoreID(tc.second))
			}
			secondStore := lease.Backend(mem)
			if tc.refused {
				secondStore = memtest.New(t) // what another prefix shows: none of the first's leases
			}
			// The first server answers 503 once down, which moves a
			// Client on to the second.
			var down atomic.Bool
			srv1 := newServer(t, mem, opts1...)
			first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if down.Load() {
					http.Error(w, "down", http.StatusServiceUnavailable)
					return
				}
				srv1.ServeHTTP(w, r)
			}))
			defer first.Close()
			_, second := startServer(t, secondStore, opts2...)

			c := newClient(t, first.URL+","+second.URL, leasehttp.WithTimeout(2*time.Second))
			l, err := c.Acquire(ctxFor(t), "k", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			down.Store(true)
			got, err := c.Get(ctxFor(t), "k")
			if !tc.refused {
				if err != nil || got.Token != l.Token {
					t.Errorf("Get through the second server: %+v, %v; want the lease", got, err)
				}
				return
			}
			if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "another store") {
				t.Errorf("Get through a server of another store: %+v, %v; want ErrUnavailable saying it serves another store (not the key free)", got, err)
			}
			if _, err := c.Acquire(ctxFor(t), "k", "second", time.Minute); err == nil {
				t.Error("an acquire through a server of another store was granted, while the first store's holder holds the key")
			}
			// The watch is tried on both in turn, and never opens: the
			// first is down, the second serves another store.
			ch, _ := goWatch(t, c, "")
			if it, ok := nextItem(t, ch, "the refused watch"); !ok || !errors.Is(it.err, lease.ErrUnavailable) {
				t.Errorf("a watch through a server of another store: %+v (open %v); want no stream, ErrUnavailable", it, ok)
			}
		})
	}
}
