package lease_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// step is one item of a scripted watch.
type step struct {
	ev  lease.Event
	err error
}

// script is what one Watch call yields: its steps, then, unless the last
// step is an error or ends is set, nothing until ctx ends (a live watch).
type script struct {
	steps []step
	ends  bool // end without an error after the steps (what no Watcher may do)
}

// scripted is a lease.Watcher whose watches break in the ways a test
// scripts, one script per Watch call; past the last script, every watch
// breaks at once. It is a test double of the Watcher interface, not of an
// engine: the engines' watches are checked by leasetest.
type scripted struct {
	mu       sync.Mutex
	scripts  []script
	calls    int
	prefixes []string
	open     int         // watches running now
	at       []time.Time // when each Watch started, on the real (or bubble's) clock
}

func (s *scripted) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		s.mu.Lock()
		sc := script{steps: []step{{err: fmt.Errorf("%w: scripted: no script left", lease.ErrUnavailable)}}}
		if s.calls < len(s.scripts) {
			sc = s.scripts[s.calls]
		}
		s.calls++
		s.prefixes = append(s.prefixes, prefix)
		s.at = append(s.at, time.Now())
		s.open++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.open--
			s.mu.Unlock()
		}()
		for _, st := range sc.steps {
			if ctx.Err() != nil {
				return
			}
			if !yield(st.ev, st.err) || st.err != nil {
				return
			}
		}
		if !sc.ends {
			<-ctx.Done()
		}
	}
}

func (s *scripted) state() (calls, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.open
}

func held(key string, token lease.Token) step {
	return step{ev: lease.Event{Kind: lease.Held, Lease: lease.Lease{Key: key, Token: token}}}
}

func change(kind lease.EventKind, key string, token lease.Token) step {
	return step{ev: lease.Event{Kind: kind, Lease: lease.Lease{Key: key, Token: token}}}
}

var (
	synced = step{ev: lease.Event{Kind: lease.Synced}}
	broken = step{err: fmt.Errorf("%w: scripted break", lease.ErrUnavailable)}
)

// describe names an event for comparisons: "held k#1", "synced", "resync".
func describe(ev lease.Event) string {
	if ev.Lease.Key == "" {
		return ev.Kind.String()
	}
	return fmt.Sprintf("%v %s#%d", ev.Kind, ev.Lease.Key, ev.Lease.Token)
}

// collect ranges over seq, recording each event, until it has want events
// (then it cancels ctx and goes on to the end) or seq ends. It returns the
// events and the error seq ended with.
func collect(seq iter.Seq2[lease.Event, error], want int, cancel context.CancelFunc) (got []string, end error) {
	for ev, err := range seq {
		if err != nil {
			return got, err
		}
		got = append(got, describe(ev))
		if len(got) == want {
			cancel()
		}
	}
	return got, nil
}

// TestFollowResumesWithResync: a watch that breaks is watched again, and
// the new picture comes after one Resync; FollowOnBreak hears the break.
func TestFollowResumesWithResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &scripted{scripts: []script{
			{steps: []step{held("k", 1), synced, change(lease.Acquired, "k2", 2), broken}},
			{steps: []step{held("k", 1), held("k2", 2), synced, change(lease.Released, "k", 1)}},
		}}
		var breaks []error
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		got, end := collect(lease.Follow(ctx, w, "k", lease.FollowOnBreak(func(err error, pause time.Duration) error {
			breaks = append(breaks, err)
			return nil
		})), 8, cancel)
		want := []string{"held k#1", "synced", "acquired k2#2",
			"resync", "held k#1", "held k2#2", "synced", "released k#1"}
		if !slices.Equal(got, want) || end != nil {
			t.Errorf("Follow yielded %q, %v;\nwant %q, nil", got, end, want)
		}
		if len(breaks) != 1 || !errors.Is(breaks[0], lease.ErrUnavailable) {
			t.Errorf("FollowOnBreak heard %v, want the one break", breaks)
		}
		if calls, open := w.state(); calls != 2 || open != 0 {
			t.Errorf("%d watches, %d still open; want 2, 0", calls, open)
		}
		if !slices.Equal(w.prefixes, []string{"k", "k"}) {
			t.Errorf("watched %q, want the prefix each time", w.prefixes)
		}
	})
}

