package sqlfence

import (
	"context"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlguard"
)

// Update is a fenced single-row UPDATE for a table whose rows carry their
// own fencing token column:
//
//	UPDATE <Table> SET <Set…>, <TokenColumn> = t
//	WHERE <IDColumn> = id AND coalesce(<TokenColumn>, 0) <= t
//
// (< instead of <= in fence.Strict mode; on MySQL the token is assigned as
// LAST_INSERT_ID(t), see the package doc). The comparison and the write are
// one statement on one row, so they are atomic without a transaction of the
// caller's; a NULL token counts as 0. Identifiers are quoted, values are
// parameters.
type Update struct {
	// Table is the table, optionally qualified: {"jobs"} or {"app", "jobs"}
	// (a MySQL database, an attached SQLite schema).
	Table []string
	// IDColumn names the column that identifies the row; it must be unique.
	IDColumn string
	// ID is the row's IDColumn value.
	ID any
	// TokenColumn names the row's integer fencing token column.
	TokenColumn string
	// Token is the writer's fencing token.
	Token lease.Token
	// Set maps columns to their new values. It may be empty: then the
	// update only records the token.
	Set map[string]any
	// Mode is the rule tokens are admitted by; the zero value is AtLeast.
	Mode fence.Mode
}

func (u Update) row() sqlguard.Update {
	return sqlguard.Update{Table: u.Table, IDColumn: u.IDColumn, ID: u.ID, TokenColumn: u.TokenColumn,
		Token: u.Token, Set: u.Set, Mode: u.Mode}
}

// SQL returns the UPDATE statement in d's spelling and its arguments, for
// callers that send it themselves. On SQLite the statement affects one row
// if the token is admitted and none if it is stale or the row is missing;
// on MySQL it matches one row or none (see UpdateRow for telling them
// apart). Set's columns are written in name order, so equal updates give
// equal SQL (and share a prepared statement).
func (u Update) SQL(d Dialect) (string, []any, error) {
	sp, err := d.spelling()
	if err != nil {
		return "", nil, err
	}
	return sp.UpdateSQL(u.row())
}

// UpdateRow runs u through q (a *sql.DB, *sql.Conn or the caller's
// *sql.Tx) in d's spelling. It returns nil if the row was updated; a
// *fence.StaleTokenError, matching lease.ErrStaleToken, if the row's token
// is newer than u.Token allows; and an error matching sql.ErrNoRows if no
// row has that ID. Only a rejected update costs a second statement: a read
// of the row's token, to tell stale from missing.
func UpdateRow(ctx context.Context, q Querier, d Dialect, u Update) error {
	sp, err := d.spelling()
	if err != nil {
		return err
	}
	if q == nil {
		return sp.Invalidf("querier is nil")
	}
	return sp.UpdateRow(ctx, u.row(),
		func(ctx context.Context, query string, args []any) (int64, error) {
			res, err := q.ExecContext(ctx, query, args...)
			if err != nil {
				return 0, err
			}
			n, err := res.RowsAffected()
			if err != nil || n != 0 || d != MySQL {
				return n, err
			}
			// MySQL does not count a matched row whose values did not
			// change; the token's LAST_INSERT_ID says it matched.
			id, err := res.LastInsertId()
			if err == nil && id == int64(u.Token) {
				n = 1
			}
			return n, err
		},
		query(q))
}
