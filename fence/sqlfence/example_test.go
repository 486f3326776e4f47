package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence/sqlfence"
)

// Two writers of one report on SQLite: B holds the newer token and writes;
// A, whose lease expired while it was paused, writes late and is refused.
func ExampleGuard_Check() {
	dir, err := os.MkdirTemp("", "sqlfence-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// IMMEDIATE transactions take SQLite's write lock at BEGIN; the busy
	// timeout lets writers wait for each other.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE reports (name TEXT PRIMARY KEY, body TEXT)`); err != nil {
		panic(err)
	}
	guard, err := sqlfence.New(ctx, db, sqlfence.SQLite)
	if err != nil {
		panic(err)
	}

	write := func(token lease.Token, body string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := guard.Check(ctx, tx, "nightly-report", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO reports VALUES ('nightly', ?)`, body); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println("B:", write(2, "by worker-b"))
	err = write(1, "by worker-a")
	fmt.Println("A:", errors.Is(err, lease.ErrStaleToken), err)
	var body string
	if err := db.QueryRowContext(ctx, `SELECT body FROM reports`).Scan(&body); err != nil {
		panic(err)
	}
	fmt.Println("kept:", body)
	// Output:
	// B: <nil>
	// A: true fence: stale token 1 for "nightly-report": highest accepted is 2 (mode at-least)
	// kept: by worker-b
}
