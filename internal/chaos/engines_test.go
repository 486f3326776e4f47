package chaos_test

import (
	"context"

	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/chaos"
	"github.com/leasehq/lease/internal/redistest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/redisstore"
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
