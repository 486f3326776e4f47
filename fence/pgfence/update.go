package pgfence

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlguard"
)

// Update is a fenced single-row UPDATE for a table whose rows carry their
// own fencing token column:
//
//	UPDATE <Table> SET <Set…>, <TokenColumn> = $t
//	WHERE <IDColumn> = $id AND coalesce(<TokenColumn>, 0) <= $t
//
// (< instead of <= in fence.Strict mode). The comparison and the write are
// one statement on one row, so they are atomic without a transaction of the
// caller's; a NULL token counts as 0. Identifiers are quoted, values are
// parameters.
type Update struct {
	// Table is the table, optionally schema-qualified: pgx.Identifier{"jobs"}
	// or pgx.Identifier{"app", "jobs"}.
	Table pgx.Identifier
	// IDColumn names the column that identifies the row; it must be unique.
	IDColumn string
	// ID is the row's IDColumn value.
	ID any
	// TokenColumn names the row's bigint fencing token column.
	TokenColumn string
	// Token is the writer's fencing token.
	Token lease.Token
	// Set maps columns to their new values. It may be empty: then the
	// update only records the token.
	Set map[string]any
	// Mode is the rule tokens are admitted by; the zero value is AtLeast.
	Mode fence.Mode
}

// SQL returns the UPDATE statement and its arguments, for callers that send
// it themselves (in a batch, say). The statement affects one row if the
// token is admitted and none if it is stale or the row is missing. Set's
// columns are written in name order, so equal updates give equal SQL (and
// share a prepared statement).
func (u Update) SQL() (string, []any, error) { return dialect.UpdateSQL(u.row()) }

func (u Update) row() sqlguard.Update {
	return sqlguard.Update{Table: u.Table, IDColumn: u.IDColumn, ID: u.ID, TokenColumn: u.TokenColumn,
		Token: u.Token, Set: u.Set, Mode: u.Mode}
}

// UpdateRow runs u through q (a pool, a connection or the caller's
// transaction). It returns nil if the row was updated; a
// *fence.StaleTokenError, matching lease.ErrStaleToken, if the row's token
// is newer than u.Token allows; and an error matching pgx.ErrNoRows if no
// row has that ID. Only a rejected update costs a second statement: a read
// of the row's token, to tell stale from missing.
func UpdateRow(ctx context.Context, q Querier, u Update) error {
	if q == nil {
		return invalidf("querier is nil")
	}
	return dialect.UpdateRow(ctx, u.row(),
		func(ctx context.Context, sql string, args []any) (int64, error) {
			tag, err := q.Exec(ctx, sql, args...)
			return tag.RowsAffected(), err
		},
		query(q))
}
