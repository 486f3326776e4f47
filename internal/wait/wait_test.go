package wait_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease/internal/wait"
)

const (
	ms      = time.Millisecond
	pollMin = 5 * ms
	pollMax = 500 * ms
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// waits calls Held n times with the same hint and returns the waits.
func waits(p *wait.Pacer, n int, now, expires time.Time) []time.Duration {
	var got []time.Duration
	for range n {
		got = append(got, p.Held(now, expires))
	}
	return got
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPacerDoublesFromMinToMax(t *testing.T) {
	p := wait.NewPacer(pollMin, pollMax, nil)
	got := waits(p, 9, t0, time.Time{})
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 500 * ms, 500 * ms}
	if !equal(got, want) {
		t.Errorf("waits without a hint = %v, want %v", got, want)
	}
	p.Reset()
	if got := p.Held(t0, time.Time{}); got != pollMin {
		t.Errorf("after Reset the wait is %v, want %v", got, pollMin)
	}
}

func TestPacerJitterSpreadsOverTheLowerHalf(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{
		{0, 20 * ms},
		{0.5, 30 * ms},
		{0.999, 39980 * time.Microsecond},
	} {
		p := wait.NewPacer(40*ms, pollMax, func() float64 { return tc.r })
		if got := p.Held(t0, time.Time{}); got != tc.want {
			t.Errorf("jitter %v: wait %v, want %v", tc.r, got, tc.want)
		}
	}
}

// A maximum of "no cap to speak of" must not overflow into a zero or
// negative backoff, which would turn waiting into a hot loop.
func TestPacerHugeMaximumNeverOverflows(t *testing.T) {
	p := wait.NewPacer(ms, time.Duration(math.MaxInt64), nil)
	prev := time.Duration(0)
	for i := range 200 {
		got := p.Held(t0, time.Time{})
		if got < prev || got <= 0 {
			t.Fatalf("wait %d is %v after %v: the backoff overflowed", i, got, prev)
		}
		prev = got
	}
}

func TestPacerExpiryHintShortensTheWait(t *testing.T) {
	p := wait.NewPacer(pollMin, pollMax, nil)
	waits(p, 8, t0, time.Time{}) // backoff at its 500 ms maximum
	if got := p.Held(t0, t0.Add(20*ms)); got != 21*ms {
		t.Errorf("holder expiring in 20 ms: wait %v, want 21ms (just after it)", got)
	}
	if got := p.Held(t0, t0.Add(time.Microsecond)); got != pollMin {
		t.Errorf("holder expiring in 1µs: wait %v, want the minimum %v", got, pollMin)
	}
	if got := p.Held(t0, t0.Add(time.Hour)); got != pollMax {
		t.Errorf("holder expiring in an hour: wait %v, want the backoff %v", got, pollMax)
	}
}

// An expiry already past on the waiter's clock while the key is still held
// means the clocks disagree; the backoff, not the hint, must pace the tries.
func TestPacerIgnoresAnExpiryAlreadyPast(t *testing.T) {
	p := wait.NewPacer(pollMin, pollMax, nil)
	got := waits(p, 5, t0, t0.Add(-time.Hour))
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms}
	if !equal(got, want) {
		t.Errorf("waits under skew = %v, want the backoff %v", got, want)
	}
}

func TestPacerBoundsANotificationWait(t *testing.T) {
	p := wait.NewPacer(pollMin, pollMax, nil)
	if got := p.Bound(t0, time.Time{}, 5*time.Second); got != 5*time.Second {
		t.Errorf("no hint: bound %v, want the limit 5s", got)
	}
	if got := p.Bound(t0, t0.Add(100*ms), 5*time.Second); got != 101*ms {
		t.Errorf("holder expiring in 100 ms: bound %v, want 101ms", got)
	}
	// Skew: each bound is the growing backoff, not the limit and not the minimum.
	q := wait.NewPacer(pollMin, pollMax, nil)
	var got []time.Duration
	for range 4 {
		got = append(got, q.Bound(t0, t0.Add(-time.Minute), 5*time.Second))
	}
	if want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms}; !equal(got, want) {
		t.Errorf("bounds under skew = %v, want %v", got, want)
	}
}

// elapsed runs f inside a synctest bubble's virtual time and returns how
// long it took on that clock.
func elapsed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

func TestLoopPollsAsThePacerSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := wait.Loop{Pacer: wait.NewPacer(pollMin, pollMax, nil)}
		var got []time.Duration
		for range 4 {
			got = append(got, elapsed(func() {
				if err := l.Wait(t.Context(), time.Time{}); err != nil {
					t.Fatal(err)
				}
			}))
		}
		if want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms}; !equal(got, want) {
			t.Errorf("polling waits = %v, want %v", got, want)
		}
	})
}

