package fence_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// The property: whatever the schedule — workers pausing past their TTL,
// renewing, releasing, the clock jumping — the guard never accepts a token
// lower than one it accepted before, and the resource's value always comes
// from the newest accepted write. With the guard off, the same schedules
// must break it (the negative control), or the test proves nothing.

const (
	propWorkers = 5
	propSteps   = 300
	propTTL     = 100 * time.Millisecond
)

type workerState int

const (
	idle workerState = iota
	holding
	paused
)

type worker struct {
	state workerState
	l     lease.Lease
	until time.Time // end of a pause
}

type accepted struct {
	token lease.Token
	value string
}

// runSchedule plays one seeded schedule and returns a description of the
// first violation, or "".
func runSchedule(t testing.TB, seed uint64, guarded bool) (violation string, trace []string) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	start := time.Unix(0, 0)
	clock := fakeclock.New(start)
	store := memtest.New(t, memstore.WithClock(clock))
	res := fence.NewResource("job", "initial", fence.AtLeast)
	plain := accepted{value: "initial"}
	ctx := context.Background()
	workers := make([]worker, propWorkers)
	var log []accepted
	var high lease.Token
	at := func() int64 { return clock.Now().Sub(start).Milliseconds() }
	logf := func(format string, args ...any) {
		trace = append(trace, fmt.Sprintf("t=%dms ", at())+fmt.Sprintf(format, args...))
	}

	write := func(w int, token lease.Token) string {
		value := fmt.Sprintf("w%d@%d", w, at())
		if guarded {
			if err := res.Write(token, value); err != nil {
				if !errors.Is(err, lease.ErrStaleToken) {
					return fmt.Sprintf("unexpected guard error: %v", err)
				}
				logf("w%d write token %d rejected", w, token)
				return ""
			}
		} else {
			plain = accepted{token, value}
		}
		logf("w%d write token %d accepted", w, token)
		if token < high {
			return fmt.Sprintf("token %d accepted after token %d", token, high)
		}
		high = token
		log = append(log, accepted{token, value})
		got := plain
		if guarded {
			got.value, got.token = res.Read()
		}
		if newest := log[len(log)-1]; got != newest {
			return fmt.Sprintf("resource holds %+v, newest accepted write is %+v", got, newest)
		}
		return ""
	}

	for range propSteps {
		clock.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
		w := rng.IntN(propWorkers)
		wk := &workers[w]
		switch wk.state {
		case idle:
			l, err := store.Acquire(ctx, "job", "w"+strconv.Itoa(w), propTTL)
			if err == nil {
				logf("w%d acquired token %d", w, l.Token)
				wk.state, wk.l = holding, l
			}
		case holding:
			switch r := rng.IntN(100); {
			case r < 40:
				if v := write(w, wk.l.Token); v != "" {
					return v, trace
				}
			case r < 60:
				if l, err := store.Renew(ctx, wk.l, propTTL); err == nil {
					wk.l = l
				} else {
					logf("w%d renew failed: lost", w)
					wk.state = idle
				}
			case r < 75:
				_ = store.Release(ctx, wk.l)
				logf("w%d released", w)
				wk.state = idle
			default:
				wk.state = paused
				wk.until = clock.Now().Add(propTTL + time.Duration(rng.IntN(int(2*propTTL))))
				logf("w%d pauses until t=%dms", w, wk.until.Sub(start).Milliseconds())
			}
		case paused:
			if !clock.Now().Before(wk.until) {
				// It wakes believing it still holds the lease, and writes.
				wk.state = holding
				if v := write(w, wk.l.Token); v != "" {
					return v, trace
				}
			}
		}
	}
	return "", trace
}

func propSeeds(t *testing.T, n int) []uint64 {
	if s := os.Getenv("LEASE_PROP_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LEASE_PROP_SEED: %v", err)
		}
		return []uint64{seed}
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

func TestPropertyGuardNeverAcceptsOlderToken(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	rejected := 0
	for _, seed := range propSeeds(t, n) {
		v, trace := runSchedule(t, seed, true)
		if v != "" {
			t.Fatalf("seed %d (replay: LEASE_PROP_SEED=%d go test ./fence -run Property): %s\ntrace:\n%s",
				seed, seed, v, tail(trace, 30))
		}
		for _, line := range trace {
			if strings.HasSuffix(line, "rejected") {
				rejected++
			}
		}
	}
	// The schedules must actually produce late writes for the guard to stop.
	if rejected == 0 {
		t.Fatal("no write was ever rejected: the schedules never produced a late write")
	}
	t.Logf("%d late writes rejected", rejected)
}

// The negative control: without the guard the same schedules let a paused
// worker's late write through.
func TestPropertyNegativeControlFindsLateWrite(t *testing.T) {
	for _, seed := range propSeeds(t, 200) {
		if v, _ := runSchedule(t, seed, false); v != "" {
			t.Logf("guard off: seed %d found %s", seed, v)
			return
		}
	}
	t.Fatal("with the guard off, no schedule produced a stale write: the property test cannot catch the bug")
}

// Same seed, same run.
func TestPropertyReplaysExactly(t *testing.T) {
	_, a := runSchedule(t, 42, true)
	_, b := runSchedule(t, 42, true)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("seed 42 produced two different traces")
	}
	if len(a) < propSteps/4 {
		t.Fatalf("trace of %d events: the schedule barely ran", len(a))
	}
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}
