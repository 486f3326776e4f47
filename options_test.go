package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/fence/redisfence"
	"github.com/leasehq/lease/fence/sqlfence"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/leasetest"
	"github.com/leasehq/lease/memstore"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
	"github.com/leasehq/lease/semaphore"
)

// TestOptionsShareOneShape: every package's constructor options have one
// shape, func(*config) error — a function on an unexported settings struct
// that can refuse nonsense — so that a reader who knows one package's
// options knows them all, and no option can reach into the value it
// configures. outliers are the packages still to be brought in line, each
// with what holds it back; the test fails when one of them conforms, so that
// the list only shrinks.
func TestOptionsShareOneShape(t *testing.T) {
	options := map[string]any{
		"boltstore.Option":       boltstore.Option(nil),
		"etcdstore.Option":       etcdstore.Option(nil),
		"fence.MiddlewareOption": fence.MiddlewareOption(nil),
		"leasehttp.ClientOption": leasehttp.ClientOption(nil),
		"leasehttp.ServerOption": leasehttp.ServerOption(nil),
		"leasetest.Option":       leasetest.Option(nil),
		"lease.Option":           lease.Option(nil),
		"memstore.Option":        memstore.Option(nil),
		"pgfence.Option":         pgfence.Option(nil),
		"pgstore.Option":         pgstore.Option(nil),
		"redisfence.Option":      redisfence.Option(nil),
		"redisstore.Option":      redisstore.Option(nil),
	}
	outliers := map[string]string{}
	errorType := reflect.TypeFor[error]()
	for name, opt := range options {
		typ := reflect.TypeOf(opt)
		ok := typ.NumIn() == 1 && typ.NumOut() == 1 && typ.Out(0) == errorType &&
			typ.In(0).Kind() == reflect.Pointer && typ.In(0).Elem().Kind() == reflect.Struct &&
			!isExported(typ.In(0).Elem().Name())
		why, known := outliers[name]
		switch {
		case !ok && !known:
			t.Errorf("%s is %s, want func(*config) error (an unexported settings struct)", name, signature(typ))
		case ok && known:
			t.Errorf("%s now has the shared shape: drop it from the outliers (%q)", name, why)
		}
	}
}

// signature spells a function type without its name.
func signature(typ reflect.Type) string {
	var in, out []reflect.Type
	for i := range typ.NumIn() {
		in = append(in, typ.In(i))
	}
	for i := range typ.NumOut() {
		out = append(out, typ.Out(i))
	}
	return reflect.FuncOf(in, out, typ.IsVariadic()).String()
}

// isExported reports whether a named type is exported; an unnamed struct
// counts as exported, being as open as an exported one.
func isExported(name string) bool { return name == "" || (name[0] >= 'A' && name[0] <= 'Z') }

// TestConstructorsRefuseANilOption: every constructor with functional
// options refuses a nil one the same way — an error matching
// lease.ErrInvalid, before any I/O — where some called it and panicked.
// The clients they are given point at closed loopback ports: none may be
// reached.
func TestConstructorsRefuseANilOption(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := memtest.New(t)
	client, err := lease.NewClient(b)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	e, err := election.New(client, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resource := func(*http.Request) (string, error) { return "r", nil }
	constructors := map[string]func() error{
		"lease.NewClient": func() error { _, err := lease.NewClient(b, nil); return err },
		"memstore.New":    func() error { _, err := memstore.New(nil); return err },
		"boltstore.Open":  func() error { _, err := boltstore.Open(filepath.Join(dir, "db"), nil); return err },
		"boltstore.Restore": func() error {
			_, err := boltstore.Restore(filepath.Join(dir, "backup"), filepath.Join(dir, "restored"), nil)
			return err
		},
		"pgstore.New":         func() error { _, err := pgstore.New(pool, nil); return err },
		"pgstore.Open":        func() error { _, err := pgstore.Open(ctx, "postgres://nobody@127.0.0.1:1/none", nil); return err },
		"redisstore.New":      func() error { _, err := redisstore.New(rdb, nil); return err },
		"redisstore.Open":     func() error { _, err := redisstore.Open(ctx, "redis://127.0.0.1:1", nil); return err },
		"etcdstore.New":       func() error { _, err := etcdstore.New(cli, nil); return err },
		"leasehttp.NewClient": func() error { _, err := leasehttp.NewClient("http://127.0.0.1:1", nil); return err },
		"leasehttp.NewServer": func() error { _, err := leasehttp.NewServer(b, nil); return err },
		"pgfence.New":         func() error { _, err := pgfence.New(ctx, pool, nil); return err },
		"sqlfence.New":        func() error { _, err := sqlfence.New(ctx, new(sql.DB), sqlfence.SQLite, nil); return err },
		"redisfence.New":      func() error { _, err := redisfence.New(ctx, rdb, nil); return err },
		"fence.Middleware":    func() error { _, err := fence.Middleware(fence.NewMemory(fence.AtLeast), resource, nil); return err },
		"semaphore.New":       func() error { _, err := semaphore.New(client, "s", 1, time.Second, nil); return err },
		"election.Elector.Run": func() error {
			return e.Run(ctx, "k", "v", func(context.Context, *election.Term) error { return nil }, nil)
		},
	}
	for name, construct := range constructors {
		t.Run(name, func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panicked: %v", p)
					}
				}()
				return construct()
			}()
			if !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("given a nil option: %v, want an error matching lease.ErrInvalid", err)
			}
		})
	}
}
