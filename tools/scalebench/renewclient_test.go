package scalebench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// The ordinary Client's row: renewClients lease.Clients on one
// leasehttp.Client, each holding clientHolds holds and renewing them as any
// program does (the scheduler's batches, its bound on batches in flight).
// The server's work for a renewal does not depend on the TTL, so holds of a
// short TTL make the renewals of 30 s leases from fewer holds: a Client
// that keeps H holds of TTL T alive, renewing each every T/3, keeps
// H × 30 s / T alive at TTL 30 s with the same requests. A Client behind
// its holds' due times renews them later than T/3 (they wait in its queue,
// earliest due first, until their deadlines) and so makes fewer requests
// than that; what it keeps at TTL 30 s, renewing every 10 s as every other
// row is counted, is its renewals a second × 10 s. The row counts the
// lesser of the two: at the shortest TTLs without a loss the second is
// the smaller (at TTL 818 ms, 270k renewals a second renewed each hold
// every 0.59 TTL), and counting the first alone put the row at 1.95×
// etcd's keep-alive where its renewals were 1.10× etcd's.
//
// Where that stops being true is the slack: a hold of TTL 30 s survives a
// renewal 20 s late, one of 130 ms only 85 ms late, and on this machine a
// pause of the disk's fdatasync or of the processor for other work lasts
// that long now and then and takes every renewal in flight with it (with
// 16,384 holds the row lost some 2,000 holds at once at TTL 130 ms, at
// 300k renewals/s, in a turn where the server kept up). So the row holds
// enough leases that the server is saturated at TTLs of about a second,
// where the slack is hundreds of milliseconds and what runs out first is
// throughput, as it is at TTL 30 s.
//
// The row looks for the shortest TTL at which no hold is lost: its first
// turn holds them at clientStartTTL, each turn after one without a loss at
// 0.6 × the shortest lossless TTL so far, until a turn loses holds; from
// then on at the geometric mean of the shortest lossless TTL and the
// longest lossy one below it (a bisection), or at 1.4 × a lossy TTL while
// no turn has been lossless. Its figures are those of the turn without a
// loss that kept the most leases at TTL 30 s.
const (
	clientHolds    = 2048 // per Client (LEASE_SCALE_CLIENT_HOLDS): 131,072 in all
	clientStartTTL = 2 * time.Second
	clientMinTTL   = 50 * time.Millisecond
	setupWorkers   = 64 // goroutines acquiring the pool
)

// pool is the row's backend: the leasehttp.Client, except that Acquire
// hands out a lease acquired before the turns and Release does nothing; and
// its renewals ask the server for setupTTL, whatever TTL the Client asks
// for and judges its holds by. The row measures renewals: acquiring and
// releasing 16,384 leases (each fsynced) for every turn would take longer
// than the turn, and their renewals would run on into the other rows'
// turns; the server's work for a renewal is the same whatever its TTL, and
// a lease the Client lost in a turn is still held for the next. It counts
// the renewals its RenewBatch makes.
type pool struct {
	*leasehttp.Client
	setup   *leasehttp.Client // for fill: a long timeout, as acquisitions queue behind each other
	renewed atomic.Int64
	trace   *renewTrace // nil unless LEASE_SCALE_CLIENT_TRACE is set

	mu   sync.Mutex
	held map[string]lease.Lease // by key
}

func (p *pool) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.held[key]
	if !ok {
		return lease.Lease{}, fmt.Errorf("%w: %q is not in the pool", lease.ErrInvalid, key)
	}
	return l, nil
}

func (p *pool) Release(ctx context.Context, l lease.Lease) error { return nil }

// longRenewals holds the slices pool.RenewBatch asks the server with:
// the harness's own copy of each batch, which no program renewing its
// leases makes, reused so that the row's allocations (and the collector's
// work for them) are the Client's and the server's. leasehttp's RenewBatch
// has written its request's body before it returns, and reads the slice no
// more.
var longRenewals = sync.Pool{New: func() any { return new([]lease.Renewal) }}

