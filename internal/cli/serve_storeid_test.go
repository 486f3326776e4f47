package cli

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasehttp"
)

// TestServeNamesItsStore: every backend's lease serve names its store in
// the Lease-Store header, so that a Client listing two servers of different
// stores (two embedded stores, two databases, two Redis servers) refuses
// the second's answers once the first has named its store, instead of
// taking a key held through the first as free through the second and
// granting it again; two servers of one store are used as replicas.
func TestServeNamesItsStore(t *testing.T) {
	pgSpec := func(t *testing.T) string { return pgURL(t, pgtest.Start(t)) }
	redisSpec := func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr + "/0" }
	for _, tc := range []struct {
		name string
		id   string // the header's form
		same bool   // the two servers serve one store
		// specs returns the two servers' --backend ("" for the embedded
		// store in a data dir of its own).
		specs func(t *testing.T) (string, string)
	}{
		{"bolt, two data dirs", `^bolt:[0-9a-f]{32}$`, false, func(*testing.T) (string, string) { return "", "" }},
		{"postgres, one database", `^postgres:public\.lease_:[0-9a-f]{32}$`, true, func(t *testing.T) (string, string) { u := pgSpec(t); return u, u }},
		{"postgres, two databases", `^postgres:public\.lease_:[0-9a-f]{32}$`, false, func(t *testing.T) (string, string) { return pgSpec(t), pgSpec(t) }},
		{"redis, one server", `^redis:lease:[0-9a-f]{32}$`, true, func(t *testing.T) (string, string) { u := redisSpec(t); return u, u }},
		{"redis, two servers", `^redis:lease:[0-9a-f]{32}$`, false, func(t *testing.T) (string, string) { return redisSpec(t), redisSpec(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec1, spec2 := tc.specs(t)
			var servers [2]*Server
			var ids [2]string
			for i, spec := range []string{spec1, spec2} {
				cfg := serveConfig(t, io.Discard)
				if spec != "" {
					cfg.DataDir, cfg.Backend = "", spec
				}
				servers[i] = startServe(t, cfg)
				resp, err := http.Get("http://" + servers[i].Addr() + "/v1/leases/k")
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				ids[i] = resp.Header.Get(leasehttp.StoreHeader)
				if !regexp.MustCompile(tc.id).MatchString(ids[i]) {
					t.Errorf("server %d's %s header: %q, want %s", i+1, leasehttp.StoreHeader, ids[i], tc.id)
				}
			}
			if (ids[0] == ids[1]) != tc.same {
				t.Errorf("the servers' %s headers: %q and %q", leasehttp.StoreHeader, ids[0], ids[1])
			}
			c := httpClient(t, "http://"+servers[0].Addr()+",http://"+servers[1].Addr(), leasehttp.WithTimeout(5*time.Second))
			l, err := c.Acquire(t.Context(), "k", "holder", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := servers[0].Close(); err != nil { // the Client moves on to the second
				t.Fatal(err)
			}
			got, err := c.Get(t.Context(), "k")
			if tc.same {
				if err != nil || got.Token != l.Token {
					t.Fatalf("Get through the second server of one store: %+v, %v; want the lease", got, err)
				}
				return
			}
			if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "another store") {
				t.Fatalf("Get through the server of another store: %+v, %v; want ErrUnavailable saying it serves another store (not the key free)", got, err)
			}
			if l2, err := c.Acquire(t.Context(), "k", "second", time.Minute); err == nil {
				t.Fatalf("the key held through the first server was granted again through the second: %+v", l2)
			}
		})
	}
}
