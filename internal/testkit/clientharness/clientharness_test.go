package clientharness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestBuildOnceAndRemoved: Make runs once however many tests ask, and what
// it made in its kit is gone after the clean-up Main runs.
func TestBuildOnceAndRemoved(t *testing.T) {
	calls := 0
	b := Build[string]{Lang: "test", Make: func(k *Kit) (string, error) {
		calls++
		dir, err := k.Dir()
		if err != nil {
			return "", err
		}
		f := filepath.Join(dir, "made")
		return f, os.WriteFile(f, nil, 0o644)
	}}
	first, second := b.Get(t), b.Get(t)
	if calls != 1 || first != second {
		t.Fatalf("Make ran %d times (%q, %q), want once", calls, first, second)
	}
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("what Make made: %v", err)
	}
	b.clean()
	if _, err := os.Stat(filepath.Dir(first)); !os.IsNotExist(err) {
		t.Fatalf("the kit's directory after the clean-up: %v, want it removed", err)
	}
}

// TestPostgresURL: the URL says what the key=value string says, a
// password that needs escaping included.
func TestPostgresURL(t *testing.T) {
	dsn := "host=127.0.0.1 port=5433 user=lease password='p@ss w/rd' dbname=leasetest sslmode=disable"
	u := PostgresURL(t, dsn)
	want, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	if got.Host != want.Host || got.Port != want.Port || got.User != want.User || got.Password != want.Password ||
		got.Database != want.Database || got.TLSConfig != nil {
		t.Fatalf("%s reads as %s@%s:%d/%s (TLS %v), want %s@%s:%d/%s without TLS", u,
			got.User, got.Host, got.Port, got.Database, got.TLSConfig != nil, want.User, want.Host, want.Port, want.Database)
	}
}
