package pgtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.M(m)) }

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatalf("connecting to %s: %v", connString, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestStartGivesFreshDatabases(t *testing.T) {
	a, b := pgtest.Start(t), pgtest.Start(t)
	ca, cb := connect(t, a), connect(t, b)
	ctx := context.Background()
	var dbA, dbB string
	if err := ca.QueryRow(ctx, "SELECT current_database()").Scan(&dbA); err != nil {
		t.Fatal(err)
	}
	if err := cb.QueryRow(ctx, "SELECT current_database()").Scan(&dbB); err != nil {
		t.Fatal(err)
	}
	if dbA == dbB {
		t.Fatalf("two Starts share database %q", dbA)
	}
	if _, err := ca.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a table made in %s is visible in %s: count %d, %v", dbA, dbB, n, err)
	}
}

func TestDurabilityAndEncoding(t *testing.T) {
	conn := connect(t, pgtest.Start(t))
	ctx := context.Background()
	want := map[string]string{
		"server_encoding": "UTF8",
		"lc_collate":      "C",
	}
	if os.Getenv(pgtest.EnvURL) == "" {
		// Ours: durable as shipped. A server given by URL is what it is.
		want["fsync"] = "on"
		want["synchronous_commit"] = "on"
		want["listen_addresses"] = "127.0.0.1"
	}
	for name, w := range want {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		if got != w {
			t.Errorf("%s = %q, want %q", name, got, w)
		}
	}
}