func TestLoopUsesTheGivenClock(t *testing.T) {
	var asked []time.Duration
	l := wait.Loop{
		Pacer: wait.NewPacer(pollMin, pollMax, nil),
		Now:   func() time.Time { return t0 },
		AfterFunc: func(d time.Duration, f func()) func() bool {
			asked = append(asked, d)
			f() // the clock jumps straight there
			return func() bool { return false }
		},
	}
	for range 2 {
		if err := l.Wait(context.Background(), t0.Add(7*ms)); err != nil {
			t.Fatal(err)
		}
	}
	if want := []time.Duration{5 * ms, 8 * ms}; !equal(asked, want) {
		t.Errorf("waits asked of the clock = %v, want %v", asked, want)
	}
}

func TestLoopPokeEndsTheWaitAndResetsTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wake := make(chan struct{}, 1)
		l := wait.Loop{Pacer: wait.NewPacer(pollMin, pollMax, nil), Wake: wake}
		for range 6 {
			_ = l.Wait(t.Context(), time.Time{}) // backoff grows to 320 ms
		}
		go func() {
			time.Sleep(50 * ms)
			wake <- struct{}{}
		}()
		if d := elapsed(func() { _ = l.Wait(t.Context(), time.Time{}) }); d != 50*ms {
			t.Errorf("poked after 50 ms: waited %v", d)
		}
		if d := elapsed(func() { _ = l.Wait(t.Context(), time.Time{}) }); d != pollMin {
			t.Errorf("the wait after a poke took %v, want the minimum %v", d, pollMin)
		}
	})
}

func TestLoopEndsWithTheContextsCause(t *testing.T) {
	cause := errors.New("the caller gave up")
	for _, notify := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(t.Context())
			l := wait.Loop{Pacer: wait.NewPacer(time.Minute, time.Hour, nil), NotifyMax: time.Hour}
			if notify {
				l.Notify = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
			}
			time.AfterFunc(ms, func() { cancel(cause) })
			if err := l.Wait(ctx, time.Time{}); !errors.Is(err, cause) {
				t.Errorf("notify=%v: Wait = %v, want the cause", notify, err)
			}
		})
	}
}

func TestLoopNotifications(t *testing.T) {
	t.Run("word ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := wait.Loop{
				Pacer:     wait.NewPacer(pollMin, pollMax, nil),
				NotifyMax: 5 * time.Second,
				Notify:    func(context.Context) error { time.Sleep(30 * ms); return nil },
			}
			if d := elapsed(func() { _ = l.Wait(t.Context(), time.Time{}) }); d != 30*ms {
				t.Errorf("notified after 30 ms: waited %v", d)
			}
		})
	})
	t.Run("a lost notification is bounded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := wait.Loop{
				Pacer:     wait.NewPacer(pollMin, pollMax, nil),
				NotifyMax: 5 * time.Second,
				Notify:    func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			}
			var err error
			if d := elapsed(func() { err = l.Wait(t.Context(), time.Time{}) }); d != 5*time.Second || err != nil {
				t.Errorf("silent notifier: waited %v with %v, want 5s and nil (try again)", d, err)
			}
			// Still held, though the holder's expiry passed an hour ago on our
			// clock: skew, so the backoff (grown once, to 10 ms) bounds it.
			if d := elapsed(func() { _ = l.Wait(t.Context(), time.Now().Add(-time.Hour)) }); d != 10*ms {
				t.Errorf("silent notifier under skew: waited %v, want the backoff 10ms", d)
			}
		})
	})
	t.Run("broken notifications fall back to polling", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			broken := errors.New("subscription lost")
			var calls int
			var heard []error
			l := wait.Loop{
				Pacer:        wait.NewPacer(pollMin, pollMax, nil),
				NotifyMax:    5 * time.Second,
				Notify:       func(context.Context) error { calls++; return broken },
				NotifyFailed: func(err error) { heard = append(heard, err) },
			}
			if d := elapsed(func() { _ = l.Wait(t.Context(), time.Time{}) }); d != 0 {
				t.Errorf("the wait whose notification broke took %v, want none: try again at once", d)
			}
			var polls []time.Duration
			for range 3 {
				polls = append(polls, elapsed(func() { _ = l.Wait(t.Context(), time.Time{}) }))
			}
			if calls != 1 || len(heard) != 1 || !errors.Is(heard[0], broken) {
				t.Errorf("Notify called %d times, NotifyFailed heard %v; want 1 and the error once", calls, heard)
			}
			// The backoff kept growing through the notification wait.
			if want := []time.Duration{10 * ms, 20 * ms, 40 * ms}; !equal(polls, want) {
				t.Errorf("polls after the fallback = %v, want %v", polls, want)
			}
		})
	})
}
