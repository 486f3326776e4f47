package pgstore

import (
	"context"

	"github.com/leasehq/lease"
)

// BumpReport says what Bump did.
type BumpReport struct {
	Keys   int         // keys with a row: every key ever acquired in the tables
	Top    lease.Token // the highest token of any row, or the floor if higher
	Floor  lease.Token // every token issued from now on is above it
	Leases int         // leases that were held, all ended by the bump
}

// Bump raises the token floor to n above the highest token the tables know
// (the floor included) and ends every lease, in one transaction. Run it
// after restoring the tables from a backup or a point-in-time recovery to
// an earlier point, before anything serves them: from then on every key,
// whether the restored rows know it or not, issues tokens above any the
// tables could have issued after the backup, unless some key was granted
// more than n times since (I1). Every row's token is raised to the floor
// too (a grant on a key with a row reads only its row), so Bump rewrites
// every row. The leases the restored rows hold are ended,
// not kept, as their holders may have given them up or lost them since:
// each ends as a release does (told to waiters and watchers), Renew and
// Release of it answer lease.ErrNotHeld, and its key is free at once. `lease bump` runs it with n = 2^40 (boltstore.DefaultBump)
// unless told otherwise.
//
// n must be at least 1, and the new floor below 2^53 (lease.MaxToken), so
// that tokens above it still fit; otherwise Bump changes nothing and
// returns an error matching lease.ErrInvalid. The tables are created or
// migrated first if need be (a backup of an older release's tables gets
// the floor column then). On tables that are not the Store's (dropped and
// made anew under it, with another store id) Bump changes nothing, and the
// Store refuses every operation from then on (see the package
// documentation, Tables dropped under a running Store). Bump locks the leases table against writes while
// it runs; a Store serving at the same time waits and keeps every key's
// tokens rising, but whoever holds a lease loses it.
func (s *Store) Bump(ctx context.Context, n uint64) (BumpReport, error) {
	if n == 0 {
		return BumpReport{}, invalidf("Bump needs at least 1")
	}
	if err := s.ready(ctx); err != nil {
		return BumpReport{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return BumpReport{}, s.wrap(ctx, "bump", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// No grant may slip between reading the highest token and raising the
	// floor: SHARE ROW EXCLUSIVE lets reads on, and keeps every acquire,
	// renew and release waiting until the commit.
	if _, err := tx.Exec(ctx, `LOCK TABLE `+s.n.leases+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		return BumpReport{}, s.fail(ctx, "bump: locking the leases table", err)
	}
	var rep BumpReport
	var top int64
	var floor *int64 // nil: the tables are not the Store's (replaced.go)
	id := s.ident.Load().id
	if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(max(token), 0), (SELECT token_floor FROM `+s.n.meta+` WHERE store_id = $1)
		FROM `+s.n.leases, id).Scan(&rep.Keys, &top, &floor); err != nil {
		return BumpReport{}, s.fail(ctx, "bump: reading the highest token", err)
	}
	if floor == nil {
		return BumpReport{}, s.refuseReplaced(s.idNow(ctx, tx))
	}
	t := uint64(max(top, *floor))
	next := t + n
	if next < t || next >= uint64(lease.MaxToken) {
		return BumpReport{}, invalidf("bump: the highest token %d + %d reaches past the largest token, %d: use a smaller bump", t, n, uint64(lease.MaxToken))
	}
	rep.Top, rep.Floor = lease.Token(t), lease.Token(next)
	if tag, err := tx.Exec(ctx, `UPDATE `+s.n.meta+` SET token_floor = $1 WHERE store_id = $2`, int64(next), id); err != nil {
		return BumpReport{}, s.wrap(ctx, "bump: raising the token floor", err)
	} else if tag.RowsAffected() != 1 {
		// Its store id changed since the read above.
		return BumpReport{}, s.refuseReplaced(s.idNow(ctx, tx))
	}
	// Each lease ends as a release does, told to waiters and watchers on
	// commit.
	tag, err := tx.Exec(ctx, `UPDATE `+s.n.leases+` AS l SET expires_at = '-infinity'
		FROM `+s.n.leases+` AS o
		WHERE o.key = l.key AND l.expires_at > clock_timestamp()
		RETURNING CASE WHEN l.wanted THEN pg_notify($1::text, l.key) END, `+told("'r'", "o.expires_at", "$2"),
		s.n.channel, s.n.watchChannel)
	if err != nil {
		return BumpReport{}, s.wrap(ctx, "bump: ending the leases", err)
	}
	rep.Leases = int(tag.RowsAffected())
	// Every row's token goes up to the floor, which spares a grant on a key
	// with a row from reading the floor (queries.go). Leases were ended
	// first, so that watchers were told them with the tokens they had.
	if _, err := tx.Exec(ctx, `UPDATE `+s.n.leases+` SET token = $1 WHERE token < $1`, int64(next)); err != nil {
		return BumpReport{}, s.wrap(ctx, "bump: raising the tokens", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return BumpReport{}, s.wrap(ctx, "bump: committing", err)
	}
	return rep, nil
}
