package pgfence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
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
func (u Update) SQL() (string, []any, error) {
	if err := u.validate(); err != nil {
		return "", nil, err
	}
	cols := make([]string, 0, len(u.Set))
	for c := range u.Set {
		cols = append(cols, c)
	}
	slices.Sort(cols)
	var b strings.Builder
	args := make([]any, 0, len(cols)+2)
	b.WriteString("UPDATE ")
	b.WriteString(u.Table.Sanitize())
	b.WriteString(" SET ")
	for _, c := range cols {
		args = append(args, u.Set[c])
		b.WriteString(pgx.Identifier{c}.Sanitize())
		b.WriteString(" = $")
		b.WriteString(strconv.Itoa(len(args)))
		b.WriteString(", ")
	}
	tok := pgx.Identifier{u.TokenColumn}.Sanitize()
	args = append(args, int64(u.Token))
	tokArg := "$" + strconv.Itoa(len(args))
	args = append(args, u.ID)
	idArg := "$" + strconv.Itoa(len(args))
	cmp := " <= "
	if u.Mode == fence.Strict {
		cmp = " < "
	}
	b.WriteString(tok + " = " + tokArg)
	b.WriteString(" WHERE " + pgx.Identifier{u.IDColumn}.Sanitize() + " = " + idArg)
	b.WriteString(" AND coalesce(" + tok + ", 0)" + cmp + tokArg + "::bigint")
	return b.String(), args, nil
}

func (u Update) validate() error {
	if len(u.Table) == 0 || len(u.Table) > 2 {
		return invalidf("update table must be a name or schema and name, got %d parts", len(u.Table))
	}
	for _, part := range u.Table {
		if err := checkIdent("table", part); err != nil {
			return err
		}
	}
	if err := checkIdent("id column", u.IDColumn); err != nil {
		return err
	}
	if err := checkIdent("token column", u.TokenColumn); err != nil {
		return err
	}
	if u.IDColumn == u.TokenColumn {
		return invalidf("id column and token column are both %q", u.IDColumn)
	}
	if u.ID == nil {
		return invalidf("update id is nil")
	}
	for c := range u.Set {
		if err := checkIdent("set column", c); err != nil {
			return err
		}
		if c == u.IDColumn || c == u.TokenColumn {
			return invalidf("set column %q is the id or token column", c)
		}
	}
	if u.Mode != fence.AtLeast && u.Mode != fence.Strict {
		return invalidf("unknown mode %v", u.Mode)
	}
	if err := fence.ValidateToken(u.Token); err != nil {
		return fmt.Errorf("pgfence: %w", err)
	}
	return nil
}

// resource names the row in errors: table/id.
func (u Update) resource() string {
	return fmt.Sprintf("%s/%v", strings.Join(u.Table, "."), u.ID)
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
	sql, args, err := u.SQL()
	if err != nil {
		return err
	}
	read := `SELECT coalesce(` + pgx.Identifier{u.TokenColumn}.Sanitize() + `, 0) FROM ` + u.Table.Sanitize() +
		` WHERE ` + pgx.Identifier{u.IDColumn}.Sanitize() + ` = $1`
	// Outside a transaction the row can change between the update and the
	// read; a read that would have admitted the token means exactly that,
	// so try again a few times.
	for range 3 {
		tag, err := q.Exec(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("pgfence: updating %s: %w", u.resource(), err)
		}
		switch n := tag.RowsAffected(); {
		case n == 1:
			return nil
		case n > 1:
			return invalidf("updating %s changed %d rows: %q is not unique", u.resource(), n, u.IDColumn)
		}
		var highest int64
		err = q.QueryRow(ctx, read, u.ID).Scan(&highest)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("pgfence: no row %s: %w", u.resource(), pgx.ErrNoRows)
		case err != nil:
			return fmt.Errorf("pgfence: reading the token of %s: %w", u.resource(), err)
		}
		if !u.Mode.Admits(u.Token, lease.Token(highest)) {
			return &fence.StaleTokenError{Resource: u.resource(), Token: u.Token, Highest: lease.Token(highest), Mode: u.Mode}
		}
	}
	return fmt.Errorf("pgfence: %s kept changing under the update: %w", u.resource(), lease.ErrUnavailable)
}
