package pgstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

// countingConn counts the client's writes to the server. pgx writes each
// request (Bind, Execute, Sync of a prepared statement) in one Write and
// then waits for the answer, so writes are round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func TestOneRoundTripPerOperation(t *testing.T) {
	// Every operation is one round trip: no BEGIN/COMMIT, no prepare after
	// the first use of a statement on a connection (pgx's statement cache),
	// no extra query by the pool. So an acquire+release pair is exactly two.
	cfg, err := pgxpool.ParseConfig(pgtest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	// One connection, so that every statement is warm on it after one use.
	// pgxpool pings a connection that sat idle for over a second before
	// handing it out (one more round trip, never at a busy pool's rates);
	// a test stalled that long by a loaded machine must not count it.
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := testCtx(t)

	pair := func(key string) (lease.Lease, error) {
		l, err := s.Acquire(ctx, key, "o", time.Minute)
		if err != nil {
			return l, err
		}
		if _, err := s.Renew(ctx, l, time.Minute); err != nil {
			return l, err
		}
		if _, err := s.Get(ctx, key); err != nil {
			return l, err
		}
		if _, err := s.List(ctx, key, lease.Page{}); err != nil {
			return l, err
		}
		return l, s.Release(ctx, l)
	}
	// Warm-up: creates the tables and prepares each statement once.
	if _, err := pair("warm"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "held", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "held", "other", time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Fatal(err)
	}

	count := func(what string, want int64, op func() error) {
		t.Helper()
		before := writes.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := writes.Load() - before; got != want {
			t.Errorf("%s took %d round trips, want %d", what, got, want)
		}
	}
	for range 3 {
		var l lease.Lease
		count("Acquire of a free key", 1, func() (err error) { l, err = s.Acquire(ctx, "k", "o", time.Minute); return err })
		count("Acquire of a held key", 1, func() error {
			if _, err := s.Acquire(ctx, "held", "other", time.Minute); !errors.Is(err, lease.ErrHeld) {
				return err
			}
			return nil
		})
		count("Renew", 1, func() error { _, err := s.Renew(ctx, l, time.Minute); return err })
		count("Get", 1, func() error { _, err := s.Get(ctx, "k"); return err })
		count("List", 1, func() error { _, err := s.List(ctx, "k", lease.Page{}); return err })
		count("Release", 1, func() error { return s.Release(ctx, l) })
		count("Release of a released lease", 1, func() error {
			if err := s.Release(ctx, l); !errors.Is(err, lease.ErrNotHeld) {
				return err
			}
			return nil
		})
		count("Acquire+Release", 2, func() error {
			l, err := s.Acquire(ctx, "pair", "o", time.Minute)
			if err != nil {
				return err
			}
			return s.Release(ctx, l)
		})
	}
}