// TestFollowRetriesBeforeTheFirstPicture: watches that break before they
// yield anything (the backend still down) are watched again with no
// Resync, since the caller has nothing to drop; one that broke after some
// Held events is followed by a Resync.
func TestFollowRetriesBeforeTheFirstPicture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &scripted{scripts: []script{
			{steps: []step{broken}},
			{steps: []step{broken}},
			{steps: []step{held("k", 1), broken}}, // cut off mid-picture
			{steps: []step{broken}},
			{steps: []step{synced}},
		}}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		got, end := collect(lease.Follow(ctx, w, ""), 3, cancel)
		if want := []string{"held k#1", "resync", "synced"}; !slices.Equal(got, want) || end != nil {
			t.Errorf("Follow yielded %q, %v; want %q, nil", got, end, want)
		}
	})
}

// TestFollowBackoff: the pause before each new watch is jittered over
// [b/2, b] of a backoff b that doubles from min to max and stays there,
// runs on the clock (the next watch starts that long after the break), and
// starts again from min once a watch reached Synced.
func TestFollowBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const min, max = 10 * time.Millisecond, 200 * time.Millisecond
		scripts := make([]script, 0, 12)
		for range 8 {
			scripts = append(scripts, script{steps: []step{broken}})
		}
		scripts = append(scripts, script{steps: []step{synced, broken}}, script{steps: []step{broken}}, script{steps: []step{synced}})
		w := &scripted{scripts: scripts}
		var pauses []time.Duration
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, end := collect(lease.Follow(ctx, w, "", lease.FollowBackoff(min, max), lease.FollowOnBreak(func(_ error, pause time.Duration) error {
			pauses = append(pauses, pause)
			return nil
		})), 3, cancel)
		if end != nil {
			t.Fatal(end)
		}
		// The backoff before each pause: doubling, capped, and back to
		// min after the watch that reached Synced (the ninth).
		backoffs := []time.Duration{10, 20, 40, 80, 160, 200, 200, 200, 10, 20}
		if len(pauses) != len(backoffs) {
			t.Fatalf("%d pauses %v, want %d", len(pauses), pauses, len(backoffs))
		}
		for i, p := range pauses {
			b := backoffs[i] * time.Millisecond
			if p < b/2 || p > b {
				t.Errorf("pause %d is %v, want within [%v, %v]", i, p, b/2, b)
			}
			if gap := w.at[i+1].Sub(w.at[i]); gap != p {
				t.Errorf("watch %d started %v after watch %d, want the pause %v", i+1, gap, i, p)
			}
		}
	})
}

// TestFollowPausesOnTheGivenClock: FollowClock's clock times the pauses:
// no new watch starts until it has advanced by the pause.
func TestFollowPausesOnTheGivenClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := fakeclock.New(time.Unix(1e9, 0))
		w := &scripted{scripts: []script{{steps: []step{synced, broken}}, {steps: []step{synced}}}}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		pause := make(chan time.Duration, 1)
		done := make(chan []string)
		go func() {
			got, _ := collect(lease.Follow(ctx, w, "", lease.FollowClock(clk), lease.FollowOnBreak(func(_ error, d time.Duration) error {
				pause <- d
				return nil
			})), 3, cancel)
			done <- got
		}()
		d := <-pause
		time.Sleep(time.Hour) // the bubble's time, which must not matter
		synctest.Wait()
		if calls, _ := w.state(); calls != 1 {
			t.Fatalf("%d watches before the fake clock moved, want 1", calls)
		}
		clk.Advance(d - 1)
		synctest.Wait()
		if calls, _ := w.state(); calls != 1 {
			t.Fatalf("%d watches before the fake clock reached the pause, want 1", calls)
		}
		clk.Advance(1)
		if got, want := <-done, []string{"synced", "resync", "synced"}; !slices.Equal(got, want) {
			t.Errorf("Follow yielded %q, want %q", got, want)
		}
	})
}

// TestFollowClient: FollowClient's Client gives the pauses its clock and
// its jitter source: a source that always says 0 makes each pause half its
// backoff, on the Client's clock.
func TestFollowClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := fakeclock.New(time.Unix(1e9, 0))
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		c, err := lease.NewClient(store, lease.WithClock(clk), lease.WithJitter(func() float64 { return 0 }))
		if err != nil {
			t.Fatal(err)
		}
		w := &scripted{scripts: []script{{steps: []step{broken}}, {steps: []step{broken}}, {steps: []step{synced}}}}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		pauses := make(chan time.Duration)
		done := make(chan []string)
		go func() {
			got, _ := collect(lease.Follow(ctx, w, "", lease.FollowClient(c), lease.FollowOnBreak(func(_ error, d time.Duration) error {
				pauses <- d
				return nil
			})), 1, cancel)
			done <- got
		}()
		for _, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
			if d := <-pauses; d != want {
				t.Errorf("pause %v, want %v (half the backoff)", d, want)
			}
			synctest.Wait()
			clk.Advance(want)
		}
		if got := <-done; !slices.Equal(got, []string{"synced"}) {
			t.Errorf("Follow yielded %q, want [synced]", got)
		}
	})
}

