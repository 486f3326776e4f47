// Package redistest starts throwaway redis-server processes for tests: one per
// Start, on a free 127.0.0.1 port, with its data in a temporary directory,
// stopped when the test ends.
//
// A server is durable by default (appendonly yes, appendfsync always), the
// configuration redisstore requires; Volatile starts one without persistence.
// Restart shuts the server down with SHUTDOWN (which flushes the AOF) and
// starts it again on the same directory and port; Kill ends it with SIGKILL,
// for crash tests.
//
// LEASE_TEST_REDIS_ADDR=host:port points every Start at an existing server
// instead. Such a server is never restarted, killed or reconfigured: tests
// that need that skip under -short and fail otherwise, and so does a test
// asking for a persistence configuration the server does not have.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvAddr names the environment variable that points tests at an existing
// Redis server (host:port) instead of starting their own.
const EnvAddr = "LEASE_TEST_REDIS_ADDR"

// Binary is the server executable looked up in PATH.
const Binary = "redis-server"

// startTimeout bounds how long a starting server may take to answer PING.
const startTimeout = 15 * time.Second

// Option configures a server started by Start.
type Option func(*config)

type config struct {
	volatile bool
	cluster  bool
	extra    [][]string
}

// Volatile starts a server without persistence (appendonly no, save ""): its
// data, token counters included, is gone after a restart.
func Volatile() Option { return func(c *config) { c.volatile = true } }

// Cluster starts the server in cluster mode as a one-node cluster owning all
// 16384 slots, so that code using redis.ClusterClient meets Cluster's rules
// (a script's keys must share a hash slot, or the server answers CROSSSLOT).
func Cluster() Option { return func(c *config) { c.cluster = true } }

// Config passes one more configuration directive to the server, as
// `--name value...` on its command line (for example "maxmemory-policy",
// "allkeys-lru", or "rename-command", "CONFIG", `""`). A test
// run against LEASE_TEST_REDIS_ADDR cannot reconfigure the shared server, so
// it skips under -short and fails otherwise.
func Config(name string, values ...string) Option {
	return func(c *config) { c.extra = append(c.extra, append([]string{"--" + name}, values...)) }
}

// Server is one Redis server for a test.
type Server struct {
	// Addr is the server's host:port.
	Addr string
	// Durable reports whether the server runs with appendonly yes and
	// appendfsync always.
	Durable bool

	external bool
	cluster  bool
	dir      string
	args     []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// Start returns a running server for t, stopped in t.Cleanup. If
// LEASE_TEST_REDIS_ADDR is set it returns that server instead, after checking
// that its persistence matches what was asked for. A missing redis-server
// binary fails t with an install hint, or skips it under -short.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if addr := os.Getenv(EnvAddr); addr != "" {
		return useExternal(t, addr, cfg)
	}
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if testing.Short() {
			t.Skipf("redistest: %s not found in PATH (skipped under -short)", Binary)
		}
		t.Fatalf("redistest: %s not found in PATH: install it (Debian: apt-get install redis-server; or run `make deps`), or set %s=host:port to use an existing server", Binary, EnvAddr)
	}

	s := &Server{Durable: !cfg.volatile, cluster: cfg.cluster, dir: t.TempDir()}
	base := []string{"--bind", "127.0.0.1", "--dir", s.dir, "--daemonize", "no",
		"--protected-mode", "no", "--logfile", filepath.Join(s.dir, "redis.log"),
		// The tests own the server: no background RDB snapshots.
		"--save", ""}
	if cfg.volatile {
		base = append(base, "--appendonly", "no")
	} else {
		base = append(base, "--appendonly", "yes", "--appendfsync", "always")
	}
	if cfg.cluster {
		base = append(base, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.dir, "nodes.conf"))
	}
	for _, directive := range cfg.extra {
		base = append(base, directive...)
	}

	// A free port can be taken between our probe and the server's bind, so
	// try a few.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: finding a free port: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.args = append([]string{"--port", strconv.Itoa(port)}, base...)
		if lastErr = s.launch(bin); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("redistest: starting %s: %v", Binary, lastErr)
	}
	t.Cleanup(func() { s.shutdown(false) })
	return s
}

