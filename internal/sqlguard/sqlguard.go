// Package sqlguard is what the SQL guards, pgfence (PostgreSQL through pgx)
// and sqlfence (MySQL, MariaDB and SQLite through database/sql), have in
// common: the comparison a mode admits tokens by, the checks of their input,
// the guard's table of marks with the conditional upsert that PostgreSQL and
// SQLite run for Check, and the fenced single-row UPDATE with the loop that
// tells a stale token from a missing row. A Dialect says how one engine
// spells them; the guards bring their drivers' calls.
package sqlguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlident"
)

// Cmp is the comparison that admits a token in mode m, written
// `recorded <Cmp> token`: "<=" for fence.AtLeast, "<" for fence.Strict.
func Cmp(m fence.Mode) string {
	if m == fence.Strict {
		return "<"
	}
	return "<="
}

// Dialect is how one engine spells the statements, and names the package
// whose errors they are.
type Dialect struct {
	// Pkg is the package errors start with ("pgfence", "sqlfence").
	Pkg string
	// Ident are the engine's limits on identifiers.
	Ident sqlident.Rules
	// Quote quotes one identifier.
	Quote func(name string) string
	// Param is the placeholder of the n-th argument, n from 1.
	Param func(n int) string
	// Numbered says a placeholder names its argument ($1, ?1), so one
	// argument can stand twice in a statement; otherwise (?) each
	// placeholder takes the next argument, and a value used twice is
	// passed twice.
	Numbered bool
	// CompareToken and SetToken, if set, wrap the token's placeholder where
	// the fenced UPDATE compares it and where it assigns it.
	CompareToken, SetToken func(param string) string
	// NoRows is the driver's error for a query that found no row; UpdateRow
	// wraps it when the row to update does not exist.
	NoRows error
	// LockingRead, if set, ends the read UpdateRow makes after a rejected
	// update, so that the read sees the latest committed row, as the
	// UPDATE did. InnoDB needs it (" FOR UPDATE"): in a REPEATABLE READ
	// transaction its UPDATE reads the latest row but a plain SELECT the
	// transaction's snapshot, where a newer token or the row itself may be
	// missing. PostgreSQL fails such an UPDATE with a serialization error
	// instead, and SQLite's writer sees the latest database.
	LockingRead string
}

// Invalidf returns an error matching lease.ErrInvalid, in d's package.
func (d Dialect) Invalidf(format string, args ...any) error {
	return fmt.Errorf("%s: %w: "+format, append([]any{d.Pkg, lease.ErrInvalid}, args...)...)
}

// CheckIdent checks name against the engine's limits on identifiers; what
// names it in the error, which matches lease.ErrInvalid.
func (d Dialect) CheckIdent(what, name string) error {
	if err := d.Ident.Check(what, name); err != nil {
		return d.Invalidf("%v", err)
	}
	return nil
}

// CheckMode checks that m is a mode a guard knows.
func (d Dialect) CheckMode(m fence.Mode) error {
	if err := fence.ValidateMode(m); err != nil {
		return fmt.Errorf("%s: %w", d.Pkg, err)
	}
	return nil
}

// Validate checks the resource and token of a Check.
func (d Dialect) Validate(resource string, token lease.Token) error {
	if err := d.ValidateResource(resource); err != nil {
		return err
	}
	if err := fence.ValidateToken(token); err != nil {
		return fmt.Errorf("%s: %w", d.Pkg, err)
	}
	return nil
}

// ValidateResource checks a resource name: a valid lease key.
func (d Dialect) ValidateResource(resource string) error {
	if err := lease.ValidateKey(resource); err != nil {
		return fmt.Errorf("%s: resource: %w", d.Pkg, err)
	}
	return nil
}

// Name quotes parts and joins them with dots: a table, schema-qualified if
// given two parts.
func (d Dialect) Name(parts ...string) string {
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = d.Quote(p)
	}
	return strings.Join(quoted, ".")
}

// Query runs a statement that returns one integer column and takes that
// from its first row; an error matching Dialect.NoRows says it returned no
// row. The guards make one of their driver's QueryRow.
type Query func(ctx context.Context, sql string, args ...any) (int64, error)

// Marks is a guard's table of high-water marks (columns resource and
// token), with its statements in one engine's spelling.
type Marks struct {
	d    *Dialect
	mode fence.Mode
	// Table is the table's quoted name.
	Table string
	// Upsert is Check's statement: on engines with INSERT … ON CONFLICT and
	// RETURNING (PostgreSQL, SQLite), it records its second argument as
	// the resource's token if the mode admits it and returns it, and
	// returns no row otherwise. Either way it leaves the resource's row
	// (PostgreSQL) or the database (SQLite) locked until the transaction
	// ends, so the guard's answer stays true until then. A stored token
	// below 1 (or NULL) admits nothing, so that Check can refuse it as a
	// mark no guard wrote. A guard on another engine sets its own.
	Upsert string
	// Select reads a resource's token, NULL as 0.
	Select string
	// ID, if not 0, is the identity of the table the guard was made with
	// (PostgreSQL: its OID), and Upsert returns the identity of the table
	// it wrote to in place of the token (see ReturnID): Check refuses a
	// token admitted by a table that is not the guard's any more.
	ID int64
}

