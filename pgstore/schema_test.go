package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

func TestSchemaWaitHonoursContext(t *testing.T) {
	// While one operation creates the tables and waits (here: on the
	// migration lock, held by another process's migration), an operation
	// with a short context must return when its context ends, not queue
	// behind the first without limit.
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	_, unlock := holdMigrationLock(t, db, s)
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

func TestBadNames(t *testing.T) {
	db := newTestDB(t, 4)
	for name, opt := range map[string]Option{
		"empty schema":     WithSchema(""),
		"NUL in schema":    WithSchema("a\x00b"),
		"long schema":      WithSchema(strings.Repeat("s", 64)),
		"bad UTF-8 schema": WithSchema("a\xffb"),
		"NUL in prefix":    WithTablePrefix("a\x00"),
		"long prefix":      WithTablePrefix(strings.Repeat("p", 58)),
		"nil option":       nil,
	} {
		if _, err := New(db.pool, opt); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("New with %s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New(nil): err = %v, want ErrInvalid", err)
	}
	// The longest prefix that fits is fine.
	s := db.store(t, WithTablePrefix(strings.Repeat("p", 57)))
	if _, err := s.Acquire(testCtx(t), "k", "o", time.Minute); err != nil {
		t.Fatalf("Acquire with a 57-byte prefix: %v", err)
	}
}

func TestDefaultTables(t *testing.T) {
	db := newTestDB(t, 4)
	s := db.store(t)
	if _, err := s.Acquire(testCtx(t), "k", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := db.pool.QueryRow(testCtx(t), `SELECT version FROM public.lease_meta`).Scan(&version); err != nil {
		t.Fatalf("reading public.lease_meta: %v", err)
	}
	if version != SchemaVersion {
		t.Fatalf("schema version %d, want %d", version, SchemaVersion)
	}
	var n int
	if err := db.pool.QueryRow(testCtx(t), `SELECT count(*) FROM public.lease_leases WHERE key = 'k'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("public.lease_leases rows for k: %d, %v", n, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	db := newTestDB(t, 4)
	if _, err := db.store(t).Get(testCtx(t), "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get on fresh tables: %v", err)
	}
	if _, err := db.pool.Exec(testCtx(t), `UPDATE public.lease_meta SET version = $1`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.store(t).Acquire(testCtx(t), "k", "o", time.Minute); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Acquire on newer tables: err = %v, want ErrSchemaVersion", err)
	}
	if _, err := Open(testCtx(t), db.url); !errors.Is(err, ErrSchemaVersion) {
		t.Fatalf("Open on newer tables: err = %v, want ErrSchemaVersion", err)
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	// Stores racing to create the same tables (as processes starting
	// together do) all succeed, and their tokens share one sequence.
	db := newTestDB(t, 20)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		s := db.store(t, WithSchema("fresh"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.Acquire(testCtx(t), fmt.Sprintf("k%d", i), "o", time.Minute)
			if err == nil && l.Token != 1 {
				err = fmt.Errorf("first token of a fresh key is %d", l.Token)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestSchemaPreparedPastAGivenUpOperation: an operation that gives up
// waiting for the tables leaves their preparation running, so that on a
// server where preparing takes longer than every caller waits (a Client's
// acquisitions of a short TTL wait at most their TTL), the Store still
// comes to serve. The preparation is held up on the migration lock here,
// past the only operation's 200 ms; once the lock is free the tables
// appear without another operation. Preparing on the operation's context,
// the Store rolled it back with the operation, and on a loaded machine a
// chaos run's workers (TTL 200 ms) got 147 errors in 12 s and no lease.
func TestSchemaPreparedPastAGivenUpOperation(t *testing.T) {
	db := newTestDB(t, 8)
	s := db.store(t)
	ctx := testCtx(t)
	other, unlock := holdMigrationLock(t, db, s)
	defer unlock()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(short, "k", "o", 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Acquire while the tables wait for the migration lock: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	unlock()
	eventually(t, 10*time.Second, "the tables prepared after the operation that started it gave up", func() bool {
		var exists bool
		err := other.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.n.meta).Scan(&exists)
		return err == nil && exists
	})
	if _, err := s.Acquire(ctx, "k", "o", time.Minute); err != nil {
		t.Fatalf("Acquire once the tables exist: %v", err)
	}
}

// holdMigrationLock takes the advisory lock s's preparation of the tables
// waits for, as another process's migration would, on a connection of its
// own (closed in cleanup). unlock frees it; later calls do nothing.
func holdMigrationLock(t *testing.T, db testDB, s *Store) (other *pgx.Conn, unlock func()) {
	t.Helper()
	ctx := testCtx(t)
	other, err := pgx.Connect(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(context.Background()) })
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, s.n.lockKey); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	return other, func() {
		if !unlocked {
			unlocked = true
			if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, s.n.lockKey); err != nil {
				t.Error(err)
			}
		}
	}
}
