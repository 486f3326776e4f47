package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehq/lease/fence"
)

// TestMemoryCheckHonoursContextWhileWaiting: a Check waiting for another
// write to the same resource must give up when its context ends, not sit
// until that write finishes (a slow or stuck handler would otherwise hold
// every later request for the resource, whatever their deadlines).
func TestMemoryCheckHonoursContextWhileWaiting(t *testing.T) {
	g := fence.NewMemory(fence.AtLeast)
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- g.Check(context.Background(), "job", 1, func() error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	second := make(chan error, 1)
	go func() { second <- g.Check(ctx, "job", 2, func() error { ran = true; return nil }) }()
	select {
	case err := <-second:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting Check whose context ended: err = %v, want DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a Check whose context ended 5 s ago is still waiting for another write")
		close(release)
		<-second
		<-first
		return
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("the write of a Check that gave up ran")
	}
	if got := g.Highest("job"); got != 1 {
		t.Errorf("highest = %d, want 1", got)
	}
	// The resource is free again.
	if err := g.Check(context.Background(), "job", 2, func() error { return nil }); err != nil || g.Highest("job") != 2 {
		t.Errorf("Check after the wait: %v, highest %d", err, g.Highest("job"))
	}
}
