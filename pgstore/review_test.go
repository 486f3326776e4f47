package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/pgtest"
)

func TestSchemaWaitHonoursContext(t *testing.T) {
	// While one operation creates the tables and waits (here: on the
	// migration lock, held by another process's migration), an operation
	// with a short context must return when its context ends, not queue
	// behind the first without limit.
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	other, err := pgx.Connect(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, s.n.lockKey); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, s.n.lockKey); err != nil {
				t.Error(err)
			}
		}
	}
	defer unlock()

	// The first operation has all the time in the world and waits for the
	// migration lock.
	first := make(chan error, 1)
	go func() { _, err := s.Get(ctx, "k"); first <- err }()
	eventually(t, 10*time.Second, "first operation not waiting for the migration lock", func() bool {
		var n int
		err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
		return err == nil && n == 1
	})

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := s.Acquire(short, "k", "o", time.Minute); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("Acquire with an ended context: err = %v, want ErrUnavailable and DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited > 3*time.Second {
			t.Errorf("Acquire with a 200 ms context returned after %v", waited)
		}
	case <-time.After(5 * time.Second):
		unlock()
		<-done
		t.Fatal("Acquire with a 200 ms context still blocked after 5 s behind another operation's table creation")
	}

	unlock()
	if err := <-first; !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("first operation after the lock was freed: %v, want ErrNotFound", err)
	}
	if _, err := s.Acquire(ctx, "k", "o", time.Minute); err != nil {
		t.Fatalf("Acquire once the tables exist: %v", err)
	}
}

func TestOpenBadConnStringIsInvalid(t *testing.T) {
	// A connection string that cannot be parsed is the caller's mistake,
	// not an unreachable server: retrying cannot help.
	for _, cs := range []string{
		"postgres://app@db:notaport/app",
		"postgres://app@db/app?pool_max_conns=lots",
		"host=db port=x",
	} {
		s, err := Open(testCtx(t), cs)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", cs)
			continue
		}
		if !errors.Is(err, lease.ErrInvalid) || errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", cs, err)
		}
	}
}

// TestRefusesVolatileServer: with fsync or full_page_writes off, a crash of
// the server's machine can bring a key's row back older and its tokens
// backwards (I1), so a Store refuses to serve (I7) unless told to run
// anyway; the error names the setting and both ways out.
func TestRefusesVolatileServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own PostgreSQL; skipped in -short")
	}
	for _, setting := range []string{"fsync", "full_page_writes"} {
		t.Run(setting, func(t *testing.T) {
			pg := pgtest.StartOwn(t, setting+"=off")
			ctx := testCtx(t)
			s, err := Open(ctx, pg.URL)
			if err == nil {
				s.Close()
				t.Fatalf("Open on a server with %s = off succeeded", setting)
			}
			if !errors.Is(err, ErrVolatile) {
				t.Fatalf("Open: err = %v, want ErrVolatile", err)
			}
			for _, want := range []string{setting + " = off", "AllowVolatile", "pg_reload_conf"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			s, err = Open(ctx, pg.URL, AllowVolatile())
			if err != nil {
				t.Fatalf("Open with AllowVolatile: %v", err)
			}
			defer s.Close()
			if _, err := s.Acquire(ctx, "k", "o", time.Minute); err != nil {
				t.Fatalf("Acquire with AllowVolatile: %v", err)
			}
		})
	}
}
