package leasehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// BenchmarkCompareHTTPOverhead measures what the server and Client add to an
// in-memory backend: an acquire+release pair through them, against the
// baseline of two bare HTTP round trips (GET /healthz) on the same
// connections.
func BenchmarkCompareHTTPOverhead(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("c=%d/http-roundtrip-pair", clients), func(b *testing.B) {
			hs := benchServer(b)
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			defer hc.CloseIdleConnections()
			get := func() error {
				resp, err := hc.Get(hs + "/healthz")
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			}
			benchutil.Run(b, clients, func(_, _ int) error {
				if err := get(); err != nil {
					return err
				}
				return get()
			})
		})
		b.Run(fmt.Sprintf("c=%d/leasehttp-memstore", clients), func(b *testing.B) {
			hs := benchServer(b)
			c, err := leasehttp.NewClient(hs)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			benchutil.Run(b, clients, func(w, _ int) error {
				l, err := c.Acquire(ctx, "bench/"+strconv.Itoa(w), "bench", time.Minute)
				if err != nil {
					return err
				}
				return c.Release(ctx, l)
			})
		})
	}
}

func benchServer(b *testing.B) string {
	srv, err := leasehttp.NewServer(memtest.New(b), leasehttp.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	hs := newHTTPServer(srv)
	b.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	return hs.URL
}

// BenchmarkCompareRenewWire measures the renewal answers, whose bodies the
// wire codec writes and reads: one POST /v1/leases/{key}/renew, and one
// POST /v1/renew of 256 leases, through the Client over memstore, against
// the floor of one bare HTTP round trip (GET /healthz).
func BenchmarkCompareRenewWire(b *testing.B) {
	ctx := context.Background()
	b.Run("c=1/http-roundtrip", func(b *testing.B) {
		hs := benchServer(b)
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
		defer hc.CloseIdleConnections()
		benchutil.Run(b, 1, func(_, _ int) error {
			resp, err := hc.Get(hs + "/healthz")
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		})
	})
	for _, n := range []int{1, 256} {
		b.Run(fmt.Sprintf("c=1/renew-%d", n), func(b *testing.B) {
			c, err := leasehttp.NewClient(benchServer(b))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var renewals []lease.Renewal
			for i := range n {
				l, err := c.Acquire(ctx, "bench/"+strconv.Itoa(i), "bench-owner", time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				renewals = append(renewals, lease.Renewal{Lease: l, TTL: time.Hour})
			}
			benchutil.Run(b, 1, func(_, _ int) error {
				if n == 1 {
					_, err := c.Renew(ctx, renewals[0].Lease, time.Hour)
					return err
				}
				res, err := c.RenewBatch(ctx, renewals)
				if err == nil && res[n-1].Err != nil {
					err = res[n-1].Err
				}
				return err
			})
		})
	}
}
