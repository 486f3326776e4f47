package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasehttp"
)

// TestServeWatch: through lease serve on the embedded store, a quiet watch
// stream outlives --read-timeout and --write-timeout (its heartbeats move
// them on) and still delivers; --max-watchers bounds the streams; and a
// shutdown ends the streams at once instead of waiting out
// --shutdown-timeout for them.
func TestServeWatch(t *testing.T) {
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	cfg.ReadTimeout, cfg.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	// Longer than the timeouts (the stream outlives them by its own
	// writes), and long enough that the client's silence limit (two
	// heartbeats + 250 ms) outlasts a starved process: at 30 ms, a -race run
	// on a loaded machine cut the watch ("stayed silent") now and then.
	cfg.WatchHeartbeat = 150 * time.Millisecond
	cfg.MaxWatchers = 1
	cfg.ShutdownTimeout = time.Minute
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
		}
	})
	base := "http://" + s.Addr()

	// The embedded store watches (the assertion below fails to compile if
	// it stops being one), so lease serve streams.
	var _ lease.Watcher = (*boltstore.Store)(nil)

	c := httpClient(t, base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan error, 16)
	got := make(chan lease.Event, 16)
	go func() {
		for ev, err := range c.Watch(ctx, "jobs/") {
			if err != nil {
				events <- err
				return
			}
			got <- ev
		}
		events <- nil
	}()
	next := func(what string) lease.Event {
		t.Helper()
		select {
		case ev := <-got:
			return ev
		case err := <-events:
			t.Fatalf("the watch ended (%v) while waiting for %s", err, what)
		case <-time.After(patience):
			t.Fatalf("nothing within %v while waiting for %s", patience, what)
		}
		return lease.Event{}
	}
	if ev := next("synced"); ev.Kind != lease.Synced {
		t.Fatalf("%v event, want synced", ev.Kind)
	}
	// real time: ten times both timeouts, with nothing to tell; they are
	// deadlines on a real TCP connection.
	time.Sleep(time.Second)
	if _, err := c.Acquire(t.Context(), "jobs/late", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ev := next("the late acquire"); ev.Kind != lease.Acquired || ev.Lease.Key != "jobs/late" {
		t.Fatalf("%v event of %q, want acquired of jobs/late", ev.Kind, ev.Lease.Key)
	}

	for _, err := range c.Watch(t.Context(), "") {
		if !errors.Is(err, leasehttp.ErrTooManyWatchers) {
			t.Fatalf("a second watch with --max-watchers 1: %v, want ErrTooManyWatchers", err)
		}
		break
	}

	start := time.Now()
	closed = true
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-events:
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("the watch at shutdown: %v, want ErrUnavailable", err)
		}
	case <-time.After(patience):
		t.Fatal("the watch did not end at shutdown")
	}
	if strings.Contains(logs.String(), "did not finish in time") {
		t.Errorf("shutdown waited %v for the watch stream, out to --shutdown-timeout", time.Since(start))
	}
}

// TestServeWatchBackends: lease serve streams a watch on every engine
// --backend opens (each is a lease.Watcher), rather than answering 501:
// the state, then a change made through the server.
func TestServeWatchBackends(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"postgres", func(t *testing.T) string { return pgURL(t, pgtest.Start(t)) }},
		{"redis", func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr + "/0" }},
		{"etcd", func(t *testing.T) string {
			return "etcd://" + strings.TrimPrefix(etcdtest.Start(t)[0], "http://") + "/serve-watch-test"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serveConfig(t, io.Discard)
			cfg.DataDir, cfg.Backend = "", tc.spec(t)
			c := httpClient(t, "http://"+startServe(t, cfg).Addr())
			held, err := c.Acquire(t.Context(), "jobs/held", "o", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), patience)
			defer cancel()
			var kinds []string
			for ev, err := range c.Watch(ctx, "jobs/") {
				if err != nil {
					t.Fatalf("watch through lease serve --backend %s: %v (after %v)", tc.name, err, kinds)
				}
				kinds = append(kinds, ev.Kind.String()+" "+ev.Lease.Key)
				if ev.Kind == lease.Synced {
					if err := c.Release(t.Context(), held); err != nil {
						t.Fatal(err)
					}
				}
				if ev.Kind == lease.Released {
					break
				}
			}
			if got, want := strings.Join(kinds, ", "), "held jobs/held, synced , released jobs/held"; got != want {
				t.Fatalf("events %q, want %q", got, want)
			}
		})
	}
}