// TestFollowEndsForGood: an error that watching again cannot mend is
// yielded once and ends Follow with no second watch and no break heard;
// so is the error FollowOnBreak returns, and a bad option.
func TestFollowEndsForGood(t *testing.T) {
	refused := errors.New("scripted: refused credential")
	stop := errors.New("stop here")
	for _, tc := range []struct {
		name    string
		steps   []step
		opts    []lease.FollowOption
		want    error
		watches int
	}{
		{"invalid", []step{{err: fmt.Errorf("%w: bad prefix", lease.ErrInvalid)}}, nil, lease.ErrInvalid, 1},
		{"unsupported", []step{{err: fmt.Errorf("watch: %w", errors.ErrUnsupported)}}, nil, errors.ErrUnsupported, 1},
		{"other", []step{synced, {err: refused}}, nil, refused, 1},
		{"hook", []step{synced, broken}, []lease.FollowOption{lease.FollowOnBreak(func(err error, _ time.Duration) error {
			return fmt.Errorf("%w: %w", stop, err)
		})}, stop, 1},
		{"backoff", nil, []lease.FollowOption{lease.FollowBackoff(0, time.Second)}, lease.ErrInvalid, 0},
		{"backoff max below min", nil, []lease.FollowOption{lease.FollowBackoff(time.Second, time.Millisecond)}, lease.ErrInvalid, 0},
		{"nil clock", nil, []lease.FollowOption{lease.FollowClock(nil)}, lease.ErrInvalid, 0},
		{"nil client", nil, []lease.FollowOption{lease.FollowClient(nil)}, lease.ErrInvalid, 0},
		{"nil hook", nil, []lease.FollowOption{lease.FollowOnBreak(nil)}, lease.ErrInvalid, 0},
		{"nil option", nil, []lease.FollowOption{nil}, lease.ErrInvalid, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if err := lease.ValidateFollowOptions(tc.opts...); (err != nil) != (tc.watches == 0) || (err != nil && !errors.Is(err, lease.ErrInvalid)) {
					t.Errorf("ValidateFollowOptions: %v", err)
				}
				w := &scripted{scripts: []script{{steps: tc.steps}}}
				var errs []error
				for _, err := range lease.Follow(t.Context(), w, "", tc.opts...) {
					if err != nil {
						errs = append(errs, err)
					}
				}
				if len(errs) != 1 || !errors.Is(errs[0], tc.want) {
					t.Errorf("Follow ended with %v, want one error matching %v", errs, tc.want)
				}
				if calls, open := w.state(); calls != tc.watches || open != 0 {
					t.Errorf("%d watches, %d open; want %d, 0", calls, open, tc.watches)
				}
			})
		})
	}
	for _, err := range lease.Follow(context.Background(), nil, "") {
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Follow of a nil Watcher: %v, want ErrInvalid", err)
		}
	}
}

// TestFollowEndsWithCtx: ctx's end ends Follow at once and without an
// error, during a watch or during a pause (not at the pause's end).
func TestFollowEndsWithCtx(t *testing.T) {
	for _, during := range []string{"watch", "pause"} {
		t.Run(during, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := &scripted{scripts: []script{{steps: []step{synced}}}}
				if during == "pause" {
					w.scripts[0].steps = append(w.scripts[0].steps, broken)
				}
				ctx, cancel := context.WithCancel(t.Context())
				var (
					got []string
					end error
				)
				done := make(chan struct{})
				go func() {
					defer close(done)
					got, end = collect(lease.Follow(ctx, w, "", lease.FollowBackoff(time.Hour, time.Hour)), -1, cancel)
				}()
				synctest.Wait()
				start := time.Now()
				cancel()
				<-done
				if took := time.Since(start); took != 0 {
					t.Errorf("Follow ended %v after ctx, want at once", took)
				}
				if !slices.Equal(got, []string{"synced"}) || end != nil {
					t.Errorf("Follow yielded %q, %v; want [synced], nil", got, end)
				}
				if calls, open := w.state(); calls != 1 || open != 0 {
					t.Errorf("%d watches, %d open; want 1, 0", calls, open)
				}
			})
		})
	}
}

