package sqlident_test

import (
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/sqlident"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules sqlident.Rules
		ok    bool
	}{
		{"", sqlident.SQLite, false},
		{"a\x00b", sqlident.SQLite, false},
		{"a\xffb", sqlident.SQLite, false},
		{`t"'; DROP TABLE x; --`, sqlident.SQLite, true},
		{strings.Repeat("t", 1000), sqlident.SQLite, true},
		{"🔒 ", sqlident.SQLite, true},

		{strings.Repeat("t", 63), sqlident.PostgreSQL, true},
		{strings.Repeat("t", 64), sqlident.PostgreSQL, false},
		{strings.Repeat("é", 32), sqlident.PostgreSQL, false}, // 64 bytes
		{"trailing ", sqlident.PostgreSQL, true},
		{"🔒", sqlident.PostgreSQL, true},

		{strings.Repeat("é", 64), sqlident.MySQL, true}, // 64 characters, 128 bytes
		{strings.Repeat("t", 65), sqlident.MySQL, false},
		{"trailing ", sqlident.MySQL, false},
		{" leading", sqlident.MySQL, true},
		{"🔒", sqlident.MySQL, false},
		{"日本語`x", sqlident.MySQL, true},
	} {
		err := tc.rules.Check("table", tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("%s.Check(%q) = %v, want ok %v", tc.rules.Engine, tc.name, err, tc.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "table ") {
			t.Errorf("%s.Check(%q) = %q: the message should start with what was checked", tc.rules.Engine, tc.name, err)
		}
	}
}
