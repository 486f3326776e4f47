package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// TestRecheckThatCannotRun checks what a re-check of the persistence
// settings that gets no answer does (recheck.go): it never lets grants
// through that the last verdict refused, and when checks go without an
// answer for recheckPatience periods in a row, grants are refused (an error
// matching ErrVolatile and lease.ErrUnavailable saying the settings cannot
// be read) until a check passes.
func TestRecheckThatCannotRun(t *testing.T) {
	srv := redistest.Start(t)
	var (
		answer atomic.Pointer[error] // what the next checks return
		runs   atomic.Int64
	)
	say := func(err error) { answer.Store(&err) }
	say(nil)
	const every = 5 * time.Millisecond
	s, err := New(srv.Client(t), WithNamespace(newNamespace()), func(c *config) error {
		c.recheckEvery = every
		c.recheck = func(context.Context) error { runs.Add(1); return *answer.Load() }
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	grant := func() error {
		l, err := s.Acquire(ctx, "k", "o", time.Minute)
		if err != nil {
			return err
		}
		return s.Release(ctx, l)
	}
	refused := func(want string) func() error {
		return func() error {
			err := grant()
			if err == nil {
				return errors.New("still granted")
			}
			if !errors.Is(err, ErrVolatile) || !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), want) {
				t.Fatalf("grant = %v, want ErrVolatile and ErrUnavailable saying %q", err, want)
			}
			return nil
		}
	}
	unanswered := fmt.Errorf("redisstore: reading the persistence settings of %s: %w: i/o timeout", srv.Addr, lease.ErrUnavailable)

	// A check that finds a volatile setting refuses.
	say(fmt.Errorf("%w: %s: appendfsync is \"everysec\"", ErrVolatile, srv.Addr))
	poll.Until(t, 10*time.Second, refused("everysec"))
	// Checks without an answer keep that verdict: no grant between them.
	say(unanswered)
	from := runs.Load()
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() < from+5 && time.Now().Before(deadline) {
		if err := grant(); err == nil {
			t.Fatal("a grant went through while the checks after a volatile verdict got no answer")
		}
	}
	if runs.Load() < from+5 {
		t.Fatalf("only %d checks in 10 s", runs.Load()-from)
	}
	// A check that passes lets grants through again.
	say(nil)
	poll.Until(t, 10*time.Second, grant)
	// Checks that go without an answer for recheckPatience periods refuse.
	say(unanswered)
	poll.Until(t, 10*time.Second, refused("cannot read the persistence settings"))
	if err := grant(); err == nil || !strings.Contains(err.Error(), "i/o timeout") {
		t.Errorf("refusal %q does not give the last check's error", err)
	}
	say(nil)
	poll.Until(t, 10*time.Second, grant)
}
