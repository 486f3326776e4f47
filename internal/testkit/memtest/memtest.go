// Package memtest makes memstore stores for tests: New fails the test
// instead of returning memstore.New's error, so that a test reads as the
// code it checks; Ways wraps them to hide or refuse their abilities.
package memtest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/memstore"
)

// New returns memstore.New(opts...), failing tb if New refuses an option.
func New(tb testing.TB, opts ...memstore.Option) *memstore.Store {
	tb.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		tb.Fatalf("memstore.New: %v", err)
	}
	return s
}

// Way is one way a package built on a backend's abilities can find a
// memstore: with its FIFO wait and watch, with neither, or with a watch
// that refuses as a server's can.
type Way struct {
	Name string
	New  func(tb testing.TB) lease.Backend
}

// Ways are the three ways, for the tests of election and semaphore, which
// must work on each: "watch" (memstore as it is), "poll" (BackendOnly) and
// "watch-unsupported" (WatchUnsupported).
var Ways = []Way{
	{"watch", func(tb testing.TB) lease.Backend { return New(tb) }},
	{"poll", func(tb testing.TB) lease.Backend { return BackendOnly{New(tb)} }},
	{"watch-unsupported", func(tb testing.TB) lease.Backend { return WatchUnsupported{BackendOnly{New(tb)}} }},
}

// BackendOnly hides every optional ability of the backend it wraps (a
// FIFO wait, a watch), so that what uses it must poll.
type BackendOnly struct{ lease.Backend }

// WatchUnsupported says it watches, but refuses every watch as
// unsupported, as a leasehttp.Client does whose server's backend cannot
// watch: waiting must fall back to polling.
type WatchUnsupported struct{ lease.Backend }

// Watch refuses the watch with an error matching errors.ErrUnsupported.
func (WatchUnsupported) Watch(context.Context, string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		yield(lease.Event{}, fmt.Errorf("memtest: watch: %w", errors.ErrUnsupported))
	}
}
