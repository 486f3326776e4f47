package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// TestAppendonlyOffAtRuntime: a server whose AOF is turned off after the
// store checked it (CONFIG SET appendonly no) is refused grants, with an
// error matching ErrVolatile, until it is on again. Before, grants went on,
// the AOF stayed as it was when it was turned off, and a restart loaded it
// and issued the tokens granted meanwhile again (I1).
func TestAppendonlyOffAtRuntime(t *testing.T) {
	srv := redistest.Start(t)
	srv.RequireOwned(t, "reconfiguring and restarting the server")
	s := open(t, srv)
	raw := srv.Client(t)
	ctx := ctxFor(t)
	const k = "runtime/aof-off"
	var last lease.Token
	grant := func() error {
		l, err := s.Acquire(ctx, k, "w", time.Minute)
		if err != nil {
			return err
		}
		if l.Token <= last {
			t.Fatalf("token %d after %d (I1)", l.Token, last)
		}
		last = l.Token
		return s.Release(ctx, l)
	}
	for range 3 {
		if err := grant(); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := grant(); !errors.Is(err, redisstore.ErrVolatile) || !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Acquire with the AOF off = %v, want ErrVolatile and ErrUnavailable", err)
		}
	}
	srv.Restart(t) // loads the AOF as it was when it was turned off
	if err := grant(); err != nil {
		t.Fatalf("Acquire after the restart: %v", err)
	}
	// And the store that allows a volatile server is not refused.
	if err := raw.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	v := open(t, srv, redisstore.AllowVolatile())
	l, err := v.Acquire(ctx, "runtime/volatile", "w", time.Minute)
	if err != nil {
		t.Fatalf("Acquire through AllowVolatile with the AOF off: %v", err)
	}
	if err := v.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}
