package scalebench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/leasehttp"
)

// Sustained renewals: leases of TTL 30 s (keptAt) renewed every TTL/3, so
// a server that renews R leases a second keeps 10·R of them alive. Each row
// has renewClients callers, each renewing leases of its own as fast as it
// can, for renewRound at a time, the rows taking turns for renewRounds
// rounds.
const (
	keptAt = 30 * time.Second // the TTL every row's leases-kept is for
	// setupTTL is the TTL every row's leases are acquired (etcd's granted)
	// and renewed with. A renewal's work does not depend on its TTL (each
	// keeps the TTL its lease has, so boltstore's are quiet, and etcd's
	// keep-alive is the same at any TTL), and a round can take longer than
	// keptAt: the setup alone (16,384 fsynced acquisitions, etcd's start
	// and grants) can on a busy machine, and so can the Client row's turns,
	// which on a busy machine find their shortest lossless TTL at several
	// seconds and take four TTLs each. Leases of TTL keptAt then expired
	// between two of their renewals, ending the benchmark (a batch renewal
	// refused not_held, seen with other work on the machine).
	setupTTL       = 10 * time.Minute
	renewClients   = 64
	leasesPerRenew = 256 // each caller's own leases
	renewRound     = 500 * time.Millisecond
	renewRounds    = 6
)

// renewRow is one way of renewing: renew renews caller w's leases, some or
// all of them, and returns how many it renewed; or, for the ordinary
// Client's row, client takes a turn of its own.
type renewRow struct {
	name   string
	renew  func(w int) (int, error)
	client *clientRow
	done   int
	took   time.Duration
}

// BenchmarkCompareScaleRenew: how many renewals a second lease serve's work
// (the leasehttp server over boltstore, fsync on) makes, one request per
// renewal and 256 per request (POST /v1/renew, one commit each), against
// etcd's own lease keep-alive (a LeaseKeepAlive stream per caller, 256
// requests sent, then 256 answers read, as clientv3's KeepAlive sends them)
// on an embedded single-node etcd on the same machine, and against the
// floor of the batch row (floorRenew); and how many leases the ordinary
// lease.Client keeps alive with its own batches (clientRow). The rows take
// turns.
func BenchmarkCompareScaleRenew(b *testing.B) {
	ctx := context.Background()
	store, hc, url := serveBolt(b)
	held := make([][]lease.Lease, renewClients)
	for w := range held {
		for i := range leasesPerRenew {
			l, err := hc.Acquire(ctx, idleKey(w*leasesPerRenew+i), "worker", setupTTL)
			if err != nil {
				b.Fatal(err)
			}
			held[w] = append(held[w], l)
		}
	}
	next := make([]int, renewClients)
	one := func(w int) (int, error) {
		i := next[w] % leasesPerRenew
		next[w]++
		_, err := hc.Renew(ctx, held[w][i], setupTTL)
		return 1, err
	}
	batches := make([][]lease.Renewal, renewClients)
	for w := range batches {
		for _, l := range held[w] {
			batches[w] = append(batches[w], lease.Renewal{Lease: l, TTL: setupTTL})
		}
	}
	batch := func(w int) (int, error) {
		res, err := hc.RenewBatch(ctx, batches[w])
		if err != nil {
			return 0, err
		}
		for _, r := range res {
			if r.Err != nil {
				return 0, r.Err
			}
		}
		return len(res), nil
	}

	// Before etcd's leases are granted: filling the pool takes a while.
	client := newClientRow(b, hc, url)

	cli := etcdtest.NewClient(b, etcdtest.Start(b))
	lc := pb.NewLeaseClient(cli.ActiveConnection())
	streams := make([]pb.Lease_LeaseKeepAliveClient, renewClients)
	ids := make([][]clientv3.LeaseID, renewClients)
	var err error
	for w := range streams {
		if streams[w], err = lc.LeaseKeepAlive(ctx); err != nil {
			b.Fatal(err)
		}
		for range leasesPerRenew {
			g, err := cli.Grant(ctx, int64(setupTTL/time.Second))
			if err != nil {
				b.Fatal(err)
			}
			ids[w] = append(ids[w], g.ID)
		}
	}
	defer func() {
		for _, s := range streams {
			_ = s.CloseSend()
		}
	}()
	keepAlive := func(w int) (int, error) {
		for _, id := range ids[w] {
			if err := streams[w].Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
				return 0, err
			}
		}
		for range ids[w] {
			resp, err := streams[w].Recv()
			if err != nil {
				return 0, err
			}
			if resp.TTL <= 0 {
				return 0, fmt.Errorf("etcd lease %x expired", resp.ID)
			}
		}
		return len(ids[w]), nil
	}

	// Last, as it renews caller 0's leases.
	floor := floorRenew(b, url, filepath.Dir(store.Path()), batches)

	rows := []*renewRow{
		{name: "etcd-keepalive", renew: keepAlive},
		{name: "serve-bolt", renew: one},
		{name: "serve-bolt-batch256", renew: batch},
		{name: "floor-http-fsync", renew: floor},
		{name: "serve-bolt-client", client: client},
	}
	for r := range renewRounds {
		for k := range rows {
			row := rows[(r+k)%len(rows)]
			var (
				n    int
				took time.Duration
			)
			if row.client != nil {
				n, took, err = row.client.turn()
			} else {
				n, took, err = renewFor(row.renew, renewRound)
			}
			if err != nil {
				b.Fatalf("%s: %v", row.name, err)
			}
			row.done += n
			row.took += took
		}
	}
	for _, row := range rows {
		perSec := float64(row.done) / row.took.Seconds()
		if row.client != nil {
			perSec = row.client.bestPerSec
		}
		b.Run(fmt.Sprintf("c=%d/%s", renewClients, row.name), func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(1e9/perSec, "ns/op")
			b.ReportMetric(perSec, "ops/s")
			if c := row.client; c != nil {
				b.ReportMetric(c.best, "leases-kept")
				b.ReportMetric(float64(c.keptTTL.Milliseconds()), "ttl-ms")
				b.ReportMetric(float64(c.lossy), "lossy-turns")
				return
			}
			b.ReportMetric(perSec*(keptAt/3).Seconds(), "leases-kept")
		})
	}
}

// serveBolt starts lease serve's work on boltstore (fsync on): the
// leasehttp server over a store in a temporary directory, on a loopback
// socket, and a leasehttp.Client of it, all closed when b ends. It returns
// the store, the client and the server's URL.
func serveBolt(b *testing.B) (*boltstore.Store, *leasehttp.Client, string) {
	store, err := boltstore.Open(filepath.Join(b.TempDir(), "lease.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	api, err := leasehttp.NewServer(store, leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(api)
	b.Cleanup(srv.Close)
	b.Cleanup(func() { api.Close() })
	hc, err := leasehttp.NewClient(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hc.Close() })
	return store, hc, srv.URL
}

// renewFor runs renew from renewClients callers until d has passed and
// returns how many renewals they made and how long that took (from the
// start until the last caller's last call returned).
func renewFor(renew func(w int) (int, error), d time.Duration) (int, time.Duration, error) {
	var (
		total atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	start := time.Now()
	for w := range renewClients {
		wg.Go(func() {
			for time.Since(start) < d {
				n, err := renew(w)
				if err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				total.Add(int64(n))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := first.Load(); err != nil {
		return 0, 0, *err
	}
	return int(total.Load()), took, nil
}
