package background_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/background"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCloseEndsAndWaits: Close cancels the work's context, returns only
// once every goroutine has, and Go refuses work from then on, also when Go
// races Close (the race detector finds a sync.WaitGroup's Add during Wait).
func TestCloseEndsAndWaits(t *testing.T) {
	for range 100 {
		g := background.New()
		var running atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					g.Go(func(ctx context.Context) {
						running.Add(1)
						<-ctx.Done()
						running.Add(-1)
					})
				}
			})
		}
		g.Close()
		if n := running.Load(); n != 0 {
			t.Fatalf("%d goroutines still running after Close", n)
		}
		wg.Wait()
		if g.Go(func(context.Context) { t.Error("ran after Close") }) {
			t.Fatal("Go after Close reported that it ran")
		}
		g.Close() // idempotent
	}
}

// TestRetry: Retry tries until done, and no longer than until.
func TestRetry(t *testing.T) {
	g := background.New()
	defer g.Close()
	var tries atomic.Int32
	done := make(chan struct{})
	g.Retry(time.Now().Add(time.Minute), func(context.Context) bool {
		if tries.Add(1) == 3 {
			close(done)
			return true
		}
		return false
	})
	<-done
	// On the bubble's clock: the bound passes, then longer than the
	// longest pause.
	synctest.Test(t, func(t *testing.T) {
		inner := background.New()
		defer inner.Close()
		var n atomic.Int32
		inner.Retry(time.Now().Add(50*time.Millisecond), func(context.Context) bool { n.Add(1); return false })
		time.Sleep(time.Second)
		before := n.Load()
		time.Sleep(1200 * time.Millisecond)
		if after := n.Load(); after != before {
			t.Fatalf("a Retry bounded by 50 ms still tries a second later (%d tries, then %d)", before, after)
		}
	})
}
