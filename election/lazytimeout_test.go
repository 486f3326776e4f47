package election

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

// TestLazyTimeoutIsATimeout: a lazyTimeout behaves as context.WithTimeout
// made when it is first asked: its deadline, its parent's values, Done and
// Err at the deadline, children that end with it, and stop as the cancel.
func TestLazyTimeoutIsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent := context.WithValue(context.Background(), ctxKey{}, "v")
		l := &lazyTimeout{parent: parent, timeout: time.Second}
		defer l.stop()
		time.Sleep(time.Minute) // not asked yet: the timeout has not started
		at := time.Now().Add(time.Second)
		if d, ok := l.Deadline(); !ok || !d.Equal(at) {
			t.Errorf("Deadline() = %v, %v; want %v, true", d, ok, at)
		}
		if v := l.Value(ctxKey{}); v != "v" {
			t.Errorf("Value = %v, want the parent's v", v)
		}
		child, cancel := context.WithCancel(l)
		defer cancel()
		time.Sleep(time.Second - time.Nanosecond)
		if l.Err() != nil || child.Err() != nil {
			t.Fatalf("ended before its deadline: %v, child %v", l.Err(), child.Err())
		}
		<-l.Done()
		<-child.Done()
		if !time.Now().Equal(at) {
			t.Errorf("Done at %v, want %v", time.Now(), at)
		}
		if !errors.Is(l.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Errorf("Err() = %v, child %v; want the deadline's", l.Err(), child.Err())
		}
	})
	t.Run("children attach", func(t *testing.T) {
		// A child of a context the package cannot see into is watched by
		// a goroutine of its own; a child of a lazyTimeout must be the
		// real context's child, as a backend's request contexts are.
		l := &lazyTimeout{parent: context.Background(), timeout: time.Hour}
		defer l.stop()
		before := runtime.NumGoroutine()
		var cancels []context.CancelFunc
		for range 100 {
			_, cancel := context.WithCancel(l)
			cancels = append(cancels, cancel)
		}
		if n := runtime.NumGoroutine() - before; n >= 50 {
			t.Errorf("100 children started %d goroutines", n)
		}
		for _, cancel := range cancels {
			cancel()
		}
	})
	t.Run("stopped unused", func(t *testing.T) {
		l := &lazyTimeout{parent: context.Background(), timeout: time.Hour}
		l.stop()
		select {
		case <-l.Done():
		default:
			t.Fatal("Done not closed after stop")
		}
		if !errors.Is(l.Err(), context.Canceled) {
			t.Errorf("Err() after stop = %v, want context.Canceled", l.Err())
		}
	})
	t.Run("stopped in use", func(t *testing.T) {
		l := &lazyTimeout{parent: context.Background(), timeout: time.Hour}
		done := l.Done()
		l.stop()
		<-done
		if !errors.Is(l.Err(), context.Canceled) {
			t.Errorf("Err() after stop = %v, want context.Canceled", l.Err())
		}
	})
}
