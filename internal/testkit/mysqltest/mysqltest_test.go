package mysqltest_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/testkit/mysqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(mysqltest.M(m)) }

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartGivesFreshDatabases(t *testing.T) {
	a, b := mysqltest.Start(t), mysqltest.Start(t)
	da, db := open(t, a), open(t, b)
	var nameA, nameB string
	if err := da.QueryRowContext(ctx(t), "SELECT DATABASE()").Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx(t), "SELECT DATABASE()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB {
		t.Fatalf("two Starts share database %q", nameA)
	}
	if _, err := da.ExecContext(ctx(t), "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx(t), "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'only_in_a'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a table made in %s is visible in %s: count %d, %v", nameA, nameB, n, err)
	}
}

func TestSettings(t *testing.T) {
	dsn := mysqltest.Start(t)
	db := open(t, dsn)
	want := map[string]string{
		"@@character_set_database": "utf8mb4",
		"@@collation_database":     "utf8mb4_bin",
	}
	if os.Getenv(mysqltest.EnvDSN) == "" {
		// Ours: durable as shipped, MariaDB's default isolation, a user
		// that is not root. A server given by DSN is what it is.
		want["@@innodb_flush_log_at_trx_commit"] = "1"
		want["@@innodb_doublewrite"] = "1"
		want["@@tx_isolation"] = "REPEATABLE-READ"
		want["@@bind_address"] = "127.0.0.1"
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.User == "root" || cfg.Net != "tcp" {
			t.Errorf("tests connect as %q over %q, want a user of their own over tcp", cfg.User, cfg.Net)
		}
	}
	for expr, w := range want {
		var got string
		if err := db.QueryRowContext(ctx(t), "SELECT "+expr).Scan(&got); err != nil {
			t.Fatalf("reading %s: %v", expr, err)
		}
		if got != w {
			t.Errorf("%s = %q, want %q", expr, got, w)
		}
	}
	// The tests that watch lock waits read SHOW ENGINE INNODB STATUS,
	// which needs PROCESS.
	var priv int
	if err := db.QueryRowContext(ctx(t), "SELECT count(*) FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE = 'PROCESS'").Scan(&priv); err != nil || priv == 0 {
		t.Errorf("the test user lacks PROCESS: %d, %v", priv, err)
	}
}
