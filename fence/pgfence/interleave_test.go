package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
)

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

// blockedChecks counts checks seen waiting for the other writer's lock.
var blockedChecks int

type writer struct {
	token   lease.Token
	commit  bool
	conn    *pgxpool.Conn
	tx      pgx.Tx
	next    int        // next step
	pending chan error // the check in flight while it waits for a lock
	checked error      // the check's outcome
}

func TestInterleavings(t *testing.T) {
	pool := newPool(t)
	ctx := testCtx(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	all := schedules()
	if len(all) != 70 {
		t.Fatalf("%d schedules, want C(8,4) = 70", len(all))
	}
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		g := newGuard(t, pool, pgfence.WithMode(mode), pgfence.WithTable("fence_"+fmt.Sprint(int(mode))))
		for _, ends := range [][2]bool{{true, true}, {true, false}, {false, true}, {false, false}} {
			for i, sched := range all {
				name := fmt.Sprintf("%v/commit1=%v,commit2=%v/%v", mode, ends[0], ends[1], sched)
				res := fmt.Sprintf("res-%d-%v-%v-%d", mode, ends[0], ends[1], i)
				runSchedule(t, ctx, pool, g, name, res, sched, ends)
			}
		}
	}
	t.Logf("%d checks waited for the other writer's row lock", blockedChecks)
}

func runSchedule(t *testing.T, ctx context.Context, pool *pgxpool.Pool, g *pgfence.Guard, name, res string, sched []int, ends [2]bool) {
	t.Helper()
	ws := [2]*writer{{token: 1, commit: ends[0]}, {token: 2, commit: ends[1]}}
	for _, w := range ws {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.conn = c
		defer c.Release()
	}
	defer func() {
		for _, w := range ws {
			if w.tx != nil {
				_ = w.tx.Rollback(ctx)
			}
		}
	}()
	// The model: the first check in the schedule takes the row lock; the
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
	secondAdmitted := g.Mode().Admits(ws[second].token, afterFirst)

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
			tx, err := w.conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w.tx = tx
		case stepCheck:
			done := make(chan error, 1)
			go func() { done <- g.Check(ctx, w.tx, res, w.token) }()
			stop := make(chan struct{})
			waiting := waitingForLock(t, ctx, pool, w.conn.Conn().PgConn().PID(), stop)
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
				blockedChecks++
			}
		case stepWrite:
			if w.checked == nil {
				if _, err := w.tx.Exec(ctx, `INSERT INTO data (resource, value, token) VALUES ($1, $2, $3)
					ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`,
					res, fmt.Sprintf("written-by-%d", w.token), int64(w.token)); err != nil {
					t.Fatalf("%s: writer %d's write: %v", name, who+1, err)
				}
			}
		case stepEnd:
			var err error
			if w.commit {
				err = w.tx.Commit(ctx)
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
		t.Fatalf("%s: second check waited for the lock: %v, want %v", name, waited, mustWait)
	}
	// Checks: the first always passes; the second as the model says.
	if ws[first].checked != nil {
		t.Fatalf("%s: first check (writer %d) failed: %v", name, first+1, ws[first].checked)
	}
	if secondAdmitted {
		if ws[second].checked != nil {
			t.Fatalf("%s: writer %d rejected: %v", name, second+1, ws[second].checked)
		}
	} else {
		var se *fence.StaleTokenError
		if !errors.As(ws[second].checked, &se) || se.Token != ws[second].token || se.Highest != afterFirst {
			t.Fatalf("%s: writer %d's check = %v, want stale with highest %d", name, second+1, ws[second].checked, afterFirst)
		}
	}
	// Token 1 is rejected whenever token 2 committed before it checked.
	if first == 1 && ws[1].commit && ws[0].checked == nil {
		t.Fatalf("%s: token 1 admitted after token 2 committed", name)
	}

	// The committed state: token 2's write if it committed, else token 1's
	// if it was admitted and committed, else nothing.
	var wantValue string
	var wantHighest lease.Token
	switch {
	case ws[1].commit:
		wantValue, wantHighest = "written-by-2", 2
	case ws[0].commit && ws[0].checked == nil:
		wantValue, wantHighest = "written-by-1", 1
	}
	var value string
	err := pool.QueryRow(ctx, `SELECT value FROM data WHERE resource = $1`, res).Scan(&value)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if value != wantValue {
		t.Fatalf("%s: committed value %q, want %q", name, value, wantValue)
	}
	if got, err := g.Highest(ctx, pool, res); err != nil || got != wantHighest {
		t.Fatalf("%s: high-water mark %d, %v; want %d", name, got, err, wantHighest)
	}
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

// waitingForLock returns a channel closed once backend pid is seen waiting
// for a lock, or once stop is closed; it polls pg_stat_activity meanwhile.
func waitingForLock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, pid uint32, stop <-chan struct{}) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			var waiting bool
			err := pool.QueryRow(ctx, `SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&waiting)
			if err != nil {
				t.Errorf("reading pg_stat_activity: %v", err)
				return
			}
			if waiting {
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
