package chaos_test

import (
	"context"

	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/leasehq/lease"

	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
	"github.com/leasehq/lease/tools/chaos"
)

// long reports whether the long form was asked for (make chaos).
func long() bool { return os.Getenv("LEASE_CHAOS_LONG") != "" }

// plan is the size of a run: the short form for make test, the long one for
// make chaos.
func plan(cfg chaos.Config) chaos.Config {
	if long() {
		cfg.Keys, cfg.Workers, cfg.Faults, cfg.PauseChance = 2, 3, 60, 0.01
	} else {
		cfg.Keys, cfg.Workers, cfg.Faults, cfg.PauseChance = 1, 3, len(chaos.AllFaults), 0.02
	}
	return cfg
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// boltHTTP is `lease serve` in process: a leasehttp.Server over a boltstore
// file on a fixed loopback port, which Restart stops (closing the file) and
// starts again on the same file and port.
type boltHTTP struct {
	path string
	addr string

	mu    sync.Mutex
	store *boltstore.Store
	ls    *leasehttp.Server
	hs    *http.Server
	done  chan struct{}
}

func startBoltHTTP(t testing.TB) *boltHTTP {
	t.Helper()
	b := &boltHTTP{path: filepath.Join(t.TempDir(), "lease.db"), addr: "127.0.0.1:0"}
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	return b
}

func (b *boltHTTP) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	store, err := boltstore.Open(b.path)
	if err != nil {
		return err
	}
	ls, err := leasehttp.NewServer(store, leasehttp.WithLogger(quiet))
	if err != nil {
		_ = store.Close()
		return err
	}
	var ln net.Listener
	// The port was ours a moment ago; give the kernel a few tries.
	for range 50 {
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		ls.Close()
		_ = store.Close()
		return err
	}
	b.addr = ln.Addr().String()
	b.store, b.ls = store, ls
	b.hs = &http.Server{Handler: ls, ErrorLog: slog.NewLogLogger(quiet.Handler(), slog.LevelError)}
	b.done = make(chan struct{})
	go func(hs *http.Server, done chan struct{}) {
		defer close(done)
		_ = hs.Serve(ln)
	}(b.hs, b.done)
	return nil
}

// stop ends the server abruptly (connections cut, no drain) and closes the
// file, as a crash of the process would, save for the kernel's page cache,
// which boltstore's fsync before every answer makes irrelevant.
func (b *boltHTTP) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hs == nil {
		return
	}
	b.ls.Close()
	_ = b.hs.Close()
	<-b.done
	_ = b.store.Close()
	b.hs, b.ls, b.store = nil, nil, nil
}

func (b *boltHTTP) engine(ttl time.Duration) chaos.Engine {
	return chaos.Engine{
		Name:  "bolt-http",
		Addrs: []string{b.addr},
		Connect: func(_ context.Context, addrs []string) (lease.Backend, func(), error) {
			c, err := leasehttp.NewClient("http://"+addrs[0],
				leasehttp.WithTimeout(2*ttl), leasehttp.WithWaitChunk(2*ttl))
			if err != nil {
				return nil, nil, err
			}
			return c, func() { _ = c.Close() }, nil
		},
		Restart: func(t testing.TB, down time.Duration) {
			b.stop()
			time.Sleep(down)
			if err := b.start(); err != nil {
				t.Fatalf("restarting the bolt server: %v", err)
			}
		},
	}
}

// redisEngine is redisstore on a durable throwaway redis-server, which
// Restart kills (SIGKILL: the AOF with appendfsync always must keep every
// token) and starts again on the same directory and port.
func redisEngine(t *testing.T) chaos.Engine {
	srv := redistest.Start(t)
	e := chaos.Engine{
		Name:  "redis",
		Addrs: []string{srv.Addr},
		Connect: func(ctx context.Context, addrs []string) (lease.Backend, func(), error) {
			s, err := redisstore.Open(ctx, "redis://"+addrs[0]+"/0")
			if err != nil {
				return nil, nil, err
			}
			return s, func() { _ = s.Close() }, nil
		},
	}
	if !srv.External() {
		e.Restart = func(t testing.TB, down time.Duration) {
			srv.Kill(t)
			time.Sleep(down)
			srv.Restart(t)
		}
	}
	return e
}

// pgEngine is pgstore on a throwaway PostgreSQL of the test's own, which
// Restart crashes (immediate shutdown: what is not yet flushed is lost, and
// the next start runs crash recovery) and starts again on the same data
// directory and port. On a server named by LEASE_TEST_POSTGRES_URL there is
// no restart; the faults are then the toxics (reset_peer cuts every pooled
// connection) and the pauses.
func pgEngine(t *testing.T) chaos.Engine {
	var (
		url     string
		restart func(t testing.TB, down time.Duration)
	)
	if os.Getenv(pgtest.EnvURL) != "" {
		url = pgtest.Start(t)
	} else {
		pg := pgtest.StartOwn(t)
		url = pg.URL
		restart = func(t testing.TB, down time.Duration) {
			pg.Crash(t)
			time.Sleep(down)
			pg.Restart(t)
		}
	}
	base, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	upstream := net.JoinHostPort(base.ConnConfig.Host, strconv.Itoa(int(base.ConnConfig.Port)))
	return chaos.Engine{
		Name:  "postgres",
		Addrs: []string{upstream},
		Connect: func(ctx context.Context, addrs []string) (lease.Backend, func(), error) {
			host, port, err := net.SplitHostPort(addrs[0])
			if err != nil {
				return nil, nil, err
			}
			p, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				return nil, nil, err
			}
			cfg := base.Copy()
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
			cfg.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return nil, nil, err
			}
			s, err := pgstore.New(pool)
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			return s, func() { s.Close(); pool.Close() }, nil
		},
		Restart: restart,
	}
}

// etcdEngine is etcdstore on a three-member embedded etcd cluster; Restart
// kills the leader (no leadership transfer) and starts it again on its data
// directory, so the cluster fails over while the member is down.
func etcdEngine(t *testing.T) chaos.Engine {
	c := etcdtest.StartCluster(t, 3)
	var addrs []string
	for _, ep := range c.Endpoints() {
		u, err := neturl.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, u.Host)
	}
	return chaos.Engine{
		Name:  "etcd",
		Addrs: addrs,
		Connect: func(ctx context.Context, addrs []string) (lease.Backend, func(), error) {
			eps := make([]string, len(addrs))
			for i, a := range addrs {
				eps[i] = "http://" + a
			}
			s, err := etcdstore.Open(ctx, eps)
			if err != nil {
				return nil, nil, err
			}
			return s, func() { _ = s.Close() }, nil
		},
		Restart: func(t testing.TB, down time.Duration) {
			i := c.Leader(t)
			c.Kill(t, i)
			time.Sleep(down)
			c.Restart(t, i)
		},
		// etcdstore holds an etcd lease of ceil(TTL) + 1 s, which a new
		// leader extends by about an election timeout (250 ms here).
		Linger: 2500 * time.Millisecond,
	}
}
