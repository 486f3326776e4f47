package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/crashtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/poll"
)

// The server crash tests run pgstore under load on a PostgreSQL of their
// own, crash the server (immediate shutdown: WAL not yet written from
// shared memory is lost) at seeded random moments, restart it, and check
// with crashtest.Check, from everything the workers were told, that no
// token was issued twice or out of order (I1) and that no acknowledged
// lease went to someone else before its acknowledged expiry (I3).
//
// The server runs with synchronous_commit = off and the WAL writer at its
// slowest, as a user's server might be configured: durability then rests on
// pgstore alone, which must commit acquisitions and renewals synchronously
// whatever the session says (durableCommit).

const (
	serverCrashes    = 5
	crashKeys        = 8
	progressPerCrash = 20 // acquisitions acknowledged between two crashes, at least
)

// crashSettings make every commit that does not ask for a flush wait in
// shared memory for up to 10 s, so a crash loses it.
var crashSettings = []string{"synchronous_commit=off", "wal_writer_delay=10000ms"}

func TestServerCrashKeepsTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL and crashes it 5 times; skipped in -short")
	}
	acqs := runServerCrashes(t, true)
	for _, v := range crashtest.Check(acqs) {
		t.Error(v)
	}
}

// TestServerCrashNegativeControl is the same run with the Store's statements
// built without durableCommit: the session's synchronous_commit = off then
// governs, acknowledged tokens are lost in the crashes, and the check must
// find it.
func TestServerCrashNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL and crashes it 5 times; skipped in -short")
	}
	acqs := runServerCrashes(t, false)
	v := crashtest.Check(acqs)
	if len(v) == 0 {
		t.Fatalf("with asynchronous commits, %d acquisitions over %d server crashes broke no rule: the test cannot see lost tokens", len(acqs), serverCrashes)
	}
	t.Logf("found, as it must: %d violations, first: %s", len(v), v[0])
}

// runServerCrashes drives a Store (durable: as shipped) through
// serverCrashes crashes and restarts and returns the acknowledged
// acquisitions, including one more of each key after the last restart.
// LEASE_CRASH_SEED=N replays the crash moments and the workers' choices.
func runServerCrashes(t *testing.T, durable bool) []crashtest.Acquisition {
	seed := crashtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))

	pg := pgtest.StartOwn(t, crashSettings...)
	ctx := testCtx(t)
	s, err := Open(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !durable {
		s.q = newQueries(s.n, false, checkedSettings(false))
	}

	h := &crashtest.History{}
	load := crashtest.Load{Workers: 8, Keys: crashKeys, Seed: seed, Owner: "crash",
		// Short leases expire between crashes; a 1 s one outlives a crash
		// and restart and must still be respected after it.
		TTLs: []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, time.Second}}
	loadCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		crashtest.Drive(loadCtx, s, load, h)
	}()
	// Each crash comes only once the (recovered) server has granted
	// progressPerCrash more leases, then at a random moment under load:
	// a slow machine stretches the run instead of crashing an idle server.
	for i := range serverCrashes + 1 {
		waitForGrants(t, h, (i+1)*progressPerCrash)
		if i == serverCrashes {
			break // the load on the last recovered server is in
		}
		// real time: a random moment of the real server's work.
		time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
		pg.Crash(t)
		pg.Restart(t)
	}
	stop()
	<-done

	// Each key once more, as soon as its leases have expired: the store
	// must have come back by itself, with tokens above every acknowledged
	// one.
	for k := range crashKeys {
		key := crashtest.KeyName(k)
		poll.Until(t, 10*time.Second, func() error {
			sent := h.Clock.Add(1)
			l, err := s.Acquire(ctx, key, "final", time.Second)
			if err == nil {
				h.Add(crashtest.Acknowledged("final", l, sent, h.Clock.Add(1)))
				return nil
			}
			if !errors.Is(err, lease.ErrHeld) && !errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("after the last restart, acquiring %q: %v", key, err)
			}
			return fmt.Errorf("after the last restart, acquiring %q: %w", key, err)
		})
	}

	acqs := h.Snapshot()
	perKey := map[string]int{}
	for _, a := range acqs {
		perKey[strings.TrimPrefix(a.Key, "crash/")]++
	}
	t.Logf("%d crashes, %d acknowledged acquisitions (per key %v), %d refused as held, %d renewals, %d releases, %d calls failed or unknown",
		serverCrashes, len(acqs), perKey, h.Held.Load(), h.Renewals.Load(), h.Releases.Load(), h.Unknown.Load())
	return acqs
}

// waitForGrants waits until h holds n acknowledged acquisitions; a server
// that does not get there within a minute has not come back.
func waitForGrants(t *testing.T, h *crashtest.History, n int) {
	t.Helper()
	poll.Until(t, time.Minute, func() error {
		if got := h.Len(); got < n {
			return fmt.Errorf("only %d of %d acquisitions acknowledged: the server did not come back, or the load does not reach it (%d calls failed or unknown)", got, n, h.Unknown.Load())
		}
		return nil
	})
}
