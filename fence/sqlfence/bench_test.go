package sqlfence_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/benchutil"
)

// BenchmarkCompareFenceMariaDB and BenchmarkCompareFenceSQLite measure the
// guard's cost on one row write: plain-update is
//
//	UPDATE jobs SET value = ?, fencing_token = ? WHERE id = ?
//
// and sqlfence is the same write through UpdateRow, which adds the token
// condition (AND coalesce(fencing_token, 0) <= ?) and, on MySQL, assigns the
// token through LAST_INSERT_ID(?); each client writes rows of its own, a new
// value each time, autocommitted, durably (MariaDB: a log flush per commit;
// SQLite: WAL with synchronous=FULL, an fsync per commit). The rows are
// measured interleaved (benchutil.Interleave), so that the disk's slow spells
// fall on both alike. MariaDB runs 1 and 8 clients; SQLite, which takes one
// writer at a time and whose busy handler sleeps between tries, 1.
func BenchmarkCompareFenceMariaDB(b *testing.B) {
	db := openMySQL(b)
	var version string
	if err := db.QueryRowContext(testCtx(b), "SELECT VERSION()").Scan(&version); err != nil {
		b.Fatal(err)
	}
	b.Logf("engine: mariadb %s", version)
	benchUpdate(b, engine{"mariadb", sqlfence.MySQL, db}, 1, 8)
}

func BenchmarkCompareFenceSQLite(b *testing.B) {
	db := openSQLite(b, "WAL")
	var version string
	if err := db.QueryRowContext(testCtx(b), "SELECT sqlite_version()").Scan(&version); err != nil {
		b.Fatal(err)
	}
	b.Logf("engine: sqlite %s (modernc.org/sqlite, WAL, synchronous=FULL)", version)
	if _, err := db.ExecContext(testCtx(b), "PRAGMA synchronous = FULL"); err != nil {
		b.Fatal(err)
	}
	benchUpdate(b, engine{"sqlite", sqlfence.SQLite, db}, 1)
}

func benchUpdate(b *testing.B, e engine, clientCounts ...int) {
	ctx := context.Background()
	if _, err := e.db.ExecContext(ctx, jobsTable[e.d]); err != nil {
		b.Fatal(err)
	}
	const token = lease.Token(7)
	for _, clients := range clientCounts {
		// Rows 1000c+w (plain) and 1000c+500+w (guarded) for client w.
		plain, guarded := 1000*clients, 1000*clients+500
		for w := range clients {
			if _, err := e.db.ExecContext(ctx, `INSERT INTO jobs (id, value) VALUES (?, ''), (?, '')`, plain+w, guarded+w); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("c=%d/interleaved", clients), func(b *testing.B) {
			seq := make([]int, clients) // each client's writes so far: the next value
			next := func(w int) string { seq[w]++; return strconv.Itoa(seq[w]) }
			benchutil.Interleave(b, clients, []benchutil.Impl{
				{Name: "plain-update", Op: func(w int) error {
					_, err := e.db.ExecContext(ctx, `UPDATE jobs SET value = ?, fencing_token = ? WHERE id = ?`, next(w), int64(token), plain+w)
					return err
				}},
				{Name: "sqlfence", Op: func(w int) error {
					return sqlfence.UpdateRow(ctx, e.db, e.d, sqlfence.Update{Table: []string{"jobs"}, IDColumn: "id", ID: guarded + w,
						TokenColumn: "fencing_token", Token: token, Set: map[string]any{"value": next(w)}})
				}},
			})
		})
	}
}
