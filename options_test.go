package lease_test

import (
	"reflect"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/pgfence"
	"github.com/leasehq/lease/fence/redisfence"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/leasetest"
	"github.com/leasehq/lease/memstore"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
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
