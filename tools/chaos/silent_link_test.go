package chaos_test

import (
	"context"
	"errors"
	"iter"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
	"github.com/leasehq/lease/tools/chaos"
)

// blackhole makes px drop everything both ways while keeping its
// connections open (toxiproxy's timeout toxic with no timeout), as a
// network that drops every packet does.
func blackhole(t *testing.T, px *chaos.Proxies) {
	t.Helper()
	if err := px.Add(chaos.Toxic{Name: "down", Type: "timeout", Stream: "downstream", Attributes: map[string]int64{"timeout": 0}},
		chaos.Toxic{Name: "up", Type: "timeout", Stream: "upstream", Attributes: map[string]int64{"timeout": 0}}); err != nil {
		t.Fatal(err)
	}
}

// TestWatchOverSilentLink watches each engine store through a proxy, then
// blackholes the proxy and makes a change through another store on the
// engine directly. The watch must end with ErrUnavailable within its
// store's bound (a silence limit and a ping's), not go on telling the
// state from before the change: pgstore's listening connection used to
// wait for good (the hunt gave up after 40 s), where redisstore's
// subscription pings after 5 s of silence and etcdstore's watch (since
// this test) asks for progress.
func TestWatchOverSilentLink(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bound    time.Duration
		upstream func(t *testing.T) (addr string, open func(t *testing.T, addr string) lease.Backend)
	}{
		{"postgres", 15 * time.Second, pgOverAddr},
		{"redis", 15 * time.Second, func(t *testing.T) (string, func(*testing.T, string) lease.Backend) {
			return redistest.Start(t).Addr, func(t *testing.T, addr string) lease.Backend {
				s, err := redisstore.Open(context.Background(), "redis://"+addr+"/0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}},
		{"etcd", 10 * time.Second, func(t *testing.T) (string, func(*testing.T, string) lease.Backend) {
			return strings.TrimPrefix(etcdtest.Start(t)[0], "http://"), func(t *testing.T, addr string) lease.Backend {
				s, err := etcdstore.Open(context.Background(), []string{"http://" + addr}, etcdstore.WithPrefix("/silent/"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upstream, open := tc.upstream(t)
			px, err := chaos.NewProxies([]string{upstream})
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			cut, direct := open(t, px.Listen(0)), open(t, upstream)
			st := follow(t, "the watch over the silent link", func(ctx context.Context) iter.Seq2[lease.Event, error] {
				return cut.(lease.Watcher).Watch(ctx, "silent/")
			})
			if ev := st.event(replicaWait, "synced"); ev.Kind != lease.Synced {
				t.Fatalf("first event %+v, want synced", ev)
			}
			blackhole(t, px)
			holed := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := direct.Acquire(ctx, "silent/x", "o", time.Minute); err != nil {
				t.Fatal(err)
			}
			it := st.next(tc.bound, "the end of the watch")
			if !errors.Is(it.err, lease.ErrUnavailable) {
				t.Fatalf("the watch over the silent link told %+v, %v; want it to end with ErrUnavailable", it.v, it.err)
			}
			t.Logf("ended %v after the cut: %v", it.at.Sub(holed).Round(time.Millisecond), it.err)
		})
	}
}

// pgOverAddr is the shared throwaway PostgreSQL's address, and how to open
// a pgstore on it through another address.
func pgOverAddr(t *testing.T) (string, func(*testing.T, string) lease.Backend) {
	base, err := pgxpool.ParseConfig(pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	upstream := net.JoinHostPort(base.ConnConfig.Host, strconv.Itoa(int(base.ConnConfig.Port)))
	return upstream, func(t *testing.T, addr string) lease.Backend {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Fatal(err)
		}
		cfg := base.Copy()
		cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.New(pool, pgstore.AllowVolatile())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(); pool.Close() })
		return s
	}
}
