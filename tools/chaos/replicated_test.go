package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/serverproc"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/tools/chaos"
)

// The lease binary, built once for the tests that run `lease serve`
// replicas; removed by TestMain.
var leaseBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func leaseBinary(t testing.TB) string {
	t.Helper()
	leaseBin.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			leaseBin.err = fmt.Errorf("the go command is needed to build lease (put /usr/local/go/bin on PATH): %w", err)
			return
		}
		if leaseBin.dir, leaseBin.err = os.MkdirTemp("", "lease-chaos-bin-"); leaseBin.err != nil {
			return
		}
		leaseBin.path = filepath.Join(leaseBin.dir, "lease")
		out, err := exec.Command(goBin, "build", "-o", leaseBin.path, "github.com/leasehq/lease/cmd/lease").CombinedOutput()
		if err != nil {
			leaseBin.err = fmt.Errorf("go build lease: %w\n%s", err, out)
		}
	})
	if leaseBin.err != nil {
		t.Fatal(leaseBin.err)
	}
	return leaseBin.path
}

func removeLeaseBinary() {
	if leaseBin.dir != "" {
		_ = os.RemoveAll(leaseBin.dir)
	}
}

// replicaToken is the one bearer token of the tokens file every replica
// reads, as a deployment gives each replica the same file.
const replicaToken = "chaos-replicas-0123456789abcdef"

// replicaSet is n `lease serve --backend etcd://…` processes (the built
// binary) over one etcd cluster, each on a loopback port of its own that it
// keeps across restarts, so that a replica killed with SIGKILL comes back
// at the URL the clients list.
type replicaSet struct {
	bin, backend, tokens, dir string
	args                      []string // more flags of every replica
	ports                     []int

	mu    sync.Mutex
	procs []*serverproc.Process // nil while killed
}

func startReplicas(t *testing.T, n int, cluster *etcdtest.Cluster, prefix string) *replicaSet {
	t.Helper()
	var hosts []string
	for _, ep := range cluster.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	return startReplicasOf(t, n, "etcd://"+strings.Join(hosts, ",")+"/"+prefix)
}

// startCutAndWhole starts a one-member etcd cluster and two replicas under
// prefix: cut, whose link to etcd runs through px (a toxiproxy that a test
// blackholes to cut it from etcd), with args; and whole, which reaches
// etcd directly. px is closed when the test ends, before the replicas
// are stopped.
func startCutAndWhole(t *testing.T, prefix string, args ...string) (px *chaos.Proxies, cut, whole *replicaSet) {
	t.Helper()
	cluster := etcdtest.StartCluster(t, 1)
	px, err := chaos.NewProxies([]string{strings.TrimPrefix(cluster.Endpoint(0), "http://")})
	if err != nil {
		t.Fatal(err)
	}
	cut = startReplicasOf(t, 1, "etcd://"+px.Listen(0)+"/"+prefix, args...)
	whole = startReplicas(t, 1, cluster, prefix)
	// Registered after the replicas' cleanups, so run before them: a
	// replica cut from etcd stops at once once its link is gone.
	t.Cleanup(func() { px.Close() })
	return px, cut, whole
}