// TestFollowLeavingTheLoop: a caller that leaves the loop ends the watch
// it was in, and no other starts.
func TestFollowLeavingTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &scripted{scripts: []script{{steps: []step{synced, broken}}, {steps: []step{held("k", 1), synced}}}}
		for ev := range lease.Follow(t.Context(), w, "") {
			if ev.Kind == lease.Resync {
				break
			}
		}
		synctest.Wait()
		if calls, open := w.state(); calls != 2 || open != 0 {
			t.Errorf("%d watches, %d open; want 2, 0", calls, open)
		}
	})
}

// TestFollowWatchEndingAlone: a watch that ends without an error while ctx
// lasts, which the contract rules out, is a break.
func TestFollowWatchEndingAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &scripted{scripts: []script{{steps: []step{synced}, ends: true}, {steps: []step{synced}}}}
		var breaks []error
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		got, _ := collect(lease.Follow(ctx, w, "", lease.FollowOnBreak(func(err error, _ time.Duration) error {
			breaks = append(breaks, err)
			return nil
		})), 3, cancel)
		if want := []string{"synced", "resync", "synced"}; !slices.Equal(got, want) {
			t.Errorf("Follow yielded %q, want %q", got, want)
		}
		if len(breaks) != 1 || !errors.Is(breaks[0], lease.ErrUnavailable) {
			t.Errorf("breaks %v, want one matching ErrUnavailable", breaks)
		}
	})
}

// TestFollowKeyIsExact: FollowKey of a Watcher that is no KeyWatcher
// watches the key as a prefix, leaving out the keys that extend it, across
// breaks too.
func TestFollowKeyIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &scripted{scripts: []script{
			{steps: []step{held("k", 1), held("k2", 5), synced, change(lease.Acquired, "k/x", 6), broken}},
			{steps: []step{held("k2", 5), synced, change(lease.Acquired, "k", 7)}},
		}}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		got, end := collect(lease.FollowKey(ctx, w, "k"), 5, cancel)
		if want := []string{"held k#1", "synced", "resync", "synced", "acquired k#7"}; !slices.Equal(got, want) || end != nil {
			t.Errorf("FollowKey yielded %q, %v; want %q, nil", got, end, want)
		}
	})
}

// TestFollowMemstore: on a real store, a reader that falls more than the
// store's buffer behind is cut off, and Follow gives it a Resync and the
// store's state of the moment; FollowKey, through the store's own WatchKey,
// the same for one key.
func TestFollowMemstore(t *testing.T) {
	ctx := t.Context()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "jobs/a", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, follow := range map[string]func(context.Context) iter.Seq2[lease.Event, error]{
		"Follow":    func(ctx context.Context) iter.Seq2[lease.Event, error] { return lease.Follow(ctx, s, "jobs/") },
		"FollowKey": func(ctx context.Context) iter.Seq2[lease.Event, error] { return lease.FollowKey(ctx, s, "jobs/a") },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var (
				kinds    []lease.EventKind
				renewals = 0
			)
			for ev, err := range follow(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				kinds = append(kinds, ev.Kind)
				switch ev.Kind {
				case lease.Synced:
					if slices.Contains(kinds, lease.Resync) {
						cancel()
						continue
					}
					// Fall behind: more renewals than the store keeps
					// for a reader, while this one reads none.
					for range 1100 {
						if l, err = s.Renew(ctx, l, time.Minute); err != nil {
							t.Fatal(err)
						}
					}
				case lease.Renewed:
					renewals++
				case lease.Held:
					if ev.Lease.Key != "jobs/a" || ev.Lease.Token != l.Token || !ev.Lease.Expires.Equal(l.Expires) {
						t.Errorf("held %+v, want the lease as it is, %+v", ev.Lease, l)
					}
				}
			}
			i := slices.Index(kinds, lease.Resync)
			if i < 0 || !slices.Equal(kinds[i:], []lease.EventKind{lease.Resync, lease.Held, lease.Synced}) {
				t.Fatalf("after the renewals: %v, want a Resync, the lease held, Synced", kinds[max(0, len(kinds)-5):])
			}
			if renewals == 0 || renewals >= 1100 {
				t.Errorf("%d renewals told before the break, want some and not all", renewals)
			}
		})
	}
}