// ReturnID makes Upsert return expr, the identity of the table it writes
// to, and Check compare it with id, the identity of the table the guard
// verified. A table dropped and made again (another process's New makes
// it, empty) has another identity: Check then refuses every admitted
// token, where it would have judged it against the new table's empty
// marks.
func (m *Marks) ReturnID(id int64, expr string) {
	m.Upsert = strings.TrimSuffix(m.Upsert, "RETURNING token") + "RETURNING " + expr
	m.ID = id
}

// Marks returns the statements of the table named by parts (a name, or a
// schema and a name) for a guard admitting tokens by mode.
func (d *Dialect) Marks(mode fence.Mode, parts ...string) Marks {
	table := d.Name(parts...)
	return Marks{d: d, mode: mode, Table: table,
		Upsert: `INSERT INTO ` + table + ` AS f (resource, token) VALUES (` + d.Param(1) + `, ` + d.Param(2) + `)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
WHERE f.token >= 1 AND f.token ` + Cmp(mode) + ` EXCLUDED.token
RETURNING token`,
		Select: `SELECT coalesce(token, 0) FROM ` + table + ` WHERE resource = ` + d.Param(1),
	}
}

// Corrupt is the error for a resource whose row holds a token no guard
// writes — NULL, below 1 or above lease.MaxToken — which an operator's
// hand, or a table the guard did not create (without its CHECK), can
// leave: the guard cannot tell which tokens are late, so it admits none.
// stored describes the value. The error matches lease.ErrUnavailable, as
// a guard whose database cannot answer does.
func (m Marks) Corrupt(resource, stored string) error {
	return fmt.Errorf("%s: the stored token of %q in %s is %s, not a fencing token (1 to %d): no write is admitted until the row is repaired or deleted: %w",
		m.d.Pkg, resource, m.Table, stored, lease.MaxToken, lease.ErrUnavailable)
}

// Check runs Upsert through q, which must run in the writer's
// transaction. A rejection reads the token that rejected it, while the
// upsert's lock still holds, and returns a *fence.StaleTokenError, or
// Corrupt's error if that token is none a guard writes.
func (m Marks) Check(ctx context.Context, q Query, resource string, token lease.Token) error {
	if err := m.d.Validate(resource, token); err != nil {
		return err
	}
	id, err := q(ctx, m.Upsert, resource, int64(token))
	if err == nil {
		if m.ID != 0 && id != m.ID {
			return fmt.Errorf("%s: table %s is not the one this guard was made with (identity %d, now %d): it was dropped and made again, and every resource's mark with it, so no token can be judged: restore the marks (each above every token issued for its resource) and make a new guard: %w",
				m.d.Pkg, m.Table, m.ID, id, lease.ErrUnavailable)
		}
		return nil
	}
	if !errors.Is(err, m.d.NoRows) {
		return fmt.Errorf("%s: checking %q token %d: %w", m.d.Pkg, resource, token, err)
	}
	highest, err := m.Highest(ctx, q, resource)
	if err != nil {
		return err
	}
	return m.Stale(resource, token, highest)
}

// Stale is the rejection of token for resource by a mark of highest.
func (m Marks) Stale(resource string, token, highest lease.Token) error {
	return &fence.StaleTokenError{Resource: resource, Token: token, Highest: highest, Mode: m.mode}
}

