package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// Load describes the work Drive puts on a backend: Workers goroutines, each
// on its own random stream from Seed, repeatedly acquire one of Keys keys
// (try once) with one of TTLs, renew it up to twice at TTL/4 intervals, and
// then release it or, one time in five, abandon it, so that it must expire
// on the backend's clock even across a crash.
type Load struct {
	Workers, Keys int
	TTLs          []time.Duration
	Seed          uint64
	Owner         string // prefix of the workers' owner names
}

// KeyName is the name of key k of a Load.
func KeyName(k int) string { return fmt.Sprintf("crash/%d", k) }

// Drive runs l against b, recording in h what the workers were told, until
// ctx ends; it returns once every worker has stopped. A call that fails for
// any reason but ErrHeld is an outcome the worker does not know (the
// backend may be down): it pauses 5 ms and goes on with a new acquisition.
// A key found held costs a 1 ms pause.
func Drive(ctx context.Context, b lease.Backend, l Load, h *History) {
	var wg sync.WaitGroup
	for w := range l.Workers {
		wk := &worker{b: b, l: l, h: h, owner: fmt.Sprintf("%s-w%d", l.Owner, w), rng: rand.New(rand.NewPCG(l.Seed, uint64(w)))}
		wg.Go(func() { wk.loop(ctx) })
	}
	wg.Wait()
}

type worker struct {
	b     lease.Backend
	l     Load
	h     *History
	owner string
	rng   *rand.Rand
}

func (w *worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		key := KeyName(w.rng.IntN(w.l.Keys))
		ttl := w.l.TTLs[w.rng.IntN(len(w.l.TTLs))]
		sent := w.h.Clock.Add(1)
		got, err := w.b.Acquire(ctx, key, w.owner, ttl)
		if err != nil {
			if errors.Is(err, lease.ErrHeld) {
				w.h.Held.Add(1)
				pause(ctx, time.Millisecond) // another key next time, most likely
			} else {
				w.h.Unknown.Add(1)
				pause(ctx, 5*time.Millisecond)
			}
			continue
		}
		a := Acknowledged(w.owner, got, sent, w.h.Clock.Add(1))
		w.h.Add(a)
		for range w.rng.IntN(3) {
			pause(ctx, ttl/4)
			renewed, err := w.b.Renew(ctx, got, ttl)
			if err != nil {
				break
			}
			w.h.Renewals.Add(1)
			w.h.Update(func() {
				if renewed.Expires.After(a.HeldUntil) {
					a.HeldUntil = renewed.Expires
				}
			})
		}
		if w.rng.IntN(5) != 0 {
			w.h.Update(func() { a.ReleaseTried = true }) // before sending: its effect may precede any answer
			if w.b.Release(ctx, got) == nil {
				w.h.Releases.Add(1)
			}
		}
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Seed returns the seed of a crash test's random choices, LEASE_CRASH_SEED
// if set (to replay a run), else a new one, and logs it.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LEASE_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("LEASE_CRASH_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (LEASE_CRASH_SEED=%d replays it)", seed, seed)
	return seed
}
