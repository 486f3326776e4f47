package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// create makes the guard's table if it does not exist, then checks that
// the table found under its name is one the guard can trust.
func (g *Guard) create(ctx context.Context, db Querier, name string) error {
	ddl := sqliteTable
	if g.dialect == MySQL {
		// Only when missing: an existing table needs no CREATE privilege,
		// which MySQL checks even for CREATE TABLE IF NOT EXISTS.
		// information_schema compares names as the server's tables do
		// (by case or not, per lower_case_table_names).
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, name).Scan(&n); err != nil {
			return fmt.Errorf("sqlfence: looking for %s: %w", g.marks.Table, err)
		}
		if n > 0 {
			return g.verifyMySQL(ctx, db, name)
		}
		if _, inTx := db.(*sql.Tx); inTx {
			// CREATE TABLE would commit the caller's transaction now, and
			// leave the connection in autocommit for its every statement
			// after, a Check's included.
			return g.d.Invalidf("table %s is missing, and creating it would commit the transaction New was given: pass a *sql.DB or *sql.Conn", g.marks.Table)
		}
		ddl = mysqlTable
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+g.marks.Table+ddl); err != nil {
		return fmt.Errorf("sqlfence: creating %s: %w", g.marks.Table, err)
	}
	if g.dialect == MySQL {
		return g.verifyMySQL(ctx, db, name)
	}
	return g.verifySQLite(ctx, db, name)
}

// refuse is New's error for an existing table the guard cannot trust.
func (g *Guard) refuse(why string, args ...any) error {
	return g.d.Invalidf("table %s exists but cannot hold the guard's marks: %s (drop or rename it, or name another WithTable)",
		g.marks.Table, fmt.Sprintf(why, args...))
}

// verifyMySQL checks the table as the guard relies on it: InnoDB (a lock
// per row and a commit shared with the write), a BIGINT token, a binary
// resource (compared byte-wise, as Go compares names), no AUTO_INCREMENT
// column (whose value would be the insert ID), and resource as its one
// unique key — without one, INSERT … ON DUPLICATE KEY UPDATE never
// meets the resource's row, and every token would be admitted as the
// first; with another, it could meet another resource's row.
func (g *Guard) verifyMySQL(ctx context.Context, db Querier, name string) error {
	const where = ` WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`
	var engine string
	if err := db.QueryRowContext(ctx, `SELECT coalesce(ENGINE, '') FROM information_schema.TABLES`+where, name).Scan(&engine); err != nil {
		return fmt.Errorf("sqlfence: checking %s: %w", g.marks.Table, err)
	}
	if !strings.EqualFold(engine, "InnoDB") {
		return g.refuse("its engine is %q, not InnoDB", engine)
	}
	for col, want := range map[string][]string{"resource": {"varbinary", "binary"}, "token": {"bigint"}} {
		var typ string
		err := db.QueryRowContext(ctx, `SELECT coalesce(max(DATA_TYPE), '') FROM information_schema.COLUMNS`+where+` AND COLUMN_NAME = ?`, name, col).Scan(&typ)
		if err != nil {
			return fmt.Errorf("sqlfence: checking %s: %w", g.marks.Table, err)
		}
		if !slices.Contains(want, strings.ToLower(typ)) {
			return g.refuse("column %s is %q, want %s", col, typ, strings.Join(want, " or "))
		}
	}
	var counters int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.COLUMNS`+where+
		` AND EXTRA LIKE '%auto_increment%'`, name).Scan(&counters); err != nil {
		return fmt.Errorf("sqlfence: checking %s: %w", g.marks.Table, err)
	}
	if counters > 0 {
		// A first Check's insert would report the counter's value as the
		// insert ID, which Check reads as the token the row held.
		return g.refuse("it has an AUTO_INCREMENT column")
	}
	// The columns of every unique key: exactly one, resource, whole.
	var n int
	var whole bool
	var keys string
	if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(max(COLUMN_NAME = 'resource' AND SUB_PART IS NULL), 0),
		coalesce(GROUP_CONCAT(INDEX_NAME, '(', COLUMN_NAME, coalesce(concat(' prefix ', SUB_PART), ''), ')' ORDER BY INDEX_NAME, SEQ_IN_INDEX), '')
		FROM information_schema.STATISTICS`+where+` AND NON_UNIQUE = 0`, name).Scan(&n, &whole, &keys); err != nil {
		return fmt.Errorf("sqlfence: checking %s: %w", g.marks.Table, err)
	}
	if n != 1 || !whole {
		return g.refuse("its unique keys are [%s], want one, on resource", keys)
	}
	return nil
}

// verifySQLite checks that the table's token has INTEGER affinity: with
// TEXT affinity SQLite would store the tokens as text and compare them as
// text, where "10" < "9".
func (g *Guard) verifySQLite(ctx context.Context, db Querier, name string) error {
	var typ string
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(type), '') FROM pragma_table_info(?, 'main') WHERE name = 'token'`, name).Scan(&typ); err != nil {
		return fmt.Errorf("sqlfence: checking %s: %w", g.marks.Table, err)
	}
	if !strings.Contains(strings.ToUpper(typ), "INT") { // SQLite's rule for INTEGER affinity
		return g.refuse("column token is %q, want INTEGER", typ)
	}
	return nil
}
