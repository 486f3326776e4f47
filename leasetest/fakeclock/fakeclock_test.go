package fakeclock_test

import (
	"fmt"
	"go/build"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease/leasetest/fakeclock"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// since is how far the clock has moved, for messages.
func since(c *fakeclock.Clock) time.Duration { return c.Now().Sub(start) }

// TestTimersFireInDeadlineOrder: Advance runs the timers it passes in
// deadline order, ties in the order they were set, each with the clock
// reading its deadline, and leaves the later ones pending.
func TestTimersFireInDeadlineOrder(t *testing.T) {
	c := fakeclock.New(start)
	var fired []string
	for _, tm := range []struct {
		name string
		d    time.Duration
	}{{"30ms", 30 * time.Millisecond}, {"10ms-a", 10 * time.Millisecond}, {"20ms", 20 * time.Millisecond}, {"10ms-b", 10 * time.Millisecond}} {
		c.AfterFunc(tm.d, func() { fired = append(fired, fmt.Sprintf("%s@%v", tm.name, since(c))) })
	}
	c.Advance(25 * time.Millisecond)
	if want := []string{"10ms-a@10ms", "10ms-b@10ms", "20ms@20ms"}; !slices.Equal(fired, want) {
		t.Errorf("Advance(25ms) fired %q, want %q", fired, want)
	}
	if got := since(c); got != 25*time.Millisecond {
		t.Errorf("after Advance(25ms) the clock reads +%v", got)
	}
	if got, want := c.Pending(), []time.Time{start.Add(30 * time.Millisecond)}; !slices.Equal(got, want) {
		t.Errorf("Pending = %v, want %v", got, want)
	}
	c.Advance(5 * time.Millisecond)
	if n := len(fired); n != 4 || fired[3] != "30ms@30ms" {
		t.Errorf("Advance to the last deadline fired %q", fired)
	}
}

// TestTimerSetByACallback: a callback may use the clock; a timer it sets
// within the Advance's reach fires in the same Advance.
func TestTimerSetByACallback(t *testing.T) {
	c := fakeclock.New(start)
	var fired []time.Duration
	c.AfterFunc(10*time.Millisecond, func() {
		fired = append(fired, since(c))
		c.AfterFunc(5*time.Millisecond, func() { fired = append(fired, since(c)) })
		c.AfterFunc(50*time.Millisecond, func() { fired = append(fired, since(c)) })
	})
	c.Advance(20 * time.Millisecond)
	if want := []time.Duration{10 * time.Millisecond, 15 * time.Millisecond}; !slices.Equal(fired, want) {
		t.Errorf("fired at %v, want %v", fired, want)
	}
	if got, want := c.Pending(), []time.Time{start.Add(60 * time.Millisecond)}; !slices.Equal(got, want) {
		t.Errorf("Pending = %v, want %v", got, want)
	}
}

// TestStop: a stopped timer never fires and is no longer pending; Stop
// reports true only for the call that stopped a pending timer.
func TestStop(t *testing.T) {
	c := fakeclock.New(start)
	var ran atomic.Int32
	stopped := c.AfterFunc(10*time.Millisecond, func() { t.Error("a stopped timer fired") })
	fires := c.AfterFunc(20*time.Millisecond, func() { ran.Add(1) })
	if !stopped.Stop() {
		t.Error("Stop of a pending timer = false")
	}
	if stopped.Stop() {
		t.Error("second Stop = true")
	}
	if got, want := c.Pending(), []time.Time{start.Add(20 * time.Millisecond)}; !slices.Equal(got, want) {
		t.Errorf("Pending = %v, want %v", got, want)
	}
	c.Advance(time.Second)
	if ran.Load() != 1 {
		t.Errorf("the timer left running fired %d times", ran.Load())
	}
	if fires.Stop() {
		t.Error("Stop of a fired timer = true")
	}
}

// TestSetAndAdvance: Set and Advance move the clock forward only, and run
// what falls due on the way.
func TestSetAndAdvance(t *testing.T) {
	c := fakeclock.New(start)
	var ran atomic.Int32
	c.AfterFunc(time.Second, func() { ran.Add(1) })
	c.Set(start.Add(-time.Hour))
	c.Advance(-time.Hour)
	if got := c.Now(); !got.Equal(start) {
		t.Errorf("after moves back the clock reads %v, want %v", got, start)
	}
	c.Set(start.Add(999 * time.Millisecond))
	if ran.Load() != 0 {
		t.Error("the timer fired before its deadline")
	}
	c.Set(start.Add(2 * time.Second))
	if ran.Load() != 1 || since(c) != 2*time.Second {
		t.Errorf("Set past the deadline: fired %d times, clock at +%v", ran.Load(), since(c))
	}
}

// TestJumpRunsNoTimer: Jump moves the clock and runs nothing; what fell due
// stays pending, can still be stopped, and runs at the next Advance with the
// clock as it reads.
func TestJumpRunsNoTimer(t *testing.T) {
	c := fakeclock.New(start)
	var at []time.Duration
	c.AfterFunc(10*time.Millisecond, func() { at = append(at, since(c)) })
	stopped := c.AfterFunc(20*time.Millisecond, func() { t.Error("a timer stopped after a Jump fired") })
	c.Jump(time.Hour)
	if since(c) != time.Hour || len(at) != 0 {
		t.Fatalf("after Jump(1h): clock at +%v, timers fired at %v; want +1h and none", since(c), at)
	}
	if n := len(c.Pending()); n != 2 {
		t.Errorf("%d timers pending after the Jump, want 2", n)
	}
	if !stopped.Stop() {
		t.Error("Stop of an overdue timer = false")
	}
	c.JumpTo(start)
	if since(c) != time.Hour {
		t.Errorf("JumpTo an earlier time moved the clock to +%v", since(c))
	}
	c.Advance(0)
	if want := []time.Duration{time.Hour}; !slices.Equal(at, want) {
		t.Errorf("overdue timer fired at %v, want %v", at, want)
	}
}

// TestConcurrentUse: timers set, stopped and fired from many goroutines
// each end exactly once, stopped or fired. Run with -race.
func TestConcurrentUse(t *testing.T) {
	c := fakeclock.New(start)
	const workers, each = 8, 200
	var fired, stopped atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tm := c.AfterFunc(time.Duration(1+(w*each+i)%50)*time.Millisecond, func() { fired.Add(1) })
				_ = c.Now()
				if i%3 == 0 && tm.Stop() {
					stopped.Add(1)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for moving := true; moving; {
		select {
		case <-done:
			moving = false
		default:
			c.Advance(time.Millisecond)
			c.Jump(time.Millisecond)
		}
	}
	c.Advance(time.Second)
	if got := fired.Load() + stopped.Load(); got != workers*each {
		t.Errorf("%d fired + %d stopped = %d timers, want %d", fired.Load(), stopped.Load(), got, workers*each)
	}
	if n := len(c.Pending()); n != 0 {
		t.Errorf("%d timers still pending", n)
	}
}

// TestImportsNoTesting: the lease binary's demo runs on this clock, and a
// program that imports the testing package carries its flags and code.
func TestImportsNoTesting(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pkg.Imports, "testing") {
		t.Errorf("fakeclock imports testing: %q", pkg.Imports)
	}
}
