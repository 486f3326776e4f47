// Package etcdtest starts throwaway etcd servers for tests, in process, with
// go.etcd.io/etcd/server/v3/embed: a single node (Start) for conformance
// tests and benchmarks, and a cluster (StartCluster) whose members can be
// killed and restarted on the same data directory for fault tests.
//
// Everything listens on 127.0.0.1 ports picked free at start, keeps its data
// in t.TempDir(), and is stopped in t.Cleanup. Logs go to a buffer that is
// printed only if the test failed.
//
// Setting LEASE_TEST_ETCD_ENDPOINTS (comma-separated client URLs) makes Start
// return those endpoints instead of starting a server; tests that share one
// must use their own key prefixes. StartCluster cannot kill members of an
// external cluster, so with the variable set it fails the test (or skips it
// under -short).
//
// Under -short every test that asks for etcd is skipped (`make short` runs
// without engines).
//
// Timing: heartbeat 10 ms and election 100 ms for a single node, 25 ms and
// 250 ms for a cluster (looser, because several engineers' tests share two
// cores and a missed heartbeat would trigger needless elections). etcd's
// minimum lease TTL is ceil(1.5 × election timeout) seconds: 1 s for both.
package etcdtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/poll"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EnvEndpoints names the environment variable that points tests at an
// existing etcd (comma-separated client URLs) instead of an embedded one.
const EnvEndpoints = "LEASE_TEST_ETCD_ENDPOINTS"

// ClusterHeartbeat and ClusterElection are the Raft heartbeat interval and
// election timeout of StartCluster's members: a new leader is elected
// within about two election timeouts of the old one's loss.
const (
	ClusterHeartbeat = 25 * time.Millisecond
	ClusterElection  = 250 * time.Millisecond
)

// startTimeout bounds how long a server or cluster may take to become ready.
const startTimeout = 30 * time.Second

// Start returns the client endpoints of a fresh single-node etcd, stopped
// when t ends, or those of LEASE_TEST_ETCD_ENDPOINTS if it is set. Each call
// starts its own node (about 100–300 ms); share one per test binary or test
// by calling it once and giving each subtest its own key prefix.
func Start(t testing.TB) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("etcdtest: -short: skipping a test that needs etcd")
	}
	if eps := external(); eps != nil {
		return eps
	}
	c := startCluster(t, 1, 10, 100)
	return c.Endpoints()
}

// external returns the endpoints of LEASE_TEST_ETCD_ENDPOINTS, or nil.
func external() []string {
	v := strings.TrimSpace(os.Getenv(EnvEndpoints))
	if v == "" {
		return nil
	}
	var eps []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// NewClient returns a clientv3 client for endpoints with a quiet logger,
// closed when t ends.
func NewClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: client for %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Cluster is a set of embedded etcd members on loopback. Its methods are
// safe for concurrent use.
type Cluster struct {
	t       testing.TB
	token   string
	initial string // the initial-cluster flag: name=peerURL,...
	logs    *logBuffer
	tickMs  uint
	elecMs  uint

	mu      sync.Mutex
	members []*member
}

type member struct {
	name      string
	dir       string
	clientURL url.URL
	peerURL   url.URL
	etcd      *embed.Etcd   // nil while stopped
	closed    chan struct{} // closed when the last Close finished
}

// StartCluster starts an n-member cluster (n ≥ 1) on loopback free ports with
// data in temp dirs, waits until it has a leader, and stops it when t ends.
// With LEASE_TEST_ETCD_ENDPOINTS set it fails t (skips under -short):
// fault tests need members they can kill.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("etcdtest: -short: skipping a test that needs an etcd cluster")
	}
	if external() != nil {
		t.Fatalf("etcdtest: %s is set, but this test kills and restarts members and needs a cluster of its own: unset it (or run with -short to skip)", EnvEndpoints)
	}
	if n < 1 {
		t.Fatalf("etcdtest: cluster of %d members", n)
	}
	return startCluster(t, n, uint(ClusterHeartbeat/time.Millisecond), uint(ClusterElection/time.Millisecond))
}

func startCluster(t testing.TB, n int, tickMs, elecMs uint) *Cluster {
	t.Helper()
	var lastErr error
	// A free port picked here may be taken by another process before etcd
	// binds it; try again with new ports.
	for range 3 {
		c, err := tryStartCluster(t, n, tickMs, elecMs)
		if err == nil {
			return c
		}
		lastErr = err
	}
	t.Fatalf("etcdtest: starting %d-member etcd: %v", n, lastErr)
	return nil
}

func tryStartCluster(t testing.TB, n int, tickMs, elecMs uint) (*Cluster, error) {
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	c := &Cluster{t: t, token: "etcdtest-" + hex.EncodeToString(tok[:]), logs: &logBuffer{}, tickMs: tickMs, elecMs: elecMs}
	base := t.TempDir()
	var initial []string
	for i := range n {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       fmt.Sprintf("%s/m%d", base, i),
			clientURL: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])},
			peerURL:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	c.initial = strings.Join(initial, ",")

	// Members of a new cluster wait for each other, so start them together.
	errs := make(chan error, n)
	for _, m := range c.members {
		go func() { errs <- c.start(m) }()
	}
	var firstErr error
	for range n {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		c.stopAll()
		return nil, firstErr
	}
	t.Cleanup(func() {
		c.stopAll()
		if t.Failed() {
			t.Logf("etcdtest: etcd logs (warn and above):\n%s", c.logs.String())
		}
	})
	if _, err := c.waitLeader(startTimeout); err != nil {
		return nil, err
	}
	return c, nil
}