// startReplicasOf starts n replicas serving --backend backend.
func startReplicasOf(t *testing.T, n int, backend string, args ...string) *replicaSet {
	t.Helper()
	r := &replicaSet{bin: leaseBinary(t), dir: t.TempDir(), backend: backend, args: args}
	r.tokens = filepath.Join(r.dir, "tokens")
	if err := os.WriteFile(r.tokens, []byte(replicaToken+" *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, p := range r.procs {
			if p != nil {
				_ = p.Stop(syscall.SIGTERM, 5*time.Second, syscall.SIGKILL)
			}
			if t.Failed() {
				log, _ := os.ReadFile(r.logPath(i))
				t.Logf("replica %d's log:\n%s", i, serverproc.Tail(log))
			}
		}
	})
	r.procs = make([]*serverproc.Process, n)
	for i := range n {
		// A free port picked here may be taken before the replica binds
		// it: a few tries with new ports.
		var err error
		for range 3 {
			var port int
			if port, err = serverproc.FreePort(); err != nil {
				t.Fatal(err)
			}
			r.ports = append(r.ports[:i], port)
			if err = r.start(i); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *replicaSet) logPath(i int) string {
	return filepath.Join(r.dir, fmt.Sprintf("replica-%d.log", i))
}

func (r *replicaSet) url(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", r.ports[i]) }

// urls returns the replicas' URLs starting from the first-th, as a list
// for leasehttp.NewClient.
func (r *replicaSet) urls(first int) string {
	var us []string
	for k := range r.ports {
		us = append(us, r.url((first+k)%len(r.ports)))
	}
	return strings.Join(us, ",")
}

// start starts replica i on its port and waits until /readyz answers 200
// (the replica reaches etcd).
func (r *replicaSet) start(i int) error {
	log, err := os.OpenFile(r.logPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	args := append([]string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", r.ports[i]),
		"--backend", r.backend, "--auth-tokens-file", r.tokens, "--shutdown-timeout", "2s"}, r.args...)
	cmd := exec.Command(r.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	p, err := serverproc.Start(cmd, nil, syscall.SIGKILL)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	err = p.WaitReady(30*time.Second, func() error {
		resp, err := hc.Get(r.url(i) + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		_ = p.Stop(syscall.SIGKILL, time.Second, syscall.SIGKILL)
		b, _ := os.ReadFile(r.logPath(i))
		return fmt.Errorf("replica %d: %w\n%s", i, err, serverproc.Tail(b))
	}
	r.mu.Lock()
	r.procs[i] = p
	r.mu.Unlock()
	return nil
}

// kill ends replica i with SIGKILL, as a crash would: no drain, its
// connections reset, its etcd session left to expire.
func (r *replicaSet) kill(t testing.TB, i int) {
	t.Helper()
	r.mu.Lock()
	p := r.procs[i]
	r.procs[i] = nil
	r.mu.Unlock()
	if p == nil {
		t.Fatalf("replica %d is not running", i)
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.Exited()
}

// client returns a multi-endpoint client for the replicas, listing them
// from the first-th on.
func (r *replicaSet) client(t testing.TB, first int, opts ...leasehttp.ClientOption) *leasehttp.Client {
	t.Helper()
	c, err := leasehttp.NewClient(r.urls(first), append([]leasehttp.ClientOption{leasehttp.WithAuthToken(replicaToken)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The crashes of a replicated service.
const (
	killReplica    chaos.Fault = "kill_replica"     // kill -9 one lease serve replica, restarted when healed
	killEtcdLeader chaos.Fault = "kill_etcd_leader" // kill the etcd leader (no leadership transfer), restarted when healed
	// kill every etcd member at once and start them all again at once (a
	// power loss, a botched rolling restart): the outage is the restart,
	// and the heal does nothing more.
	restartEtcdCluster chaos.Fault = "restart_etcd_cluster"
)

// clientTimeout is the workers' leasehttp.WithTimeout: a request caught by
// a fault fails after it (an acquire then has an unknown outcome).
func clientTimeout(ttl time.Duration) time.Duration { return 2 * ttl }

// etcdTTL is the etcd lease TTL etcdstore gives a lease of ttl: whole
// seconds rounded up, plus one (etcdstore/pool.go).
func etcdTTL(ttl time.Duration) time.Duration {
	return (ttl+time.Second-1)/time.Second*time.Second + time.Second
}

// progressBound is how soon after a crash some worker must make progress
// (an accepted guarded write invoked after it), from the timings involved,
// not from runs:
//
//   - etcd elects a new leader within two election timeouts;
//   - a request caught by the fault fails after the client's timeout;
//   - a lease left behind by the fault — granted to an acquire whose answer
//     was lost, or whose holder's renewals failed meanwhile — and the queue
//     entries of a killed replica's waiters last until their etcd lease
//     expires: etcdstore's etcd TTL, which a new etcd leader extends by an
//     election timeout, plus etcd's 500 ms expiry check;
//   - the next waiter's claim and its write: one more client timeout.
func progressBound(ttl time.Duration) time.Duration {
	e := etcdtest.ClusterElection
	return 2*e + clientTimeout(ttl) + etcdTTL(ttl) + e + 500*time.Millisecond + clientTimeout(ttl)
}

// replicatedEngine is three `lease serve` replicas over a three-member
// etcd cluster, reached only through multi-endpoint leasehttp clients,
// each worker's listing the replicas from another one on so that the
// workers spread over them. Its crashes kill a random replica or the etcd
// leader; there are no proxies (Addrs is empty), so the toxics do nothing.
func replicatedEngine(t *testing.T, ttl time.Duration) chaos.Engine {
	cluster := etcdtest.StartCluster(t, 3)
	rs := startReplicas(t, 3, cluster, "chaos")
	next := 0
	return chaos.Engine{
		Name: "replicated",
		Connect: func(context.Context, []string) (lease.Backend, func(), error) {
			c, err := leasehttp.NewClient(rs.urls(next), leasehttp.WithAuthToken(replicaToken),
				leasehttp.WithTimeout(clientTimeout(ttl)), leasehttp.WithWaitChunk(2*ttl))
			next++
			if err != nil {
				return nil, nil, err
			}
			return c, func() { _ = c.Close() }, nil
		},
		Crashes: []chaos.Crash{
			{Kind: killReplica, Inject: func(t testing.TB, rng *rand.Rand) (string, func(testing.TB)) {
				i := rng.IntN(len(rs.ports))
				rs.kill(t, i)
				return fmt.Sprintf("kill -9 replica %d", i), func(t testing.TB) {
					if err := rs.start(i); err != nil {
						t.Fatalf("restarting replica %d: %v", i, err)
					}
				}
			}},
			{Kind: killEtcdLeader, Inject: func(t testing.TB, _ *rand.Rand) (string, func(testing.TB)) {
				i := cluster.Leader(t)
				cluster.Kill(t, i)
				return fmt.Sprintf("kill etcd leader m%d", i), func(t testing.TB) { cluster.Restart(t, i) }
			}},
			{Kind: restartEtcdCluster, Inject: func(t testing.TB, _ *rand.Rand) (string, func(testing.TB)) {
				for i := range cluster.Size() {
					cluster.Kill(t, i)
				}
				// Together: a member does not start until a quorum has.
				var wg sync.WaitGroup
				for i := range cluster.Size() {
					wg.Go(func() { cluster.Restart(t, i) })
				}
				wg.Wait()
				cluster.Leader(t)
				return "kill every etcd member and start them again", func(testing.TB) {}
			}},
		},
		// etcdstore holds an etcd lease of ceil(TTL) + 1 s, which a new
		// leader extends by about an election timeout (250 ms here).
		Linger: 2500 * time.Millisecond,
	}
}

// replicatedPlan is the run: two keys, three workers on each, the
// replicas' crashes and the pauses that make stale writers.
func replicatedPlan(e chaos.Engine, seed uint64, ttl time.Duration) chaos.Config {
	cfg := plan(chaos.Config{Engine: e, Seed: seed, TTL: ttl, Kinds: []chaos.Fault{chaos.Pause, killReplica, killEtcdLeader}})
	cfg.Keys, cfg.Workers = 2, 3
	if !long() {
		cfg.Faults = 4 // one of each, and one more at random
	}
	cfg.ProgressTimeout = progressBound(ttl)
	return cfg
}

// TestChaosReplicatedServe runs workers through multi-endpoint clients
// against three lease serve replicas over a three-member etcd cluster,
// killing replicas and the etcd leader: the guarded register must never
// accept a stale write, tokens must only rise per key, and after every
// crash (and every restart) a worker must make progress within
// progressBound, which it reports.
func TestChaosReplicatedServe(t *testing.T) {
	const ttl = 500 * time.Millisecond
	cfg := replicatedPlan(replicatedEngine(t, ttl), 6, ttl)
	t.Logf("progress bound asserted after each crash and each heal: %v", cfg.ProgressTimeout)
	res := runChaos(t, cfg)
	byKind := map[string][]time.Duration{}
	for _, r := range res.Stats.Recoveries {
		name := string(r.Fault)
		if r.Healed {
			name += " (healed)"
		}
		byKind[name] = append(byKind[name], r.After)
		if r.After > cfg.ProgressTimeout {
			t.Errorf("%s: progress %v after it, beyond the bound %v", name, r.After, cfg.ProgressTimeout)
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range byKind {
			if !yield(k) {
				return
			}
		}
	}) {
		ds := byKind[name]
		slices.Sort(ds)
		t.Logf("progress after %s: %d times, min %v, median %v, max %v (bound %v)", name, len(ds),
			ds[0].Round(time.Millisecond), ds[(len(ds)-1)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), cfg.ProgressTimeout)
	}
	if len(byKind[string(killReplica)]) == 0 || len(byKind[string(killEtcdLeader)]) == 0 {
		t.Errorf("recoveries measured: %v; want some after each crash", byKind)
	}
}

// TestChaosReplicatedNegativeControlUnguarded: the same replicas with the
// guard off. Paused workers write after their lease expired and another
// worker, through another replica, took the key: the checker must find
// the register history illegal.
func TestChaosReplicatedNegativeControlUnguarded(t *testing.T) {
	const ttl = 500 * time.Millisecond
	cfg := chaos.Config{Engine: replicatedEngine(t, ttl), Seed: 7, TTL: ttl, Workers: 3, Faults: 2,
		Kinds: []chaos.Fault{chaos.Pause, killReplica}, Unguarded: true, ProgressTimeout: progressBound(ttl)}
	if os.Getenv(chaos.EnvArtifacts) == "" {
		t.Setenv(chaos.EnvArtifacts, t.TempDir())
	}
	res := chaos.Run(t, cfg)
	requireLateAccepted(t, res.Stats.Pauses, res.Stats.Late)
	if res.Register.Result != porcupine.Illegal {
		t.Fatalf("with the guard off, the checker found the register history %s (%d operations, %d pauses, %d late writes taken)",
			res.Register.Result, res.Register.Ops, res.Stats.Pauses, res.Stats.Late.Accepted)
	}
	t.Logf("found: the register history of %d operations is %s; visualisation: %s", res.Register.Ops, res.Register.Result, res.Register.Visualization)
	if res.Grants.Result != porcupine.Ok {
		t.Errorf("the grant history is %s; visualisation %s", res.Grants.Result, res.Grants.Visualization)
	}
}

// TestReplicatedServe runs three lease serve replicas over a three-member
// etcd cluster and checks that they serve one set of leases: see each
// subtest.
func TestReplicatedServe(t *testing.T) {
	cluster := etcdtest.StartCluster(t, 3)
	rs := startReplicas(t, 3, cluster, "shared")
	t.Run("leases and waiting are shared", func(t *testing.T) { replicasShareLeases(t, cluster, rs) })
	t.Run("election across replicas", func(t *testing.T) { replicasElect(t, cluster, rs) })
	t.Run("watches across replicas", func(t *testing.T) { replicasWatch(t, rs) })
	t.Run("expiry watched through another replica", func(t *testing.T) { replicasWatchExpiry(t, rs) })
	// It kills replicas 0 and 2, and starts them again.
	t.Run("observing an election across replica deaths", func(t *testing.T) { replicasObserve(t, cluster, rs) })
	// Last: it kills replica 0.
	t.Run("a holder survives its replica's death", func(t *testing.T) { holderSurvivesReplicaDeath(t, rs) })
}

// replicasShareLeases: with etcdstore, a lease lives in etcd, not in the
// replica that granted it: acquired through one replica, it is renewed
// through a second and released through the third; and waiters queued
// through different replicas are served in the order they queued (etcd's
// FIFO queue, not one replica's).
func replicasShareLeases(t *testing.T, cluster *etcdtest.Cluster, rs *replicaSet) {
	// One client per replica, each listing only it.
	var via []lease.Backend
	for i := range 3 {
		c, err := leasehttp.NewClient(rs.url(i), leasehttp.WithAuthToken(replicaToken))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		via = append(via, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := via[0].Acquire(ctx, "job", "a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := via[1].Renew(ctx, l, 3*time.Second)
	if err != nil || r.Token != l.Token {
		t.Fatalf("renewing through replica 1 a lease acquired through replica 0: %+v, %v", r, err)
	}
	if got, err := via[2].Get(ctx, "job"); err != nil || got.Token != l.Token || got.TTL != 3*time.Second {
		t.Fatalf("replica 2 sees %+v, %v; want token %d with the renewed TTL 3s", got, err, l.Token)
	}

	// Two waiters, queued through replicas 1 and then 2, while replica 0's
	// client holds the key.
	type result struct {
		who string
		l   lease.Lease
		err error
	}
	got := make(chan result, 2)
	wait := func(b lease.Backend, who string) {
		l, err := b.(lease.WaitAcquirer).AcquireWait(ctx, "job", who, 5*time.Second)
		got <- result{who, l, err}
	}
	go wait(via[1], "first")
	waitQueued(t, cluster, "shared", "job", 1)
	go wait(via[2], "second")
	waitQueued(t, cluster, "shared", "job", 2)
	if err := via[2].Release(ctx, r); err != nil {
		t.Fatalf("releasing through replica 2 a lease acquired through replica 0: %v", err)
	}
	first := <-got
	if first.err != nil || first.who != "first" || first.l.Token <= l.Token {
		t.Fatalf("after the release the key went to %q (%+v, %v); want the waiter queued first, with a greater token than %d", first.who, first.l, first.err, l.Token)
	}
	select {
	case r := <-got:
		t.Fatalf("the second waiter got %+v, %v while the first holds the key", r.l, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := via[0].Release(ctx, first.l); err != nil {
		t.Fatalf("releasing through replica 0 a lease granted through replica 1: %v", err)
	}
	second := <-got
	if second.err != nil || second.l.Token <= first.l.Token {
		t.Fatalf("the second waiter: %+v, %v; want a token greater than %d", second.l, second.err, first.l.Token)
	}
	if err := via[1].Release(ctx, second.l); err != nil {
		t.Fatal(err)
	}
	if _, err := via[0].Get(ctx, "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the last release replica 0 answers %v, want ErrNotFound", err)
	}
}

// holderSurvivesReplicaDeath: a holder whose client lists replica 0 first
// keeps its lease when replica 0 is killed — its renewals move on to the
// next replica — and the same client acquires and releases through the
// others while replica 0 is down.
func holderSurvivesReplicaDeath(t *testing.T, rs *replicaSet) {
	lc, err := lease.NewClient(rs.client(t, 0, leasehttp.WithTimeout(time.Second)), lease.WithOwner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = time.Second
	h, err := lc.Acquire(ctx, "survivor", ttl)
	if err != nil {
		t.Fatal(err)
	}
	rs.kill(t, 0)
	killed := time.Now()
	// Several TTLs: only renewals through the other replicas keep it.
	select {
	case <-h.Done():
		t.Fatalf("the hold was lost %v after its replica died: %v", time.Since(killed).Round(time.Millisecond), h.Err())
	case <-time.After(3 * ttl):
	}
	other, err := lc.Acquire(ctx, "other", ttl)
	if err != nil {
		t.Fatalf("Acquire with replica 0 down: %v", err)
	}
	for _, x := range []*lease.Hold{h, other} {
		if err := x.Release(ctx); err != nil {
			t.Fatalf("Release of %s with replica 0 down: %v", x.Lease().Key, err)
		}
	}
}

// replicasElect: candidates campaigning through different replicas, each
// through a multi-endpoint client that lists another replica first, are
// elected in the order they queued, one at a time, with rising tokens;
// Leader through any replica names the current one. (Observe across
// replicas, which follows etcdstore's watch: replicasObserve.)
func replicasElect(t *testing.T, cluster *etcdtest.Cluster, rs *replicaSet) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var electors []*election.Elector
	for i := range 3 {
		lc, err := lease.NewClient(rs.client(t, i))
		if err != nil {
			t.Fatal(err)
		}
		e, err := election.New(lc, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		electors = append(electors, e)
	}
	first, err := electors[0].Campaign(ctx, "leader", "c0")
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		term *election.Term
		err  error
	}
	terms := []chan won{nil, make(chan won, 1), make(chan won, 1)}
	for i := 1; i < 3; i++ {
		go func() {
			term, err := electors[i].Campaign(ctx, "leader", fmt.Sprintf("c%d", i))
			terms[i] <- won{term, err}
		}()
		waitQueued(t, cluster, "shared", "leader", i)
	}
	prev := first
	for i := 1; i < 3; i++ {
		for j := range 3 {
			l, err := electors[j].Leader(ctx, "leader")
			if err != nil || l.Value != prev.Value() || l.Token != prev.Token() {
				t.Fatalf("Leader through replica %d = %+v, %v; want %s with token %d", j, l, err, prev.Value(), prev.Token())
			}
		}
		if err := prev.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-terms[i]
		if w.err != nil || w.term.Value() != fmt.Sprintf("c%d", i) || w.term.Token() <= prev.Token() {
			t.Fatalf("after %s resigned: %+v, %v; want c%d elected with a token above %d", prev.Value(), w.term, w.err, i, prev.Token())
		}
		if i == 1 {
			select {
			case w := <-terms[2]:
				t.Fatalf("c2 elected (%v) while c1 leads", w.err)
			default:
			}
		}
		prev = w.term
	}
	if err := prev.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := electors[1].Leader(ctx, "leader"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("after the last resignation Leader = %v, want ErrNoLeader", err)
	}
}

// waitQueued waits until n AcquireWait callers are queued in etcd for key
// under the etcdstore prefix: key has n+1 entries, the holder's and theirs.
func waitQueued(t *testing.T, cluster *etcdtest.Cluster, prefix, key string, n int) {
	t.Helper()
	cli := cluster.Client(t)
	poll.Until(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/"+prefix+"/e\x00"+key+"\x00", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && int(resp.Count) < n+1 {
			err = fmt.Errorf("%d entries of %d waiters and the holder", resp.Count, n)
		}
		return err
	})
}

// TestChaosReplicatedClusterRestart is TestChaosReplicatedServe's run with
// the whole etcd cluster killed and started again, at once, under the
// workers: tokens (etcd revisions, in the Raft log) must go on rising per
// key, the guarded register must accept no stale write, and the workers
// must make progress after each restart within progressBound of its end.
func TestChaosReplicatedClusterRestart(t *testing.T) {
	const ttl = 500 * time.Millisecond
	cfg := plan(chaos.Config{Engine: replicatedEngine(t, ttl), Seed: 11, TTL: ttl, Kinds: []chaos.Fault{chaos.Pause, restartEtcdCluster}})
	cfg.Keys, cfg.Workers = 2, 3
	if !long() {
		cfg.Faults = 3
	}
	cfg.ProgressTimeout = progressBound(ttl)
	res := runChaos(t, cfg)
	var ds []time.Duration
	for _, r := range res.Stats.Recoveries {
		if r.Fault == restartEtcdCluster && !r.Healed {
			ds = append(ds, r.After)
		}
	}
	if len(ds) == 0 {
		t.Fatalf("no progress measured after a cluster restart: %+v", res.Stats.Recoveries)
	}
	slices.Sort(ds)
	t.Logf("progress after a whole-cluster restart, from the kill: %d times, min %v, median %v, max %v (bound %v)",
		len(ds), ds[0].Round(time.Millisecond), ds[(len(ds)-1)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), cfg.ProgressTimeout)
}