func useExternal(t testing.TB, addr string, cfg config) *Server {
	t.Helper()
	s := &Server{Addr: addr, external: true}
	if len(cfg.extra) > 0 || cfg.cluster {
		s.needOwned(t, "a reconfigured server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	aof, err1 := configGet(ctx, c, "appendonly")
	fsync, err2 := configGet(ctx, c, "appendfsync")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("redistest: %s=%s: reading its persistence settings: %v", EnvAddr, addr, err)
	}
	s.Durable = aof == "yes" && fsync == "always"
	if s.Durable == cfg.volatile {
		want := "durable (appendonly yes, appendfsync always)"
		if cfg.volatile {
			want = "volatile (appendonly no)"
		}
		msg := fmt.Sprintf("redistest: the test needs a %s server, but %s=%s has appendonly %s, appendfsync %s; unset %s to let the test start its own",
			want, EnvAddr, addr, aof, fsync, EnvAddr)
		if testing.Short() {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
	return s
}

func configGet(ctx context.Context, c *redis.Client, name string) (string, error) {
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	return m[name], nil
}

// Client returns a go-redis client connected to the server, closed in
// t.Cleanup. For a Cluster server it talks to the one node directly.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ClusterClient returns a go-redis cluster client for a server started with
// Cluster, closed in t.Cleanup.
func (s *Server) ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	if !s.cluster {
		t.Fatal("redistest: ClusterClient on a server not started with Cluster()")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// External reports whether the server is the one LEASE_TEST_REDIS_ADDR names
// rather than one this package started.
func (s *Server) External() bool { return s.external }

// Restart shuts the server down with SHUTDOWN, which for a durable server
// flushes the AOF, and starts it again on the same directory and port; it
// also starts a server that Stop or Kill ended. It returns once the server
// answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.needOwned(t, "a restart")
	s.shutdown(false)
	bin, err := exec.LookPath(Binary)
	if err != nil {
		t.Fatalf("redistest: %s vanished from PATH: %v", Binary, err)
	}
	if err := s.launch(bin); err != nil {
		t.Fatalf("redistest: restarting %s on %s: %v", Binary, s.Addr, err)
	}
}

// Stop shuts the server down with SHUTDOWN and waits for it to exit.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.needOwned(t, "stopping the server")
	s.shutdown(false)
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.needOwned(t, "killing the server")
	s.shutdown(true)
}

// RequireOwned ends t — with a skip under -short, a failure otherwise —
// unless the server is one this package started: call it before doing what
// a shared server must not suffer (what says what that is, for the message),
// such as killing its clients.
func (s *Server) RequireOwned(t testing.TB, what string) {
	t.Helper()
	s.needOwned(t, what)
}

func (s *Server) needOwned(t testing.TB, what string) {
	t.Helper()
	if !s.external {
		return
	}
	msg := fmt.Sprintf("redistest: the test needs %s, which is not done to the existing server %s=%s; unset %s to let the test start its own",
		what, EnvAddr, s.Addr, EnvAddr)
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
}

// launch starts the server process and waits until it answers PING.
func (s *Server) launch(bin string) error {
	cmd := exec.Command(bin, s.args...)
	cmd.Dir = s.dir
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		if err == nil && s.cluster {
			err = clusterReady(ctx, c)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start: %v; log: %s", Binary, cmd.ProcessState, s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			s.shutdown(true)
			return fmt.Errorf("no answer to PING within %v: %v; log: %s", startTimeout, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clusterReady gives a cluster-mode server every slot (kept in nodes.conf
// across restarts) and reports whether the cluster state is ok yet.
func clusterReady(ctx context.Context, c *redis.Client) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if strings.Contains(info, "cluster_slots_assigned:0\r\n") {
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
			return err
		}
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster state is not ok yet")
	}
	return nil
}

// shutdown ends the running process, if any: SHUTDOWN (or, if that cannot be
// sent, SIGTERM, which Redis treats the same) unless kill, then SIGKILL if it
// lingers.
func (s *Server) shutdown(kill bool) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	if kill {
		_ = cmd.Process.Kill()
		<-exited
		return
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	// SHUTDOWN's reply is the connection closing; its error says nothing.
	err := c.Shutdown(ctx).Err()
	cancel()
	_ = c.Close()
	if err != nil && !isClosedConn(err) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func isClosedConn(err error) bool {
	s := err.Error()
	return strings.Contains(s, "EOF") || strings.Contains(s, "connection reset") || strings.Contains(s, "closed")
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