func (p *pool) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	buf := longRenewals.Get().(*[]lease.Renewal)
	defer longRenewals.Put(buf)
	long := (*buf)[:0]
	for _, r := range renewals {
		long = append(long, lease.Renewal{Lease: r.Lease, TTL: setupTTL})
	}
	*buf = long
	var sent time.Time
	if p.trace != nil {
		sent = p.trace.sent(renewals)
	}
	res, err := p.Client.RenewBatch(ctx, long)
	if p.trace != nil {
		p.trace.answered(renewals, sent, err)
	}
	if err == nil {
		n := 0
		for _, r := range res {
			if r.Err == nil {
				n++
			}
		}
		p.renewed.Add(int64(n))
	}
	return res, err
}

// fill acquires keys for the pool.
func (p *pool) fill(keys []string) error {
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first atomic.Pointer[error]
	)
	for range min(setupWorkers, len(keys)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(keys); i = int(next.Add(1)) - 1 {
				l, err := p.setup.Acquire(context.Background(), keys[i], "client-row", setupTTL)
				if err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				p.mu.Lock()
				p.held[l.Key] = l
				p.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// clientRow is the ordinary Client's row.
type clientRow struct {
	tb    testing.TB
	pool  *pool
	holds int // per Client
	ttl   time.Duration

	// The turn without a loss that kept the most leases at keptAt, the
	// shortest TTL without a loss and the longest lossy TTL below it (the
	// search), and how many turns lost holds.
	best       float64 // leases kept at keptAt
	keptTTL    time.Duration
	bestPerSec float64
	bestTTL    time.Duration
	lossTTL    time.Duration // 0 while no turn below bestTTL lost holds
	lossy      int
}

func newClientRow(tb testing.TB, hc *leasehttp.Client, url string) *clientRow {
	n := clientHolds
	if v := os.Getenv("LEASE_SCALE_CLIENT_HOLDS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			tb.Fatalf("LEASE_SCALE_CLIENT_HOLDS=%q: want a positive count", v)
		}
	}
	setup, err := leasehttp.NewClient(url, leasehttp.WithTimeout(5*time.Minute))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { setup.Close() })
	r := &clientRow{tb: tb, pool: &pool{Client: hc, setup: setup, held: map[string]lease.Lease{}}, holds: n, ttl: clientStartTTL}
	start := time.Now()
	defer func() {
		tb.Logf("serve-bolt-client: %d leases acquired for the pool in %v", renewClients*n, time.Since(start))
	}()
	if os.Getenv("LEASE_SCALE_CLIENT_TRACE") != "" {
		r.pool.trace = newRenewTrace(n)
	}
	if err := r.pool.fill(r.keys()); err != nil {
		tb.Fatal(err)
	}
	return r
}

func clientKey(w, i int) string { return fmt.Sprintf("client/%02d/%05d", w, i) }

func (r *clientRow) keys() []string {
	keys := make([]string, 0, renewClients*r.holds)
	for w := range renewClients {
		for i := range r.holds {
			keys = append(keys, clientKey(w, i))
		}
	}
	return keys
}

// turn holds the Clients' holds at the turn's TTL (hold) and sets the
// TTL of the next turn. It returns the renewals counted and how long they
// were counted.
func (r *clientRow) turn() (int, time.Duration, error) {
	ttl := r.ttl
	n, took, lost, err := r.hold(ttl)
	if err != nil {
		return 0, 0, err
	}
	r.tb.Logf("serve-bolt-client: TTL %v: %d holds, %d lost, %.0f renewals/s", ttl, renewClients*r.holds, lost, float64(n)/took.Seconds())
	if lost > 0 {
		r.lossy++
		if r.bestTTL == 0 || ttl < r.bestTTL {
			r.lossTTL = max(r.lossTTL, ttl)
		}
	} else {
		perSec := float64(n) / took.Seconds()
		if kept := leasesKept(renewClients*r.holds, ttl, perSec); kept > r.best {
			r.best, r.keptTTL, r.bestPerSec = kept, ttl, perSec
		}
		if r.bestTTL == 0 || ttl < r.bestTTL {
			r.bestTTL = ttl
			if r.lossTTL >= ttl {
				r.lossTTL = 0
			}
		}
	}
	switch {
	case r.bestTTL == 0:
		r.ttl = r.lossTTL * 7 / 5
	case r.lossTTL == 0:
		r.ttl = max(r.bestTTL*3/5, clientMinTTL)
	default:
		r.ttl = time.Duration(math.Sqrt(float64(r.bestTTL) * float64(r.lossTTL)))
	}
	return n, took, nil
}

