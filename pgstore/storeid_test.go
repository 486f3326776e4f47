package pgstore

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestStoreID: Stores on the same tables, racing to create them or not,
// report one StoreID; tables under another prefix or in another database
// have another; tables of schema version 2, made before the id, get one
// in their migration, which later Stores read.
func TestStoreID(t *testing.T) {
	ctx := testCtx(t)
	db := newTestDB(t, 20)
	const n = 4
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := Open(ctx, db.url)
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			defer s.Close()
			ids[i] = s.StoreID()
		})
	}
	wg.Wait()
	if !regexp.MustCompile(`^postgres:public\.lease_:[0-9a-f]{32}$`).MatchString(ids[0]) {
		t.Fatalf("StoreID %q: want postgres:public.lease_: and 32 hex digits", ids[0])
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("Stores on one database report StoreIDs %q", ids)
		}
	}
	idOf := func(url string, opts ...Option) string {
		t.Helper()
		s, err := Open(ctx, url, opts...)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		return s.StoreID()
	}
	if other := idOf(newTestDB(t, 2).url); other[len(other)-32:] == ids[0][len(ids[0])-32:] {
		t.Fatalf("another database's StoreID %q has the id of %q", other, ids[0])
	}
	if other := idOf(db.url, WithTablePrefix("other_")); other[len(other)-32:] == ids[0][len(ids[0])-32:] || other[:len("postgres:public.other_:")] != "postgres:public.other_:" {
		t.Fatalf("another prefix's StoreID %q, the default's %q", other, ids[0])
	}
	// Tables of schema version 2: no store_id column.
	if _, err := db.pool.Exec(ctx, `ALTER TABLE public.lease_meta DROP COLUMN store_id; UPDATE public.lease_meta SET version = 2`); err != nil {
		t.Fatal(err)
	}
	migrated := idOf(db.url)
	if migrated == ids[0] || !regexp.MustCompile(`^postgres:public\.lease_:[0-9a-f]{32}$`).MatchString(migrated) {
		t.Fatalf("StoreID after the migration from version 2: %q (before the column was dropped: %q)", migrated, ids[0])
	}
	if again := idOf(db.url); again != migrated {
		t.Fatalf("StoreID %q, then %q: not kept", migrated, again)
	}
	var version int
	if err := db.pool.QueryRow(ctx, `SELECT version FROM public.lease_meta`).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("version after the migration: %d, %v; want %d", version, err, SchemaVersion)
	}
	if got := storeIDOf(string(make([]byte, 63)), string(make([]byte, 57)), ids[0][len(ids[0])-32:]); len(got) > 128 {
		t.Fatalf("StoreID of the longest names is %d bytes, more than 128: %q", len(got), got)
	}
}

// TestTablesDroppedUnderARunningStore: the tables dropped while a Store
// serves them are made again by its next operation's preparation, empty,
// so their tokens start again at 1. The Store must not serve them: its
// next acquisition of a key it granted at token 3 is refused with
// ErrUnavailable, saying why, never granted at a lower token (I1).
func TestTablesDroppedUnderARunningStore(t *testing.T) {
	ctx := testCtx(t)
	db := newTestDB(t, 4)
	s, err := Open(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last lease.Lease
	for range 3 {
		if last, err = s.Acquire(ctx, "k", "w", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.pool.Exec(ctx, `DROP TABLE public.lease_leases, public.lease_meta`); err != nil {
		t.Fatal(err)
	}
	// The first operation finds the tables missing; the ones after it
	// prepare them again.
	for i := range 3 {
		l, err := s.Acquire(ctx, "k", "w", time.Minute)
		if err == nil {
			t.Fatalf("acquisition %d after the tables were dropped: granted at token %d, after token %d (tokens went back)", i, l.Token, last.Token)
		}
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("acquisition %d after the tables were dropped: %v; want ErrUnavailable", i, err)
		}
		if i > 0 && !strings.Contains(err.Error(), "dropped and made again") {
			t.Fatalf("acquisition %d after the tables were dropped: %v; want it to say why", i, err)
		}
	}
	// A Store opened now serves the new tables, under their new id.
	fresh, err := Open(ctx, db.url)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if fresh.StoreID() == s.StoreID() {
		t.Fatalf("the new tables' StoreID %q is the dropped ones'", fresh.StoreID())
	}
}
