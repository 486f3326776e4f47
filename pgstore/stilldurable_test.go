package pgstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
)

// TestGrantRefusedOnceNotDurable: a server whose durability settings are
// turned off after the Store's check (ALTER SYSTEM and a reload) is refused
// grants, with an error matching ErrVolatile and ErrUnavailable, until they
// are on again; a held key's try and a renewal go on. The test servers run
// with fsync and full_page_writes on their command line, where ALTER
// SYSTEM cannot reach them, so the Store here also checks a setting of the
// test's own, which it turns off and on as an operator would fsync; the
// check is the one every Store makes of those two.
func TestGrantRefusedOnceNotDurable(t *testing.T) {
	db := newTestDB(t, 4)
	ctx := testCtx(t)
	const setting = "pgstore_test.durable"
	// Set for the database (ALTER SYSTEM refuses a custom setting on
	// PostgreSQL 15), which new connections read: the pool's are made
	// again.
	var name string
	if err := db.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	set := func(v string) {
		t.Helper()
		if _, err := db.pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET `+setting+` = `+v); err != nil {
			t.Fatal(err)
		}
		db.pool.Reset()
	}
	set("on")
	s := db.store(t)
	s.q = newQueries(s.n, true, append(checkedSettings(false), setting))
	held := func(i int) (lease.Lease, error) {
		return s.Acquire(ctx, fmt.Sprintf("durable/%d", i), "w", time.Minute)
	}
	var l lease.Lease
	eventually(t, 10*time.Second, "grants while durable", func() bool {
		var err error
		l, err = held(0)
		return err == nil
	})
	set("off")
	i := 1
	eventually(t, 10*time.Second, "a grant refused once not durable", func() bool {
		_, err := held(i)
		i++
		if err != nil && !errors.Is(err, ErrVolatile) {
			t.Fatalf("Acquire once not durable: %v, want ErrVolatile", err)
		}
		return errors.Is(err, ErrVolatile) && errors.Is(err, lease.ErrUnavailable)
	})
	if _, err := s.Acquire(ctx, l.Key, "other", time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("a try on a held key once not durable: %v, want ErrHeld", err)
	}
	if _, err := s.Renew(ctx, l, time.Minute); err != nil {
		t.Errorf("a renewal once not durable: %v", err)
	}
	set("on")
	eventually(t, 10*time.Second, "grants once durable again", func() bool {
		_, err := held(i)
		i++
		return err == nil
	})
}
