package watchbench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
	"github.com/leasehq/lease/tools/chaos"
)

// silenceHeartbeat is the servers' heartbeat in the silence benchmarks:
// long enough that leasehttp.SilenceSlack (250 ms) is half of one.
const silenceHeartbeat = 500 * time.Millisecond

// silenceRounds is how many rounds each silence benchmark plays.
const silenceRounds = 20

// blackhole is the toxiproxy toxic pair that stops every byte both ways
// and keeps the connection open.
var blackhole = []chaos.Toxic{
	{Name: "blackhole-down", Type: "timeout", Stream: "downstream", Attributes: map[string]int64{"timeout": 0}},
	{Name: "blackhole-up", Type: "timeout", Stream: "upstream", Attributes: map[string]int64{"timeout": 0}},
}

// silentLink is a memstore served by leasehttp (heartbeat
// silenceHeartbeat) behind a toxiproxy proxy.
type silentLink struct {
	store *memstore.Store
	hs    *httptest.Server
	px    *chaos.Proxies
	url   string // through the proxy
}

func newSilentLink(b *testing.B) *silentLink {
	b.Helper()
	store, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	srv, err := leasehttp.NewServer(store, leasehttp.WithHeartbeat(silenceHeartbeat))
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	px, err := chaos.NewProxies([]string{hs.Listener.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { px.Close(); srv.Close(); hs.Close() })
	return &silentLink{store: store, hs: hs, px: px, url: "http://" + px.Listen(0)}
}

// hole blackholes the link after a random phase within a heartbeat (where
// the last heartbeat falls before the silence starts), and returns when.
func (s *silentLink) hole(b *testing.B) time.Time {
	b.Helper()
	time.Sleep(rand.N(silenceHeartbeat)) // real time: the heartbeats run on it
	if err := s.px.Add(blackhole...); err != nil {
		b.Fatal(err)
	}
	return time.Now()
}

// BenchmarkCompareSilence measures, interleaved round by round, how soon a
// watch stream that stops delivering without closing (a toxiproxy
// blackhole, both ways, after a random phase within the heartbeat) is
// reported broken, in the server's heartbeat intervals:
//
//   - deadline-floor: a raw reader of the same stream that sets the
//     socket's read deadline to the same silence limit
//     (leasehttp.MissedHeartbeats heartbeats + SilenceSlack) before every
//     read: the same rule with nothing between it and the kernel;
//   - leasehttp-watch: leasehttp.Client.Watch, from the blackhole to its
//     ErrUnavailable.
func BenchmarkCompareSilence(b *testing.B) {
	b.Run("c=1/interleaved", func(b *testing.B) {
		link := newSilentLink(b)
		limit := leasehttp.MissedHeartbeats*silenceHeartbeat + leasehttp.SilenceSlack
		rows := []struct {
			name  string
			round func(ctx context.Context) (time.Duration, error)
		}{
			{"deadline-floor", func(ctx context.Context) (time.Duration, error) {
				conn, err := net.Dial("tcp", link.px.Listen(0))
				if err != nil {
					return 0, err
				}
				defer conn.Close()
				if _, err := fmt.Fprintf(conn, "GET /v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
					return 0, err
				}
				r := bufio.NewReader(conn)
				for { // until the synced event
					_ = conn.SetReadDeadline(time.Now().Add(limit))
					line, err := r.ReadString('\n')
					if err != nil {
						return 0, err
					}
					if line == "event: synced\n" {
						break
					}
				}
				at := link.hole(b)
				for {
					_ = conn.SetReadDeadline(time.Now().Add(limit))
					if _, err := r.ReadByte(); err != nil {
						var ne net.Error
						if errors.As(err, &ne) && ne.Timeout() {
							return time.Since(at), nil
						}
						return 0, err
					}
				}
			}},
			{"leasehttp-watch", func(ctx context.Context) (time.Duration, error) {
				c, err := leasehttp.NewClient(link.url)
				if err != nil {
					return 0, err
				}
				defer c.Close()
				var at time.Time
				for ev, err := range c.Watch(ctx, "") {
					switch {
					case err != nil && errors.Is(err, lease.ErrUnavailable) && !at.IsZero():
						return time.Since(at), nil
					case err != nil:
						return 0, err
					case ev.Kind == lease.Synced:
						at = link.hole(b)
					}
				}
				return 0, errors.New("the watch ended without an error")
			}},
		}
		names := make([]string, len(rows))
		for i, row := range rows {
			names[i] = row.name
		}
		interleaved(b, link.px, names, silenceHeartbeat, func(ctx context.Context, i, _ int) (time.Duration, error) { return rows[i].round(ctx) })
	})
}

// BenchmarkCompareStaleLeader measures, interleaved round by round, how
// long past a dead leader's Expires it is still reported current, behind a
// link blackholed a random phase within a heartbeat after Observe synced
// (so the stream stays silent, neither telling the expiry nor breaking
// before it): from the leader's Expires (in the bench's process; the
// server is in it too) to the report of no leader or the observation's
// error, in heartbeat intervals (0 if before Expires):
//
//   - expires-floor: a timer set at the Expires the observer was told: the
//     least any observer that does not ask again must do;
//   - observe-leasehttp: election.Elector.Observe through
//     leasehttp.Client.
func BenchmarkCompareStaleLeader(b *testing.B) {
	b.Run("c=1/interleaved", func(b *testing.B) {
		link := newSilentLink(b)
		const ttl = time.Second
		rows := []struct {
			name  string
			round func(ctx context.Context, key string) (time.Duration, error)
		}{
			{"expires-floor", func(ctx context.Context, key string) (time.Duration, error) {
				l, err := link.store.Acquire(ctx, key, "dead", ttl)
				if err != nil {
					return 0, err
				}
				fired := make(chan time.Time, 1)
				time.AfterFunc(time.Until(l.Expires), func() { fired <- time.Now() })
				link.hole(b)
				return max(0, (<-fired).Sub(l.Expires)), nil
			}},
			{"observe-leasehttp", func(ctx context.Context, key string) (time.Duration, error) {
				c, err := leasehttp.NewClient(link.url)
				if err != nil {
					return 0, err
				}
				defer c.Close()
				lc, err := lease.NewClient(c)
				if err != nil {
					return 0, err
				}
				e, err := election.New(lc, ttl)
				if err != nil {
					return 0, err
				}
				l, err := link.store.Acquire(ctx, key, "dead", ttl) // nobody renews it
				if err != nil {
					return 0, err
				}
				for ld, err := range e.Observe(ctx, key) {
					if err == nil && ld.Token == l.Token {
						link.hole(b)
						continue
					}
					if err != nil || ld.Token == 0 {
						return max(0, time.Since(l.Expires)), nil
					}
				}
				return 0, errors.New("Observe ended without a report")
			}},
		}
		names := make([]string, len(rows))
		for i, row := range rows {
			names[i] = row.name
		}
		interleaved(b, link.px, names, silenceHeartbeat, func(ctx context.Context, i, r int) (time.Duration, error) {
			return rows[i].round(ctx, fmt.Sprintf("leader-%d-%d", r, i))
		})
	})
}

// BenchmarkCompareCancel measures, interleaved round by round, how soon a
// caller that gives up a wait gets its answer from a hung server (the link
// blackholed both ways while the wait is at the server), from the cancel
// to the call's return:
//
//   - ctx-floor: a goroutine blocked on the context alone;
//   - campaign-leasehttp: election.Elector.Campaign through
//     leasehttp.Client, waiting at the server for a held key.
func BenchmarkCompareCancel(b *testing.B) {
	b.Run("c=1/interleaved", func(b *testing.B) {
		link := newSilentLink(b)
		c, err := leasehttp.NewClient(link.url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		lc, err := lease.NewClient(c)
		if err != nil {
			b.Fatal(err)
		}
		e, err := election.New(lc, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := link.store.Acquire(context.Background(), "held", "holder", time.Hour); err != nil {
			b.Fatal(err)
		}
		waiters := func() int {
			n, err := chaos.ServerWaiters(link.hs.URL)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
		rows := []struct {
			name string
			wait func(ctx context.Context) error
		}{
			{"ctx-floor", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
			{"campaign-leasehttp", func(ctx context.Context) error { _, err := e.Campaign(ctx, "held", "candidate"); return err }},
		}
		names := make([]string, len(rows))
		for i, row := range rows {
			names[i] = row.name
		}
		interleaved(b, link.px, names, 0, func(ctx context.Context, i, _ int) (time.Duration, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan time.Time, 1)
			var werr error
			go func() { werr = rows[i].wait(ctx); done <- time.Now() }()
			if rows[i].name != "ctx-floor" {
				poll.True(b, 10*time.Second, "the candidate's wait reaches the server", func() bool { return waiters() > 0 })
			}
			link.hole(b)
			at := time.Now()
			cancel()
			end := <-done
			if !errors.Is(werr, context.Canceled) {
				return 0, fmt.Errorf("%w, want context.Canceled", werr)
			}
			return end.Sub(at), nil
		})
	})
}

// interleaved plays rounds of the named rows, each round one of each row
// starting from the next row each round, calling round for row i in round
// r under a fresh context and px.Reset after it, and reports their
// latencies; with hb > 0 also each row's p99 in heartbeat intervals
// ("p99-hb").
func interleaved(b *testing.B, px *chaos.Proxies, names []string, hb time.Duration, round func(ctx context.Context, i, r int) (time.Duration, error)) {
	b.Helper()
	rounds := max(b.N, silenceRounds)
	lat := make([][]time.Duration, len(names))
	b.ResetTimer()
	start := time.Now()
	for r := range rounds {
		for k := range names {
			i := (r + k) % len(names)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			d, err := round(ctx, i, r)
			cancel()
			px.Reset()
			if err != nil {
				b.Fatalf("%s, round %d: %v", names[i], r, err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	out := make([]benchutil.Row, len(names))
	for i, name := range names {
		out[i] = benchutil.Row{Name: name, Latencies: lat[i]}
		if hb > 0 {
			out[i].Extra = map[string]float64{"p99-hb": float64(benchutil.Percentile(lat[i], 99)) / float64(hb)}
		}
	}
	benchutil.ReportRows(b, elapsed/time.Duration(rounds), out)
}
