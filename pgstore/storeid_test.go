package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasetest"
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

// TestTablesMadeAnewUnderARunningStore: tables dropped under a running
// Store and made anew by someone else before its next operation (another
// Store's first use, a second lease serve, an operator restoring an empty
// schema) give the Store no missing table to notice: its statements find
// tables, empty or holding the other's grants, whose tokens start again
// at 1. A key it granted at token 3 must not be granted again at a lower
// token (I1): the Store's next grant is refused with ErrUnavailable,
// saying why, and so is every operation after it; the new tables keep
// nothing the refused grant tried.
func TestTablesMadeAnewUnderARunningStore(t *testing.T) {
	const schema = "remade"
	dropTables := `DROP TABLE ` + schema + `.lease_leases, ` + schema + `.lease_meta`
	// another makes the tables anew as another Store's first use does.
	another := func(t *testing.T, ctx context.Context, db testDB) *Store {
		t.Helper()
		b, err := Open(ctx, db.url, WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	cases := []struct {
		name string
		drop string
		// remake makes the tables anew after drop, and returns the tokens
		// its grants gave k there (none if it granted nothing).
		remake func(t *testing.T, ctx context.Context, db testDB) []lease.Lease
		// first is the running Store's first operation on the new tables.
		first func(ctx context.Context, s *Store) error
	}{{
		name:   "tables dropped, made by another Store",
		drop:   dropTables,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease { another(t, ctx, db); return nil },
	}, {
		name:   "schema dropped, made by another Store",
		drop:   `DROP SCHEMA ` + schema + ` CASCADE`,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease { another(t, ctx, db); return nil },
	}, {
		// The key has a row again, the other Store's: a grant of it
		// goes on from that row's token, 1.
		name: "made by another Store, which granted the key",
		drop: dropTables,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease {
			return leasetest.Grants(t, ctx, another(t, ctx, db), "k", 1, true)
		},
	}, {
		// An operator restoring an empty schema: the DDL, by hand, with
		// a store id of its own.
		name: "made by hand",
		drop: dropTables,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease {
			byHand(t, ctx, db, schema, SchemaVersion)
			return nil
		},
	}, {
		// An older release's empty schema, without the store id
		// column: the grant fails on it, and the next operation
		// migrates the tables, giving them a store id of their own.
		name: "made by hand at schema version 2",
		drop: dropTables,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease {
			byHand(t, ctx, db, schema, 2)
			return nil
		},
		first: func(ctx context.Context, s *Store) error {
			l, err := s.Acquire(ctx, "k", "w", time.Minute)
			switch {
			case err == nil:
				return fmt.Errorf("granted at token %d", l.Token)
			case !errors.Is(err, lease.ErrUnavailable):
				return err
			}
			if l, err = s.Acquire(ctx, "k", "w", time.Minute); err == nil {
				return fmt.Errorf("granted at token %d, at the second try", l.Token)
			}
			return err
		},
	}, {
		// Several acquisitions in one statement: the batch form.
		name:   "a batch",
		drop:   dropTables,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease { another(t, ctx, db); return nil },
		first: func(ctx context.Context, s *Store) error {
			calls := []*call[acquireReq, lease.Lease]{
				{ctx: ctx, key: "k", req: acquireReq{owner: "w", ttl: time.Minute}},
				{ctx: ctx, key: "new", req: acquireReq{owner: "w", ttl: time.Minute}},
			}
			if err := s.execAcquire(ctx, calls); err != nil {
				return err
			}
			for _, c := range calls {
				if c.err == nil {
					return fmt.Errorf("batch granted %q at token %d", c.key, c.res.Token)
				}
			}
			return calls[0].err
		},
	}, {
		// Bump raises the floor of the tables it finds; on tables that
		// are not the Store's it must refuse, not report on another
		// store's.
		name:   "Bump",
		drop:   dropTables,
		remake: func(t *testing.T, ctx context.Context, db testDB) []lease.Lease { another(t, ctx, db); return nil },
		first: func(ctx context.Context, s *Store) error {
			rep, err := s.Bump(ctx, 10)
			if err == nil {
				return fmt.Errorf("Bump raised the floor of the new tables to %d", rep.Floor)
			}
			return err
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := newTestDB(t, 8)
			s, err := Open(ctx, db.url, WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			id := s.StoreID()
			granted := leasetest.Grants(t, ctx, s, "k", 3, false)
			issued := leasetest.Highest(granted)
			// A watch running through it all: its first event is k held.
			watching, watchEnded := make(chan struct{}), make(chan error, 1)
			wctx, stopWatch := context.WithCancel(ctx)
			defer func() { stopWatch(); <-watchEnded }()
			go func() {
				first := true
				for _, err := range s.Watch(wctx, "") {
					if first {
						close(watching)
						first = false
					}
					if err != nil {
						watchEnded <- err
						return
					}
				}
				watchEnded <- nil
			}()
			select {
			case <-watching:
			case <-ctx.Done():
				t.Fatal("the watch never started")
			}
			if _, err := db.pool.Exec(ctx, tc.drop); err != nil {
				t.Fatal(err)
			}
			theirs := tc.remake(t, ctx, db)
			rows := func() (keys int, floor int64) {
				t.Helper()
				if err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.lease_leases), (SELECT token_floor FROM `+schema+`.lease_meta)`).Scan(&keys, &floor); err != nil {
					t.Fatal(err)
				}
				return keys, floor
			}
			keysBefore, floorBefore := rows()
			first := tc.first
			if first == nil {
				first = func(ctx context.Context, s *Store) error {
					l, err := s.Acquire(ctx, "k", "w", time.Minute)
					if err == nil {
						return fmt.Errorf("granted at token %d", l.Token)
					}
					return err
				}
			}
			err = first(ctx, s)
			if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "dropped and made again") {
				t.Fatalf("first operation on the new tables, after the Store issued k up to token %d: %v; want ErrUnavailable saying the tables were dropped and made again", issued, err)
			}
			// Every later operation, a grant of a key the Store never
			// granted too, is refused the same way.
			later := map[string]func() error{
				"Acquire of k":   func() error { _, err := s.Acquire(ctx, "k", "w", time.Minute); return err },
				"Acquire of new": func() error { _, err := s.Acquire(ctx, "new", "w", time.Minute); return err },
				"Renew":          func() error { _, err := s.Renew(ctx, granted[2], time.Minute); return err },
				"RenewBatch": func() error {
					_, err := s.RenewBatch(ctx, []lease.Renewal{{Lease: granted[2], TTL: time.Minute}})
					return err
				},
				"Release":    func() error { return s.Release(ctx, granted[2]) },
				"Get":        func() error { _, err := s.Get(ctx, "k"); return err },
				"List":       func() error { _, err := s.List(ctx, "", lease.Page{}); return err },
				"WaitChange": func() error { return s.WaitChange(ctx, "k") },
				"Bump":       func() error { _, err := s.Bump(ctx, 10); return err },
				"Watch": func() error {
					for _, err := range s.Watch(ctx, "") {
						return err
					}
					return nil
				},
			}
			for name, op := range later {
				if err := op(); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "dropped and made again") {
					t.Errorf("%s after the refusal: %v; want ErrUnavailable saying the tables were dropped and made again", name, err)
				}
			}
			select {
			case err := <-watchEnded:
				if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "dropped and made again") {
					t.Errorf("a watch running at the refusal ended with %v; want ErrUnavailable saying the tables were dropped and made again", err)
				}
				watchEnded <- err // for the deferred wait
			case <-time.After(10 * time.Second):
				t.Errorf("a watch running at the refusal did not end in 10 s")
			}
			if got := s.StoreID(); got != id {
				t.Errorf("StoreID %q after the refusal; want the one it served, %q", got, id)
			}
			if keys, floor := rows(); keys != keysBefore || floor != floorBefore {
				t.Errorf("the new tables hold %d keys at floor %d after the refusal; %d at floor %d before", keys, floor, keysBefore, floorBefore)
			}
			// The new tables serve a Store opened on them, from their own
			// tokens.
			fresh, err := Open(ctx, db.url, WithSchema(schema))
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			if fresh.StoreID() == id {
				t.Fatalf("the new tables' StoreID %q is the dropped ones'", id)
			}
			if l := leasetest.Grants(t, ctx, fresh, "k", 1, true)[0]; l.Token != leasetest.Highest(theirs)+1 {
				t.Errorf("a Store on the new tables granted k at token %d; want %d", l.Token, leasetest.Highest(theirs)+1)
			}
		})
	}
}

// byHand makes the tables of schema version in schema, as an operator
// restoring an empty schema would, with a store id of their own from
// version 3 on.
func byHand(t *testing.T, ctx context.Context, db testDB, schema string, version int) {
	t.Helper()
	n, err := newNames(schema, DefaultTablePrefix)
	if err != nil {
		t.Fatal(err)
	}
	ddl := []string{`CREATE TABLE ` + n.meta + ` (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)`}
	for v := range version {
		ddl = append(ddl, migrations[v](n)...)
	}
	if version >= 3 {
		ddl = append(ddl, `INSERT INTO `+n.meta+` (version, store_id) VALUES (`+strconv.Itoa(version)+`, '`+lease.NewID().Reveal()+`')`)
	} else {
		ddl = append(ddl, `INSERT INTO `+n.meta+` (version) VALUES (`+strconv.Itoa(version)+`)`)
	}
	for _, stmt := range ddl {
		if _, err := db.pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}
