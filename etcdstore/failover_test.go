package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// failoverRun is one run of TestFailover's workload.
type failoverRun struct {
	name    string
	guarded bool
	dur     time.Duration
	kills   int

	guard *fence.Memory // guarded runs

	mu        sync.Mutex
	accepted  []lease.Token // tokens of accepted writes, in the order the resource applied them
	acceptAt  []time.Time
	acquired  []time.Time // when workers' acquisitions returned
	tokens    map[lease.Token]string
	stale     int // unguarded: writes applied with a token older than one applied before
	rejected  int // guarded: stalled writes the guard rejected
	highest   lease.Token
	faults    []time.Time // kills and restarts
	errorsSaw map[string]int
}

const failoverTTL = time.Second

// TestFailover runs 8 workers (each a lease.Client over its own etcdstore
// and etcd client, connected to all members) contending for one key and
// writing through a guard, while the leader is killed and restarted and the
// workers' connections are closed and reopened; a ninth worker acquires
// with the backend alone (no renewal) and stalls past the TTL before
// writing, like a paused process. The guard must reject every stale write,
// accepted tokens must strictly rise, and work must resume after each fault.
// The same workload without the guard must show a stale overwrite (the
// negative control: the faults and stalls are real).
func TestFailover(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	guarded := &failoverRun{name: "guarded", guarded: true, dur: 24 * time.Second, kills: 3, guard: fence.NewMemory(fence.Strict)}
	guarded.run(t, c)
	guarded.check(t)

	unguarded := &failoverRun{name: "unguarded", dur: 9 * time.Second, kills: 1}
	unguarded.run(t, c)
	if unguarded.stale == 0 {
		t.Errorf("negative control: without the guard no stale write was applied in %v (%d writes): the run did not exercise stale holders", unguarded.dur, len(unguarded.accepted))
	} else {
		t.Logf("negative control: without the guard %d stale writes were applied", unguarded.stale)
	}
}

func (r *failoverRun) run(t *testing.T, c *etcdtest.Cluster) {
	r.tokens = make(map[lease.Token]string)
	r.errorsSaw = make(map[string]int)
	prefix := uniquePrefix(t)
	key := "failover-" + r.name
	ctx, cancel := context.WithTimeout(context.Background(), r.dur)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx, t, c.Endpoints(), prefix, key, w)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.staller(ctx, t, c.Endpoints(), prefix, key)
	}()

	// Faults, from the test goroutine (the cluster's methods may fail t):
	// kill the leader, let the rest elect another and serve, restart it.
	start := time.Now()
	gap := r.dur / time.Duration(r.kills+1)
	for i := range r.kills {
		time.Sleep(time.Until(start.Add(gap * time.Duration(i+1)).Add(-gap / 2)))
		leader := c.Leader(t)
		r.fault()
		c.Kill(t, leader)
		time.Sleep(gap / 3)
		c.Restart(t, leader)
		r.fault()
	}
	wg.Wait()
	t.Logf("%s: %d acquisitions, %d accepted writes, %d stalled writes rejected, %d stale writes applied; errors seen: %v",
		r.name, len(r.acquired), len(r.accepted), r.rejected, r.stale, r.errorsSaw)
}

func (r *failoverRun) fault() {
	r.mu.Lock()
	r.faults = append(r.faults, time.Now())
	r.mu.Unlock()
}

func (r *failoverRun) sawError(err error) {
	var kind string
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		kind = "context"
	case errors.Is(err, lease.ErrUnavailable):
		kind = "unavailable"
	case errors.Is(err, lease.ErrLost):
		kind = "lost"
	case errors.Is(err, lease.ErrNotHeld):
		kind = "not-held"
	case errors.Is(err, lease.ErrStaleToken):
		kind = "stale"
	default:
		kind = err.Error()
	}
	r.mu.Lock()
	r.errorsSaw[kind]++
	r.mu.Unlock()
}

// write applies token's write to the resource, through the guard if the run
// has one. It reports whether the write was applied.
func (r *failoverRun) write(ctx context.Context, token lease.Token) (bool, error) {
	apply := func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if token < r.highest {
			r.stale++
		}
		r.highest = max(r.highest, token)
		r.accepted = append(r.accepted, token)
		r.acceptAt = append(r.acceptAt, time.Now())
		return nil
	}
	if !r.guarded {
		return true, apply()
	}
	err := r.guard.Check(context.WithoutCancel(ctx), "resource", token, apply)
	return err == nil, err
}

