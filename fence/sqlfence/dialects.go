package sqlfence

import (
	"database/sql"
	"strconv"
	"strings"

	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/sqlguard"
	"github.com/leasehq/lease/internal/sqlident"
)

// mysqlDialect: backquoted names, ? placeholders (each takes the next
// argument), and the fenced UPDATE assigns the token through
// LAST_INSERT_ID(?), so that the insert ID of its answer says whether the
// row matched (see the package doc); the read after a rejected UPDATE is a
// locking read, which sees the latest row as the UPDATE did, not a
// REPEATABLE READ transaction's snapshot.
var mysqlDialect = sqlguard.Dialect{
	Pkg:         "sqlfence",
	Ident:       sqlident.MySQL,
	Quote:       func(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" },
	Param:       func(int) string { return "?" },
	SetToken:    func(p string) string { return "LAST_INSERT_ID(" + p + ")" },
	NoRows:      sql.ErrNoRows,
	LockingRead: " FOR UPDATE",
}

// sqliteDialect: double-quoted names and numbered placeholders (?1), which
// let one argument stand twice, as PostgreSQL's $1 does.
var sqliteDialect = sqlguard.Dialect{
	Pkg:      "sqlfence",
	Ident:    sqlident.SQLite,
	Quote:    func(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` },
	Param:    func(n int) string { return "?" + strconv.Itoa(n) },
	Numbered: true,
	NoRows:   sql.ErrNoRows,
}

// The guard's table after CREATE TABLE IF NOT EXISTS <name>. On MySQL the
// resource is VARBINARY: it compares byte-wise, as in Go, whatever the
// server's collation (utf8mb4_bin would still ignore trailing spaces).
const (
	mysqlTable = ` (
	resource VARBINARY(512) NOT NULL PRIMARY KEY,
	token    BIGINT NOT NULL CHECK (token BETWEEN 1 AND 9007199254740992)
) ENGINE=InnoDB`
	sqliteTable = ` (
	resource TEXT NOT NULL PRIMARY KEY,
	token    INTEGER NOT NULL CHECK (token BETWEEN 1 AND 9007199254740992)
) WITHOUT ROWID`
)

// mysqlCheck is Check on MySQL: insert the token, or on a duplicate key
// record it if m admits it. Either way InnoDB holds the row's exclusive lock
// until the transaction ends. LAST_INSERT_ID(token) makes the answer's
// insert ID the token the row held before; a fresh insert answers 0. A
// stored token no guard writes (NULL, below 1, above 2^53) answers
// mysqlCorrupt and admits nothing: LAST_INSERT_ID(NULL) would answer 0, a
// fresh insert's ID, while IF(NULL <= ?, …) kept the NULL, so that every
// token was admitted and none recorded.
// Arguments: resource, token, token, token.
func mysqlCheck(table string, m fence.Mode) string {
	return `INSERT INTO ` + table + ` (resource, token) VALUES (?, ?)
ON DUPLICATE KEY UPDATE token = IF(LAST_INSERT_ID(IF(token BETWEEN 1 AND 9007199254740992, token, ` + mysqlCorrupt + `)) ` + sqlguard.Cmp(m) + ` ?, ?, token)`
}

// mysqlCorrupt is the insert ID mysqlCheck answers for a stored token no
// guard writes: above every token, so that it admits none.
const mysqlCorrupt = "9223372036854775807"
