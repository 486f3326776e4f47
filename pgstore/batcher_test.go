package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The batcher's own rules, without a database: exec is a function here.

func TestBatcherLoneOpGoesAtOnce(t *testing.T) {
	// A lone operation is sent by its caller without waiting for company:
	// exec runs (and here blocks) before any other operation exists.
	entered := make(chan struct{})
	release := make(chan struct{})
	b := newBatcher(2, 8, func(_ context.Context, calls []*call[int, int]) error {
		close(entered)
		<-release
		calls[0].res = calls[0].req * 2
		return nil
	})
	got := make(chan int, 1)
	go func() {
		res, _ := b.do(context.Background(), "k", 21)
		got <- res
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a lone operation was not sent within 10 s")
	}
	close(release)
	if res := <-got; res != 42 {
		t.Fatalf("result %d, want 42", res)
	}
}

func TestBatcherNoLostWakeups(t *testing.T) {
	// In a synctest bubble: the random pauses below reorder the goroutines
	// without costing real time, and a lost wakeup is a deadlock the bubble
	// reports at once.
	synctest.Test(t, func(t *testing.T) {
		// Operations arrive from many goroutines, some give up early, some
		// batches fail. Every operation returns; each returns its own result,
		// its batch's error or its context's end; batches hold distinct keys
		// and at most max operations; nothing is left queued or in flight.
		const workers, opsEach, keys, max = 32, 200, 10, 5
		batchErr := errors.New("batch failed")
		var batches, sentOps atomic.Int64
		var mu sync.Mutex
		sentIDs := map[int]bool{}
		b := newBatcher(2, max, func(ctx context.Context, calls []*call[int, int]) error {
			batches.Add(1)
			sentOps.Add(int64(len(calls)))
			seen := map[string]bool{}
			mu.Lock()
			for _, c := range calls {
				if seen[c.key] {
					t.Errorf("batch holds key %q twice", c.key)
				}
				seen[c.key] = true
				sentIDs[c.req] = true
			}
			mu.Unlock()
			if len(calls) > max {
				t.Errorf("batch of %d, max %d", len(calls), max)
			}
			if rand.IntN(4) == 0 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			}
			if rand.IntN(10) == 0 {
				return batchErr
			}
			for _, c := range calls {
				c.res = c.req + 1
			}
			return nil
		})
		var ok, failed, ended, endedUnsent atomic.Int64
		var wg, cancels sync.WaitGroup // a bubble ends only with its goroutines
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range opsEach {
					id := w*opsEach + i
					ctx, cancel := context.WithCancel(context.Background())
					if rand.IntN(8) == 0 {
						cancels.Go(func() {
							time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
							cancel()
						})
					}
					res, err := b.do(ctx, fmt.Sprint(rand.IntN(keys)), id)
					var ee *endedError
					switch {
					case err == nil:
						if res != id+1 {
							t.Errorf("op %d got result %d, want %d", id, res, id+1)
						}
						ok.Add(1)
					case errors.Is(err, batchErr):
						failed.Add(1)
					case errors.As(err, &ee) && errors.Is(err, context.Canceled):
						ended.Add(1)
						if !ee.sent {
							endedUnsent.Add(1)
							mu.Lock()
							if sentIDs[id] {
								t.Errorf("op %d reported unsent, but exec saw it", id)
							}
							mu.Unlock()
						}
					default:
						t.Errorf("op %d: unexpected error %v", id, err)
					}
					cancel()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			inflight, queued := b.state()
			t.Fatalf("operations still waiting after 60 s: %d in flight, %d queued", inflight, queued)
		}
		// exec ends before the last operations return: wait for the batcher
		// to settle.
		eventually(t, 10*time.Second, "batcher did not settle", func() bool {
			inflight, queued := b.state()
			return inflight == 0 && queued == 0
		})
		cancels.Wait()
		if n := ok.Load() + failed.Load() + ended.Load(); n != workers*opsEach {
			t.Fatalf("%d operations returned, want %d", n, workers*opsEach)
		}
		if batches.Load() >= sentOps.Load() {
			t.Errorf("%d batches for %d operations: nothing was batched", batches.Load(), sentOps.Load())
		}
		t.Logf("%d ok, %d in failed batches, %d gave up (%d before sending); %d batches for %d sent",
			ok.Load(), failed.Load(), ended.Load(), endedUnsent.Load(), batches.Load(), sentOps.Load())
	})
}

func TestBatcherContextEnds(t *testing.T) {
	// Queued, an operation whose context ends leaves unsent; in flight, it
	// returns at once with its outcome unknown while the others in its
	// batch still get their answers.
	release := make(chan struct{})
	var execs atomic.Int32
	var saw sync.Map
	b := newBatcher(1, 8, func(ctx context.Context, calls []*call[string, string]) error {
		execs.Add(1)
		for _, c := range calls {
			saw.Store(c.key, true)
		}
		<-release
		for _, c := range calls {
			c.res = "done " + c.key
		}
		return nil
	})
	bg := context.Background()
	first := make(chan error, 1)
	go func() { _, err := b.do(bg, "first", "first"); first <- err }()
	eventually(t, 10*time.Second, "first not in flight", func() bool { n, _ := b.state(); return n == 1 })

	queuedCtx, cancelQueued := context.WithCancel(bg)
	gaveUp := make(chan error, 1)
	go func() { _, err := b.do(queuedCtx, "quitter", "quitter"); gaveUp <- err }()
	waitQueued(t, 1, b.state)
	cancelQueued()
	var ee *endedError
	if err := <-gaveUp; !errors.As(err, &ee) || ee.sent || !errors.Is(err, context.Canceled) {
		t.Fatalf("queued op whose context ended: %v, want an unsent endedError", err)
	}
	if _, q := b.state(); q != 0 {
		t.Fatalf("%d ops queued after the quitter left", q)
	}

	// Two ops queue behind first and go out together; one gives up.
	impatientCtx, cancelImpatient := context.WithCancel(bg)
	impatient := make(chan error, 1)
	patient := make(chan string, 1)
	go func() { _, err := b.do(impatientCtx, "impatient", "impatient"); impatient <- err }()
	go func() { res, _ := b.do(bg, "patient", "patient"); patient <- res }()
	waitQueued(t, 2, b.state)
	release <- struct{}{} // first's batch ends; the next is sent and blocks
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "second batch not sent", func() bool { return execs.Load() == 2 })
	cancelImpatient()
	if err := <-impatient; !errors.As(err, &ee) || !ee.sent || !errors.Is(err, context.Canceled) {
		t.Fatalf("in-flight op whose context ended: %v, want a sent endedError", err)
	}
	close(release)
	if res := <-patient; res != "done patient" {
		t.Fatalf("patient op got %q", res)
	}
	if _, ok := saw.Load("quitter"); ok {
		t.Fatal("the op that gave up while queued was sent")
	}
}
