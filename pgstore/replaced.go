package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehq/lease"
)

// Tables dropped under a running Store and made anew (doc.go, "Tokens never
// regress"): their rows, and with them every key's high-water mark and the
// token floor, are gone, and their tokens start again below ones the Store
// issued. The Store finds out in one of two ways. An operation that meets
// the tables missing (42P01) makes the next one prepare them again, and the
// preparation reads a store id other than the one the Store served
// (prepare). Tables made anew by anyone else first (another Store's first
// use, an operator) are never missing to it: there every grant reads the
// token floor only where <prefix>meta holds the Store's own id, and raises
// an error carrying replacedMark where it does not (queries.go), so that
// no grant comes out of tables that are not the Store's. Either way the
// Store refuses every operation from then on.

// identity is the store id of the tables a Store serves, read by their
// first preparation.
type identity struct {
	id      string // store_id in <prefix>meta, 32 hex digits
	storeID string // StoreID's: storeIDOf(schema, prefix, id)
}

// replacedMark names the error a grant raises on tables whose store id is
// not the Store's (SQLSTATE 42704, unrecognized configuration parameter,
// as volatileMark). No quote and no dot: it is a setting's name in a SQL
// string, and a name with a dot could be set as a custom setting.
const replacedMark = "pgstore: the tables hold another store id than this Store serves, no grant"

// isReplacedMark reports whether err is a grant's refusal on tables whose
// store id is not the Store's.
func isReplacedMark(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704" && strings.Contains(pgErr.Message, replacedMark)
}

// replacedError is the answer of a Store whose tables were dropped and made
// anew: it matches lease.ErrUnavailable.
type replacedError struct {
	leases, meta string // the tables
	was, now     string // the StoreID served, and the new tables' (or what is known of it)
}

func (e *replacedError) Error() string {
	return fmt.Sprintf("pgstore: %v: the tables %s and %s were dropped and made again under this running Store (store id %s, now %s): "+
		"their tokens would start again below ones it issued (I1); restore the old tables and run lease bump, or restart what serves them to serve the new ones",
		lease.ErrUnavailable, e.leases, e.meta, e.was, e.now)
}

func (e *replacedError) Unwrap() error { return lease.ErrUnavailable }

// refuseReplaced makes the Store answer every operation from now on with
// the error it returns: the tables it served are gone, and the ones in
// their place hold the store id now (a StoreID, or what is known of it).
// Watches running end with it too, as they would show the new tables'
// changes, tokens from 1 again, as the Store's.
func (s *Store) refuseReplaced(now string) error {
	var err error = &replacedError{leases: s.n.leases, meta: s.n.meta, was: s.StoreID(), now: now}
	if s.replaced.CompareAndSwap(nil, &err) {
		// Not here: the caller may hold a connection of the pool, which
		// a watch being started waits for under the watcher's lock.
		s.bg.Go(func(context.Context) { s.endWatches(err) })
	}
	return *s.replaced.Load()
}

// refusal returns the error a Store whose tables were replaced answers
// every operation with, or nil.
func (s *Store) refusal() error {
	if p := s.replaced.Load(); p != nil {
		return *p
	}
	return nil
}

// idNow reads the store id of the tables in place, to say what replaced
// the Store's: one more round trip, on the way to refusing.
func (s *Store) idNow(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) string {
	var id *string
	if err := q.QueryRow(ctx, `SELECT store_id FROM `+s.n.meta).Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "no store id: " + s.n.meta + " has no row"
		}
		return fmt.Sprintf("unknown: %v", err)
	}
	if id == nil {
		return "no store id"
	}
	return storeIDOf(s.schema, s.prefix, *id)
}
