// Package sqlguardtest holds the checks that the SQL guards, pgfence and
// sqlfence, run against their real engines: every interleaving of two
// writers' transactions (Interleavings, InterleavingsSnapshot), many
// writers at once with random tokens (Race), marks no guard writes
// (RefusesCorruptMarks), and the seed's scenario end to end through two
// lease.Clients (SeedScenario).
package sqlguardtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// Engine is a guard that checks inside the caller's transaction, on a real
// database, in one mode, beside a data table of (resource, value, token)
// that the writers write to.
type Engine interface {
	// Begin starts a transaction on a connection of its own; end gives
	// the connection back (after the transaction has ended).
	Begin(ctx context.Context) (tx Tx, end func(), err error)
	// Value returns resource's committed value in the data table, "" if
	// it has none.
	Value(ctx context.Context, resource string) (string, error)
	// Highest returns the guard's committed high-water mark of resource.
	Highest(ctx context.Context, resource string) (lease.Token, error)
}

// Tx is one writer's transaction.
type Tx interface {
	// Check runs the guard's Check in the transaction. It runs on a
	// goroutine of its own, and may wait for the other writer's lock.
	Check(ctx context.Context, resource string, token lease.Token) error
	// Waiting returns a channel closed once the Check in flight is seen
	// waiting for a lock, or once stop is closed.
	Waiting(ctx context.Context, stop <-chan struct{}) <-chan struct{}
	// Write stores value and token as resource's row of the data table.
	Write(ctx context.Context, resource, value string, token lease.Token) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Each writer runs begin, check, write, end (commit or rollback) in its own
// transaction on its own connection.
const (
	stepBegin = iota
	stepCheck
	stepWrite
	stepEnd
	steps
)

// schedules returns every interleaving of two writers' steps: strings of
// 0s and 1s (the writer of each step) with `steps` of each.
func schedules() [][]int {
	var out [][]int
	var rec func(cur []int, n0, n1 int)
	rec = func(cur []int, n0, n1 int) {
		if n0 == steps && n1 == steps {
			out = append(out, append([]int(nil), cur...))
			return
		}
		if n0 < steps {
			rec(append(cur, 0), n0+1, n1)
		}
		if n1 < steps {
			rec(append(cur, 1), n0, n1+1)
		}
	}
	rec(nil, 0, 0)
	return out
}

type writer struct {
	token     lease.Token
	commit    bool
	committed bool // its transaction committed
	tx        Tx
	end       func()
	next      int        // next step
	pending   chan error // the check in flight while it waits for a lock
	checked   error      // the check's outcome
}

// Interleavings runs every interleaving of two writers — token 1 and token
// 2, each committing or rolling back — in both modes, on engines made by
// newEngine (called once per mode), and checks each against the model: the
// first check in the schedule takes the resource's lock and is admitted;
// the second waits if and only if it comes before the first writer's end,
// and is then decided on what the first committed; a rolled-back
// transaction leaves the mark unchanged; and the committed state always
// comes from the newer token when it committed.
func Interleavings(t *testing.T, newEngine func(t *testing.T, mode fence.Mode) Engine) {
	interleavings(t, newEngine, nil)
}

// Snapshot describes an isolation level whose transactions read a snapshot
// (PostgreSQL's REPEATABLE READ and SERIALIZABLE), for
// InterleavingsSnapshot.
type Snapshot struct {
	// Conflict recognises a serialization failure.
	Conflict func(error) bool
	// AtBegin says the engine's Begin takes the snapshot (it reads
	// something, as a caller's transaction that read before its Check
	// has); otherwise the Check, the transaction's first statement, does.
	AtBegin bool
}

// InterleavingsSnapshot is Interleavings in an isolation level whose
// transactions read a snapshot, with one change to the model: a check
// whose snapshot was taken before the other writer committed (it waited
// for that writer's lock, or with s.AtBegin its transaction began before
// that commit) fails with an error s.Conflict recognises, and its writer
// rolls back, as a caller would before retrying. So neither late nor
// stale token is ever decided on a snapshot that misses the other
// writer's commit.
func InterleavingsSnapshot(t *testing.T, newEngine func(t *testing.T, mode fence.Mode) Engine, s Snapshot) {
	if s.Conflict == nil {
		t.Fatal("sqlguardtest: InterleavingsSnapshot needs a Conflict function")
	}
	interleavings(t, newEngine, &s)
}

func interleavings(t *testing.T, newEngine func(t *testing.T, mode fence.Mode) Engine, snap *Snapshot) {
	t.Helper()
	all := schedules()
	if len(all) != 70 {
		t.Fatalf("%d schedules, want C(8,4) = 70", len(all))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	blocked := 0 // checks seen waiting for the other writer's lock
	played := 0
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		e := newEngine(t, mode)
		for _, ends := range [][2]bool{{true, true}, {true, false}, {false, true}, {false, false}} {
			for i, sched := range all {
				name := fmt.Sprintf("%v/commit1=%v,commit2=%v/%v", mode, ends[0], ends[1], sched)
				res := fmt.Sprintf("res-%d-%v-%v-%d", mode, ends[0], ends[1], i)
				if runSchedule(t, ctx, e, mode, name, res, sched, ends, snap) {
					blocked++
				}
				played++
			}
		}
	}
	t.Logf("%d schedules played, %d checks waited for the other writer's lock, token 1 committed after token 2 in none", played, blocked)
}

// runSchedule plays one schedule and reports whether a check waited. A
// non-nil snap is InterleavingsSnapshot's.
func runSchedule(t *testing.T, ctx context.Context, e Engine, mode fence.Mode, name, res string, sched []int, ends [2]bool, snap *Snapshot) bool {
	t.Helper()
	ws := [2]*writer{{token: 1, commit: ends[0]}, {token: 2, commit: ends[1]}}
	defer func() {
		for _, w := range ws {
			if w.tx != nil {
				_ = w.tx.Rollback(ctx)
			}
			if w.end != nil {
				w.end()
			}
		}
	}()
	// The model: the first check in the schedule takes the lock; the
	// other is decided once the first writer's transaction has ended, on
	// what that transaction committed.
	first := -1
	for i, who := range sched {
		if first < 0 && countBefore(sched, i, who) == stepCheck {
			first = who
		}
	}
	second := 1 - first
	// The second check must wait iff it comes before the first writer ends.
	mustWait := position(sched, second, stepCheck) < position(sched, first, stepEnd)
	waited := false
	var afterFirst lease.Token
	if ws[first].commit {
		afterFirst = ws[first].token
	}
	secondAdmitted := mode.Admits(ws[second].token, afterFirst)
	// In a snapshot taken before the other writer's commit, a check cannot
	// see that commit: it fails with a serialization error instead.
	var conflict func(error) bool
	secondConflicts := false
	if snap != nil {
		conflict = snap.Conflict
		taken := position(sched, second, stepCheck)
		if snap.AtBegin {
			taken = position(sched, second, stepBegin)
		}
		secondConflicts = ws[first].commit && taken < position(sched, first, stepEnd)
	}

	queue := append([]int(nil), sched...)
	for len(queue) > 0 {
		// A writer waiting for the lock cannot go on: its other steps wait
		// until the lock holder's transaction has ended.
		pick := 0
		if ws[queue[0]].pending != nil {
			for pick < len(queue) && queue[pick] == queue[0] {
				pick++
			}
			if pick == len(queue) {
				t.Fatalf("%s: writer %d blocked with nothing left to unblock it", name, queue[0]+1)
			}
		}
		who := queue[pick]
		queue = append(queue[:pick], queue[pick+1:]...)
		w, other := ws[who], ws[1-who]
		switch w.next {
		case stepBegin:
			tx, end, err := e.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w.tx, w.end = tx, end
		case stepCheck:
			done := make(chan error, 1)
			go func() { done <- w.tx.Check(ctx, res, w.token) }()
			stop := make(chan struct{})
			waiting := w.tx.Waiting(ctx, stop)
			select {
			case err := <-done:
				close(stop)
				<-waiting
				w.checked = err
			case <-waiting:
				if other.tx == nil || other.next <= stepCheck {
					t.Fatalf("%s: writer %d's check waits though writer %d holds no lock", name, who+1, 2-who)
				}
				w.pending = done
				waited = true
			}
		case stepWrite:
			if w.checked == nil {
				if err := w.tx.Write(ctx, res, fmt.Sprintf("written-by-%d", w.token), w.token); err != nil {
					t.Fatalf("%s: writer %d's write: %v", name, who+1, err)
				}
			}
		case stepEnd:
			var err error
			if w.commit && !(conflict != nil && w.checked != nil && conflict(w.checked)) {
				err = w.tx.Commit(ctx)
				w.committed = err == nil
			} else {
				err = w.tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatalf("%s: writer %d ending: %v", name, who+1, err)
			}
			w.tx = nil
			if other.pending != nil {
				select {
				case other.checked = <-other.pending:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: writer %d still waits 10 s after writer %d ended", name, 2-who, who+1)
				}
				other.pending = nil
			}
		}
		w.next++
	}

	if waited != mustWait {
		t.Fatalf("%s: second check waited for the lock: %v, want %v (checks: %v, %v)", name, waited, mustWait, ws[0].checked, ws[1].checked)
	}
	// Checks: the first always passes; the second as the model says.
	if ws[first].checked != nil {
		t.Fatalf("%s: first check (writer %d) failed: %v", name, first+1, ws[first].checked)
	}
	switch {
	case secondConflicts:
		if !conflict(ws[second].checked) {
			t.Fatalf("%s: writer %d's check, on a snapshot from before writer %d's commit, = %v; want a serialization failure", name, second+1, first+1, ws[second].checked)
		}
	case secondAdmitted:
		if ws[second].checked != nil {
			t.Fatalf("%s: writer %d rejected: %v", name, second+1, ws[second].checked)
		}
	default:
		var se *fence.StaleTokenError
		if !errors.As(ws[second].checked, &se) || se.Token != ws[second].token || se.Highest != afterFirst {
			t.Fatalf("%s: writer %d's check = %v, want stale with highest %d", name, second+1, ws[second].checked, afterFirst)
		}
	}
	// Token 1 is rejected whenever token 2 committed before it checked.
	if first == 1 && ws[1].commit && ws[0].checked == nil {
		t.Fatalf("%s: token 1 admitted after token 2 committed", name)
	}
	if ws[0].committed && ws[1].committed && ws[0].checked == nil && first == 1 {
		t.Fatalf("%s: token 1 committed a write after token 2 did", name)
	}

	// The committed state: token 2's write if it committed, else token 1's
	// if it was admitted and committed, else nothing.
	var wantValue string
	var wantHighest lease.Token
	switch {
	case ws[1].committed && ws[1].checked == nil:
		wantValue, wantHighest = "written-by-2", 2
	case ws[0].committed && ws[0].checked == nil:
		wantValue, wantHighest = "written-by-1", 1
	}
	if value, err := e.Value(ctx, res); err != nil || value != wantValue {
		t.Fatalf("%s: committed value %q, %v; want %q", name, value, err, wantValue)
	}
	if got, err := e.Highest(ctx, res); err != nil || got != wantHighest {
		t.Fatalf("%s: high-water mark %d, %v; want %d", name, got, err, wantHighest)
	}
	return waited
}

// position returns the index in sched of who's step.
func position(sched []int, who, step int) int {
	for i := range sched {
		if sched[i] == who && countBefore(sched, i, who) == step {
			return i
		}
	}
	return -1
}

// countBefore counts who's steps in sched before position i.
func countBefore(sched []int, i, who int) int {
	n := 0
	for _, w := range sched[:i] {
		if w == who {
			n++
		}
	}
	return n
}

// PollWaiting returns a channel closed once waiting reports true, or once
// stop is closed; it asks every millisecond. An error fails t (from this
// goroutine: Errorf) and closes the channel. Engines whose catalog shows
// lock waits (pg_stat_activity, information_schema.INNODB_TRX) build
// Tx.Waiting on it.
func PollWaiting(t *testing.T, waiting func() (bool, error), stop <-chan struct{}) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			w, err := waiting()
			if err != nil {
				t.Errorf("sqlguardtest: looking for a lock wait: %v", err)
				return
			}
			if w {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return ch
}