// Highest returns the highest token accepted for resource, as q sees it; 0
// if none, and Corrupt's error if the row holds a token no guard writes.
func (m Marks) Highest(ctx context.Context, q Query, resource string) (lease.Token, error) {
	if err := m.d.ValidateResource(resource); err != nil {
		return 0, err
	}
	highest, err := q(ctx, m.Select, resource)
	switch {
	case errors.Is(err, m.d.NoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("%s: reading highest token of %q: %w", m.d.Pkg, resource, err)
	case highest < 1 || lease.Token(highest) > lease.MaxToken:
		return 0, m.Corrupt(resource, fmt.Sprintf("%d (NULL reads as 0)", highest))
	}
	return lease.Token(highest), nil
}

// Update is a fenced single-row UPDATE (pgfence.Update and sqlfence.Update
// are its public faces; see there).
type Update struct {
	Table       []string
	IDColumn    string
	ID          any
	TokenColumn string
	Token       lease.Token
	Set         map[string]any
	Mode        fence.Mode
}

// Resource names u's row in errors: table/id.
func (u Update) Resource() string {
	return fmt.Sprintf("%s/%v", strings.Join(u.Table, "."), u.ID)
}

// ValidateUpdate checks u before any statement is built from it.
func (d Dialect) ValidateUpdate(u Update) error {
	if len(u.Table) == 0 || len(u.Table) > 2 {
		return d.Invalidf("update table must be a name or schema and name, got %d parts", len(u.Table))
	}
	for _, part := range u.Table {
		if err := d.CheckIdent("table", part); err != nil {
			return err
		}
	}
	if err := d.CheckIdent("id column", u.IDColumn); err != nil {
		return err
	}
	if err := d.CheckIdent("token column", u.TokenColumn); err != nil {
		return err
	}
	if u.IDColumn == u.TokenColumn {
		return d.Invalidf("id column and token column are both %q", u.IDColumn)
	}
	if u.ID == nil {
		return d.Invalidf("update id is nil")
	}
	for c := range u.Set {
		if err := d.CheckIdent("set column", c); err != nil {
			return err
		}
		if c == u.IDColumn || c == u.TokenColumn {
			return d.Invalidf("set column %q is the id or token column", c)
		}
	}
	if err := d.CheckMode(u.Mode); err != nil {
		return err
	}
	if err := fence.ValidateToken(u.Token); err != nil {
		return fmt.Errorf("%s: %w", d.Pkg, err)
	}
	return nil
}

// UpdateSQL returns u's statement and arguments:
//
//	UPDATE <Table> SET <Set…>, <TokenColumn> = t
//	WHERE <IDColumn> = id AND coalesce(<TokenColumn>, 0) <= t
//
// (< in Strict mode), Set's columns in name order so that equal updates
// give equal SQL. It affects the row if the token is admitted and no row
// if it is stale or the row is missing.
func (d Dialect) UpdateSQL(u Update) (string, []any, error) {
	if err := d.ValidateUpdate(u); err != nil {
		return "", nil, err
	}
	cols := make([]string, 0, len(u.Set))
	for c := range u.Set {
		cols = append(cols, c)
	}
	slices.Sort(cols)
	var b strings.Builder
	args := make([]any, 0, len(cols)+3)
	arg := func(v any) string {
		args = append(args, v)
		return d.Param(len(args))
	}
	b.WriteString("UPDATE ")
	b.WriteString(d.Name(u.Table...))
	b.WriteString(" SET ")
	for _, c := range cols {
		b.WriteString(d.Quote(c))
		b.WriteString(" = ")
		b.WriteString(arg(u.Set[c]))
		b.WriteString(", ")
	}
	tok := d.Quote(u.TokenColumn)
	setTok := arg(int64(u.Token))
	cmpTok := setTok
	if d.SetToken != nil {
		setTok = d.SetToken(setTok)
	}
	b.WriteString(tok + " = " + setTok)
	b.WriteString(" WHERE " + d.Quote(u.IDColumn) + " = " + arg(u.ID))
	if !d.Numbered {
		cmpTok = arg(int64(u.Token))
	}
	if d.CompareToken != nil {
		cmpTok = d.CompareToken(cmpTok)
	}
	b.WriteString(" AND coalesce(" + tok + ", 0) " + Cmp(u.Mode) + " " + cmpTok)
	return b.String(), args, nil
}

// Exec runs an UPDATE and returns how many rows its WHERE matched.
type Exec func(ctx context.Context, sql string, args []any) (matched int64, err error)

// UpdateRow runs u through exec. It returns nil if the row was updated; a
// *fence.StaleTokenError if the row's token is newer than u.Token allows;
// and an error matching d.NoRows if no row has u.ID. Only a rejected update
// costs a second statement, through read: the row's token, to tell stale
// from missing.
func (d Dialect) UpdateRow(ctx context.Context, u Update, exec Exec, read Query) error {
	sql, args, err := d.UpdateSQL(u)
	if err != nil {
		return err
	}
	readSQL := `SELECT coalesce(` + d.Quote(u.TokenColumn) + `, 0) FROM ` + d.Name(u.Table...) +
		` WHERE ` + d.Quote(u.IDColumn) + ` = ` + d.Param(1) + d.LockingRead
	// Outside a transaction the row can change between the update and the
	// read; a read that would have admitted the token means exactly that
	// (tokens only rise, so the row was missing at the update and has been
	// written since): try again a few times.
	for range 3 {
		n, err := exec(ctx, sql, args)
		if err != nil {
			return fmt.Errorf("%s: updating %s: %w", d.Pkg, u.Resource(), err)
		}
		switch {
		case n == 1:
			return nil
		case n > 1:
			return d.Invalidf("updating %s changed %d rows: %q is not unique", u.Resource(), n, u.IDColumn)
		}
		highest, err := read(ctx, readSQL, u.ID)
		switch {
		case errors.Is(err, d.NoRows):
			return fmt.Errorf("%s: no row %s: %w", d.Pkg, u.Resource(), d.NoRows)
		case err != nil:
			return fmt.Errorf("%s: reading the token of %s: %w", d.Pkg, u.Resource(), err)
		case !u.Mode.Admits(u.Token, lease.Token(highest)):
			return &fence.StaleTokenError{Resource: u.Resource(), Token: u.Token, Highest: lease.Token(highest), Mode: u.Mode}
		}
	}
	return fmt.Errorf("%s: %s kept changing under the update: %w", d.Pkg, u.Resource(), lease.ErrUnavailable)
}
