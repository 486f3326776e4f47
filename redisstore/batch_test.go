package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// pipelineCounter is a go-redis hook that counts the pipelines of script
// calls sent and the largest one. (go-redis sends other pipelines of its
// own, such as HELLO with CLIENT SETINFO on each new connection.)
type pipelineCounter struct {
	pipelines, largest atomic.Int64
}

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() != "evalsha" {
				return next(ctx, cmds)
			}
		}
		h.pipelines.Add(1)
		for n := int64(len(cmds)); ; {
			old := h.largest.Load()
			if n <= old || h.largest.CompareAndSwap(old, n) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

func newTestStore(t *testing.T, c redis.UniversalClient) *Store {
	t.Helper()
	s, err := New(c, WithNamespace("t-"+lease.NewID().Reveal()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConcurrentCallsSharePipelines runs many clients at once through one
// Store, on one server and through a ClusterClient (which splits a pipeline
// by hash slot): their calls must be combined into pipelines, and every
// client must still get exactly its own results (tokens 1, 2, 3, ... on its
// own key).
func TestConcurrentCallsSharePipelines(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		testSharePipelines(t, srv.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Cluster())
		testSharePipelines(t, srv.ClusterClient(t))
	})
}

func testSharePipelines(t *testing.T, c redis.UniversalClient) {
	s := newTestStore(t, c)
	hook := &pipelineCounter{} // after New, whose persistence check is a pipeline
	c.AddHook(hook)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const clients, rounds = 32, 50
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("combine/%d", w)
			for i := range rounds {
				l, err := s.Acquire(ctx, k, fmt.Sprintf("o%d", w), time.Minute)
				if err != nil {
					t.Errorf("client %d round %d: Acquire: %v", w, i, err)
					return
				}
				if l.Key != k || l.Token != lease.Token(i+1) {
					t.Errorf("client %d round %d: got %+v, want key %q token %d", w, i, l, k, i+1)
					return
				}
				if i%2 == 0 {
					if l, err = s.Renew(ctx, l, 2*time.Minute); err != nil || l.Token != lease.Token(i+1) {
						t.Errorf("client %d round %d: Renew: %+v, %v", w, i, l, err)
						return
					}
				}
				if err := s.Release(ctx, l); err != nil {
					t.Errorf("client %d round %d: Release: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if hook.largest.Load() < 2 {
		t.Fatalf("%d clients at once never shared a pipeline (%d pipelines, largest %d)",
			clients, hook.pipelines.Load(), hook.largest.Load())
	}
	t.Logf("%d pipelines, largest %d calls", hook.pipelines.Load(), hook.largest.Load())
}

// blockDirect pauses the server's writes (scripts included) and starts
// maxUnits releases, which then wait on the wire; it returns once they are
// in flight, so that further calls queue. unpause lets everything run.
func blockDirect(t *testing.T, s *Store, c *redis.Client, held []lease.Lease) (released chan error, unpause func()) {
	t.Helper()
	ctx := context.Background()
	// WRITE blocks every script but lets CLIENT UNPAUSE through (ALL,
	// go-redis' ClientPause, would block that too).
	if err := c.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause = func() {
		if err := c.ClientUnpause(context.Background()).Err(); err != nil {
			t.Errorf("CLIENT UNPAUSE: %v", err)
		}
	}
	released = make(chan error, len(held))
	for _, l := range held {
		go func() { released <- s.Release(ctx, l) }()
	}
	waitBatcher(t, s, func(b *batcher) bool { return b.units == maxUnits })
	return released, unpause
}

// waitBatcher polls the batcher's state until ok holds.
func waitBatcher(t *testing.T, s *Store, ok func(*batcher) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s.batch.mu.Lock()
		done := ok(s.batch)
		s.batch.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("batcher did not reach the expected state within 15 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueuedCallLeavesOnCancel checks that a call waiting in the queue
// returns when its context ends, while the calls ahead of it are still on
// the wire, and is then never sent.
func TestQueuedCallLeavesOnCancel(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "pausing the server")
	c := srv.Client(t)
	s := newTestStore(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var held []lease.Lease
	for i := range maxUnits {
		l, err := s.Acquire(ctx, fmt.Sprintf("ahead/%d", i), "h", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	released, unpause := blockDirect(t, s, c, held)

	qctx, qcancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := s.Acquire(qctx, "queued", "q", time.Minute)
		got <- err
	}()
	waitBatcher(t, s, func(b *batcher) bool { return len(b.queue) == 1 })
	qcancel()
	var err error
	select {
	case err = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("queued Acquire did not return within 15 s of its context's end")
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("queued Acquire after cancel: err = %v, want context.Canceled (and not ErrUnavailable)", err)
	}
	select {
	case err := <-released:
		t.Fatalf("a release ahead of the queued call finished (%v) while the server was paused: the test did not queue", err)
	default:
	}
	waitBatcher(t, s, func(b *batcher) bool { return len(b.queue) == 0 })
	unpause()
	for range held {
		if err := <-released; err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if _, err := s.Get(ctx, "queued"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get of the abandoned call's key: %v, want ErrNotFound (the call was sent after all)", err)
	}
}

// TestPipelineAfterScriptFlush checks the NOSCRIPT fallback of pipelined
// calls: after SCRIPT FLUSH a pipeline's EVALSHAs fail, and each call must
// then run alone (loading its script) instead of failing.
func TestPipelineAfterScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "pausing the server and flushing its scripts")
	c := srv.Client(t)
	s := newTestStore(t, c)
	hook := &pipelineCounter{} // after New, whose persistence check is a pipeline
	c.AddHook(hook)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var held []lease.Lease
	for i := range maxUnits {
		l, err := s.Acquire(ctx, fmt.Sprintf("ahead/%d", i), "h", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	released, unpause := blockDirect(t, s, c, held)
	const queued = 5
	acquired := make(chan error, queued)
	for i := range queued {
		go func() {
			_, err := s.Acquire(ctx, fmt.Sprintf("after-flush/%d", i), "q", time.Minute)
			acquired <- err
		}()
	}
	waitBatcher(t, s, func(b *batcher) bool { return len(b.queue) == queued })
	unpause()
	for range held {
		if err := <-released; err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	for range queued {
		if err := <-acquired; err != nil {
			t.Fatalf("pipelined Acquire after SCRIPT FLUSH: %v", err)
		}
	}
	if hook.largest.Load() < queued {
		t.Fatalf("largest pipeline %d calls, want the %d queued calls in one", hook.largest.Load(), queued)
	}
	for i := range queued {
		if _, err := s.Get(ctx, fmt.Sprintf("after-flush/%d", i)); err != nil {
			t.Fatalf("Get after-flush/%d: %v", i, err)
		}
	}
}

// TestCloseWhileCallsFinish: Close waits for the pipelines in flight while
// calls on the shared client keep finishing, and each finishing call may
// start a pipeline for the calls queued behind it. That start must not race
// Close's wait (a sync.WaitGroup forbids an Add from zero during its Wait;
// the race detector reports it).
func TestCloseWhileCallsFinish(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 30 {
		s := newTestStore(t, rdb)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := range 20 {
					l, err := s.Acquire(ctx, fmt.Sprintf("close/%d/%d", w, i), "o", time.Minute)
					if err == nil {
						_ = s.Release(ctx, l)
					}
				}
			})
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