// connect opens an etcd client on all endpoints and a Store on it.
func connect(ctx context.Context, endpoints []string, prefix string) (*clientv3.Client, *etcdstore.Store, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	s, err := etcdstore.New(cli, etcdstore.WithPrefix(prefix))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return cli, s, nil
}

func (r *failoverRun) worker(ctx context.Context, t *testing.T, endpoints []string, prefix, key string, w int) {
	var last lease.Token
	for ctx.Err() == nil {
		cli, s, err := connect(ctx, endpoints, prefix)
		if err != nil {
			r.sawError(err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		lc, err := lease.NewClient(s, lease.WithOwner(fmt.Sprintf("worker-%d", w)))
		if err != nil {
			t.Error(err)
			return
		}
		// Drop the connection after a while, holding or not, and reconnect.
		reconnect := time.Now().Add(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
		for ctx.Err() == nil && time.Now().Before(reconnect) {
			actx, cancel := context.WithTimeout(ctx, 3*time.Second)
			h, err := lc.Acquire(actx, key, failoverTTL)
			cancel()
			if err != nil {
				r.sawError(err)
				continue
			}
			tok := h.Token()
			r.mu.Lock()
			r.acquired = append(r.acquired, time.Now())
			if prev, dup := r.tokens[tok]; dup {
				t.Errorf("token %d issued twice: to %s and worker-%d (I1)", tok, prev, w)
			}
			r.tokens[tok] = fmt.Sprintf("worker-%d", w)
			r.mu.Unlock()
			if tok <= last {
				t.Errorf("worker-%d: token %d after its previous %d (I1)", w, tok, last)
			}
			last = tok
			if _, err := r.write(h.Context(), tok); err != nil {
				r.sawError(err)
				if r.guarded && errors.Is(err, lease.ErrStaleToken) && h.Err() == nil {
					t.Errorf("worker-%d: the guard rejected token %d of a lease its client still holds: %v", w, tok, err)
				}
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := h.Release(rctx); err != nil {
				r.sawError(err)
			}
			cancel()
		}
		_ = s.Close()
		_ = cli.Close()
	}
}

// staller acquires with the backend directly (no background renewal), then
// stalls past the TTL — until someone else has acquired — before writing,
// like a process paused by GC or swap.
func (r *failoverRun) staller(ctx context.Context, t *testing.T, endpoints []string, prefix, key string) {
	cli, s, err := connect(ctx, endpoints, prefix)
	for err != nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		cli, s, err = connect(ctx, endpoints, prefix)
	}
	if err != nil {
		return
	}
	defer cli.Close()
	defer s.Close()
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		l, err := s.AcquireWait(actx, key, "staller", failoverTTL)
		cancel()
		if err != nil {
			r.sawError(err)
			continue
		}
		// Stall until a newer token has written (or the run ends).
		for ctx.Err() == nil {
			r.mu.Lock()
			passed := r.highest > l.Token
			r.mu.Unlock()
			if passed {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		applied, err := r.write(ctx, l.Token)
		if r.guarded {
			if applied {
				t.Errorf("the guard accepted the stalled write of token %d after a newer token had written", l.Token)
			} else if errors.Is(err, lease.ErrStaleToken) {
				r.mu.Lock()
				r.rejected++
				r.mu.Unlock()
			}
		}
	}
}

func (r *failoverRun) check(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i < len(r.accepted); i++ {
		if r.accepted[i] <= r.accepted[i-1] {
			t.Errorf("%s: accepted token %d after %d (write %d): a stale write got through", r.name, r.accepted[i], r.accepted[i-1], i)
		}
	}
	if r.rejected == 0 {
		t.Errorf("%s: no stalled write was rejected: the run did not exercise the guard", r.name)
	}
	// Progress after every kill and every restart.
	for i, f := range r.faults {
		if !slices.ContainsFunc(r.acceptAt, func(at time.Time) bool { return at.After(f) }) {
			t.Errorf("%s: no accepted write after fault %d at %v", r.name, i, f.Format(time.StampMilli))
		}
	}
	if len(r.acquired) < 2 {
		t.Fatalf("%s: %d acquisitions", r.name, len(r.acquired))
	}
	times := slices.Clone(r.acquired)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	var at time.Time
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d > longest {
			longest, at = d, times[i-1]
		}
	}
	var near string
	for i, f := range r.faults {
		if d := at.Sub(f); d > -2*time.Second && d < 5*time.Second {
			near = fmt.Sprintf(" (%v after fault %d)", d.Round(time.Millisecond), i)
		}
	}
	t.Logf("%s: longest hand-off gap %v%s, over %d acquisitions and %d faults", r.name, longest.Round(time.Millisecond), near, len(times), len(r.faults))
}