// leasesKept is what holds holds of TTL ttl, kept alive with perSec
// renewals a second, keep alive at TTL keptAt renewed every keptAt/3:
// the lesser of the same requests' leases and the renewals' (see above).
func leasesKept(holds int, ttl time.Duration, perSec float64) float64 {
	return min(float64(holds)*float64(keptAt)/float64(ttl), perSec*(keptAt/3).Seconds())
}

// hold holds every Client's holds at ttl, lets them renew for a TTL,
// counts their renewals for two (at least a second), and releases them; a
// hold lost at any point is a loss. It returns the renewals counted, how
// long they were counted and the holds lost.
func (r *clientRow) hold(ttl time.Duration) (int, time.Duration, int, error) {
	ctx := context.Background()
	holds := make([]*lease.Hold, 0, renewClients*r.holds)
	failed := 0
	t0 := time.Now()
	if r.pool.trace != nil {
		r.pool.trace.reset(t0)
	}
	// The holds are taken over one renewal interval, a chunk from each
	// Client at a time, as a program takes its leases over time: taken at
	// once, they would all fall due at once, every turn starting with a
	// burst of every renewal the row makes in an interval.
	clients := make([]*lease.Client, renewClients)
	for w := range clients {
		c, err := lease.NewClient(r.pool, lease.WithOwner(fmt.Sprintf("client-%02d", w)))
		if err != nil {
			return 0, 0, 0, err
		}
		clients[w] = c
	}
	const chunks = 16
	for k := range chunks {
		// real time: the holds are spread over a real server's renewal interval.
		time.Sleep(time.Until(t0.Add(ttl / 3 * time.Duration(k) / chunks)))
		for w, c := range clients {
			for i := k; i < r.holds; i += chunks {
				h, err := c.TryAcquire(ctx, clientKey(w, i), ttl)
				switch {
				case errors.Is(err, lease.ErrUnavailable):
					// Even a lease handed out at once comes too late for its
					// TTL when this goroutine waits that long for the processor.
					failed++
				case err != nil:
					return 0, 0, 0, err
				default:
					holds = append(holds, h)
				}
			}
		}
	}
	time.Sleep(ttl) // real time: one TTL of the real server's renewals before counting
	before, start := r.pool.renewed.Load(), time.Now()
	time.Sleep(max(2*ttl, time.Second)) // real time: the renewals a second the real server sustains
	n, took := r.pool.renewed.Load()-before, time.Since(start)
	lost := failed
	for _, h := range holds {
		if h.Err() != nil {
			lost++
		}
	}
	for _, h := range holds {
		if err := h.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
			return 0, 0, 0, err
		}
	}
	if r.pool.trace != nil {
		// After the releases: the report holds up the batches it traces.
		r.pool.trace.report(r.tb, ttl, holds)
	}
	return int(n), took, lost, nil
}

// TestLeasesKeptCountsRenewalsBehindDueTimes: a row whose Client kept up
// counts its holds scaled to TTL 30 s; one that fell behind its holds'
// due times (the best turn of 2026-12-06: 131,072 holds at TTL 818 ms
// kept with 270,503 renewals a second, each every 0.59 TTL) counts its
// renewals, as the other rows are counted.
func TestLeasesKeptCountsRenewalsBehindDueTimes(t *testing.T) {
	if got, want := leasesKept(131072, 818*time.Millisecond, 270503), 2705030.0; math.Abs(got-want) > 1 {
		t.Errorf("behind: leasesKept = %.0f, want the renewals' %.0f", got, want)
	}
	if got, want := leasesKept(131072, 1200*time.Millisecond, 400000), 131072*25.0; math.Abs(got-want) > 1 {
		t.Errorf("kept up: leasesKept = %.0f, want the holds' %.0f", got, want)
	}
}