// start starts m (fresh or on its existing data dir) and waits until it
// serves clients.
func (c *Cluster) start(m *member) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the data dir exists
	cfg.TickMs, cfg.ElectionMs = c.tickMs, c.elecMs
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.logs.logger(m.name))
	cfg.ListenMetricsUrls = nil
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s: %w", m.name, err)
	case <-time.After(startTimeout):
		e.Server.HardStop()
		e.Close()
		return fmt.Errorf("member %s not ready within %v", m.name, startTimeout)
	}
	c.mu.Lock()
	m.etcd = e
	m.closed = nil
	c.mu.Unlock()
	return nil
}

// Endpoints returns the client URLs of all members, running or not.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.clientURL.String()
	}
	return eps
}

// DataDir returns member i's data directory: a test that replaces it while
// the member is stopped (emptied, or an older copy put back) restarts the
// member on other data, as an operator's wipe or restore would.
func (c *Cluster) DataDir(i int) string { return c.members[i].dir }

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL.String() }

// Size returns the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Running reports whether member i is running.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].etcd != nil
}

// Leader waits up to 30 s for a running member that is the leader and
// returns its index; it fails t if there is none.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	i, err := c.waitLeader(startTimeout)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return i
}

func (c *Cluster) waitLeader(timeout time.Duration) (int, error) {
	leader := -1
	err := poll.Err(timeout, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, m := range c.members {
			if m.etcd == nil {
				continue
			}
			s := m.etcd.Server
			if s.Leader() != 0 && s.Leader() == s.MemberID() {
				leader = i
				return nil
			}
		}
		return errors.New("no leader among running members")
	})
	return leader, err
}

// Kill stops member i abruptly, as a crash would: Raft stops at once, with
// no leadership transfer, and its connections are cut. Its data dir stays
// for Restart. Killing a stopped member fails t.
func (c *Cluster) Kill(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	if e == nil {
		c.mu.Unlock()
		t.Fatalf("etcdtest: Kill(%d): member is not running", i)
	}
	m.etcd = nil
	closed := make(chan struct{})
	m.closed = closed
	c.mu.Unlock()
	// HardStop ends Raft now; Close then shuts the listeners, which can take
	// the request timeout while client streams drain, so it finishes in the
	// background and Restart waits for it.
	e.Server.HardStop()
	go func() {
		defer close(closed)
		e.Close()
	}()
}

// Stop stops member i gracefully (a leader hands over leadership first) and
// waits until it is down.
func (c *Cluster) Stop(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	if e == nil {
		c.mu.Unlock()
		t.Fatalf("etcdtest: Stop(%d): member is not running", i)
	}
	m.etcd = nil
	c.mu.Unlock()
	e.Close()
}

// Restart starts the stopped member i again on its data dir and ports, and
// waits until it serves clients.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	m := c.members[i]
	running, closed := m.etcd != nil, m.closed
	c.mu.Unlock()
	if running {
		t.Fatalf("etcdtest: Restart(%d): member is running", i)
	}
	if closed != nil {
		<-closed
	}
	// The ports are ours to reuse, but a port released a moment ago can
	// still be busy briefly.
	if err := poll.Err(5*time.Second, func() error { return c.start(m) }); err != nil {
		t.Fatalf("etcdtest: Restart(%d): %v", i, err)
	}
}

// stopAll stops every running member and waits for killed ones to finish.
func (c *Cluster) stopAll() {
	c.mu.Lock()
	var running []*embed.Etcd
	var closing []chan struct{}
	for _, m := range c.members {
		if m.etcd != nil {
			running = append(running, m.etcd)
			m.etcd = nil
		}
		if m.closed != nil {
			closing = append(closing, m.closed)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Server.HardStop() // no leadership transfers on the way out
			e.Close()
		}()
	}
	wg.Wait()
	for _, ch := range closing {
		<-ch
	}
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logBuffer keeps the last maxLog bytes of the members' logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const maxLog = 1 << 20

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len()+len(p) > maxLog {
		keep := b.buf.Bytes()[max(0, b.buf.Len()-maxLog/2):]
		rest := append([]byte(nil), keep...)
		b.buf.Reset()
		b.buf.WriteString("…(earlier logs dropped)\n")
		b.buf.Write(rest)
	}
	return b.buf.Write(p)
}

func (b *logBuffer) Sync() error { return nil }

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger(name string) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(b), zapcore.WarnLevel)
	return zap.New(core).Named(name)
}

// Client returns a quiet clientv3 client for all members' endpoints, closed
// when t ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewClient(t, c.Endpoints())
}

// leakWait is how long VerifyTestMain lets goroutines drain. The etcd
// server's peer transports (rafthttp and its prober) keep idle HTTP
// connections open after Close; they end on their read timeout of about 5 s.
const leakWait = 15 * time.Second

// etcdLeaks are goroutines of the etcd server itself that can outlive a
// member this package killed, for good. A peer's /version probe that
// reaches a member while HardStop and Close take it down waits in
// versionHandler for the read lock of the member's closed backend, which
// nobody releases any more (seen once in four make test runs, in the
// failover tests). It is etcd's goroutine, holding nothing of ours; any
// other goroutine left behind still fails the binary.
var etcdLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"),
}

// VerifyTestMain runs m's tests and then fails the binary if goroutines
// remain, like goleak.VerifyTestMain, but waits up to 15 s for them to end
// first: an embedded etcd's peer connections outlive its Close by a few
// seconds (not a leak of this repository's code: they end by themselves).
// etcd's own stuck probe handlers (etcdLeaks) are not counted. Use it as
// TestMain in packages whose tests start etcd.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	opts = append(slices.Clone(etcdLeaks), opts...)
	code := m.Run()
	if code == 0 {
		if err := poll.Err(leakWait, func() error { return goleak.Find(opts...) }); err != nil {
			fmt.Fprintf(os.Stderr, "etcdtest: goroutines still running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
