package sqlguard_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlguard"
	"github.com/leasehq/lease/internal/sqlident"
)

var (
	numbered = sqlguard.Dialect{Pkg: "numbered", Ident: sqlident.SQLite, Quote: strconv.Quote,
		Param: func(n int) string { return "?" + strconv.Itoa(n) }, Numbered: true, NoRows: sql.ErrNoRows}
	positional = sqlguard.Dialect{Pkg: "positional", Ident: sqlident.MySQL, Quote: func(s string) string { return "`" + s + "`" },
		Param:    func(int) string { return "?" },
		SetToken: func(p string) string { return "f(" + p + ")" }, NoRows: sql.ErrNoRows}
)

func TestCmp(t *testing.T) {
	if got := sqlguard.Cmp(fence.AtLeast); got != "<=" {
		t.Errorf("Cmp(AtLeast) = %q", got)
	}
	if got := sqlguard.Cmp(fence.Strict); got != "<" {
		t.Errorf("Cmp(Strict) = %q", got)
	}
}

// TestUpdateSQL: a dialect whose placeholders cannot name their argument
// gets the token twice, in the order the placeholders stand.
func TestUpdateSQL(t *testing.T) {
	u := sqlguard.Update{Table: []string{"app", "jobs"}, IDColumn: "id", ID: 7, TokenColumn: "tok", Token: 3,
		Set: map[string]any{"b": 2, "a": 1}, Mode: fence.Strict}
	for _, tc := range []struct {
		d        sqlguard.Dialect
		sql, arg string
	}{
		{numbered, `UPDATE "app"."jobs" SET "a" = ?1, "b" = ?2, "tok" = ?3 WHERE "id" = ?4 AND coalesce("tok", 0) < ?3`, "[1 2 3 7]"},
		{positional, "UPDATE `app`.`jobs` SET `a` = ?, `b` = ?, `tok` = f(?) WHERE `id` = ? AND coalesce(`tok`, 0) < ?", "[1 2 3 7 3]"},
	} {
		sql, args, err := tc.d.UpdateSQL(u)
		if err != nil || sql != tc.sql || fmt.Sprint(args) != tc.arg {
			t.Errorf("%s: UpdateSQL = %s %v, %v\nwant %s %s", tc.d.Pkg, sql, args, err, tc.sql, tc.arg)
		}
	}
	u.Table = []string{"a", "b", "c"}
	if _, _, err := positional.UpdateSQL(u); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("three-part table: %v, want ErrInvalid", err)
	}
}
