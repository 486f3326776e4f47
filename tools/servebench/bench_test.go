package servebench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func TestMain(m *testing.M) { etcdtest.VerifyTestMain(m) }

// clientCounts are the issue's: one client, and 32.
var clientCounts = []int{1, 32}

// ttl is long enough that no lease expires during a run.
const ttl = 30 * time.Second

// impl is one row of the comparison: op does one pair for client w.
type impl struct {
	name string
	op   func(w, i int) error
}

// newImpls starts what the rows measure, for up to maxClients clients, and
// returns them in report order: the baseline first.
func newImpls(tb testing.TB, maxClients int) []impl {
	tb.Helper()
	ctx := context.Background()

	// Baseline: the same HTTP path with nothing behind it.
	noop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	tb.Cleanup(noop.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256 // as leasehttp.Client's own
	tb.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	body := []byte(`{"owner":"bench","ttl_ms":30000,"wait_ms":0}`)
	post := func(url string) error {
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if err := resp.Body.Close(); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %s", url, resp.Status)
		}
		return nil
	}

	// The floor of a durable server on this HTTP path (floor_test.go).
	floor, _ := floorServer(tb)

	// lease serve's work: leasehttp over boltstore, fsync on; and the same
	// server over memstore, which makes nothing durable.
	store, err := boltstore.Open(filepath.Join(tb.TempDir(), "lease.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := store.Close(); err != nil {
			tb.Error(err)
		}
	})
	bolt := serve(tb, store)
	mem := serve(tb, memtest.New(tb))

	// etcd: one session per client, reused for every lock.
	cli := etcdtest.NewClient(tb, etcdtest.Start(tb))
	sessions := make([]*concurrency.Session, maxClients)
	for w := range sessions {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		sessions[w] = s
	}

	key := func(w int) string { return fmt.Sprintf("bench/%d", w) }
	return []impl{
		{"http-noop", func(int, int) error {
			if err := post(noop.URL + "/v1/leases/k/acquire"); err != nil {
				return err
			}
			return post(noop.URL + "/v1/leases/k/release")
		}},
		{"fsync-floor", func(w, _ int) error {
			if err := post(floor.URL + "/v1/leases/" + key(w) + "/acquire"); err != nil {
				return err
			}
			return post(floor.URL + "/v1/leases/" + key(w) + "/release")
		}},
		{"serve-bolt", func(w, _ int) error { return pair(ctx, bolt, key(w)) }},
		{"serve-mem", func(w, _ int) error { return pair(ctx, mem, key(w)) }},
		{"etcd-mutex", func(w, _ int) error {
			m := concurrency.NewMutex(sessions[w], "/"+key(w))
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
	}
}

// serve starts leasehttp's server over b, as lease serve runs it, and
// returns a client of it; cleanup stops both before b is closed.
func serve(tb testing.TB, b lease.Backend) *leasehttp.Client {
	tb.Helper()
	api, err := leasehttp.NewServer(b, leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(api)
	lc, err := leasehttp.NewClient(srv.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = lc.Close()
		_ = api.Close()
		srv.Close()
	})
	return lc
}

// pair is one acquire+release of key through c.
func pair(ctx context.Context, c *leasehttp.Client, key string) error {
	l, err := c.Acquire(ctx, key, "bench", ttl)
	if err != nil {
		return err
	}
	return c.Release(ctx, l)
}

// BenchmarkCompareServe: one op = one acquire+release pair (etcd: one
// Lock+Unlock) on a key of the client's own, so clients never contend.
func BenchmarkCompareServe(b *testing.B) {
	impls := newImpls(b, clientCounts[len(clientCounts)-1])
	for _, c := range clientCounts {
		for _, im := range impls {
			b.Run(fmt.Sprintf("c=%d/%s", c, im.name), func(b *testing.B) {
				benchutil.Run(b, c, im.op)
			})
		}
	}
}

// TestImplsWork runs every row's operation a few times from several
// clients, so that a broken benchmark fails `make test` rather than a
// benchmark run.
func TestImplsWork(t *testing.T) {
	const clients = 3
	for _, im := range newImpls(t, clients) {
		t.Run(im.name, func(t *testing.T) {
			errs := make(chan error, clients)
			for w := range clients {
				go func() {
					var err error
					for i := 0; i < 5 && err == nil; i++ {
						err = im.op(w, i)
					}
					errs <- err
				}()
			}
			for range clients {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}
