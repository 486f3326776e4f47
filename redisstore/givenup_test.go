package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// TestAcquireGivenUpLeavesNothing: an acquire whose caller gives up while
// the server is busy (DEBUG SLEEP stands in for a stalled fsync or a long
// script) returns at once, and the lease its script grants once the server
// goes on is released, not held by nobody for its TTL. go-redis read past
// the ctx's end until its read timeout, then closed the connection and,
// the ctx having ended, did not retry: the server ran the script it had
// already received, and nobody had the lease's ID.
func TestAcquireGivenUpLeavesNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Config("enable-debug-command", "yes"))
	raw := srv.Client(t)
	for _, honours := range []bool{false, true} {
		// go-redis reads on past a ctx's end unless ContextTimeoutEnabled;
		// with it, it closes the connection at once.
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			ns := testNamespace()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: honours})
			t.Cleanup(func() { _ = rdb.Close() })
			s, err := redisstore.New(rdb, redisstore.WithNamespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			givenUp(t, s, raw, ns)
		})
	}
}

func givenUp(t *testing.T, s *redisstore.Store, raw *redis.Client, ns string) {
	ctx := ctxFor(t)
	// The scripts loaded: a first EVALSHA answered NOSCRIPT would not grant.
	warm, err := s.Acquire(ctx, "warm", "warm", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, warm); err != nil {
		t.Fatal(err)
	}
	const trials = 2
	for trial := range trials {
		key := fmt.Sprintf("given-up/%d", trial)
		sleeping := make(chan error, 1)
		go func() { sleeping <- raw.Do(context.Background(), "DEBUG", "SLEEP", "4").Err() }()
		time.Sleep(200 * time.Millisecond) // real time: the server is asleep
		// A deadline: go-redis watches no cancellation, only deadlines
		// (and those only with ContextTimeoutEnabled).
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := s.Acquire(actx, key, "quitter", time.Minute); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire whose ctx ended on the wire = %v, want context.DeadlineExceeded", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Acquire did not return within 2 s of its ctx's deadline")
		}
		if err := <-sleeping; err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, func() error {
			n, err := raw.Get(ctx, ns+":{"+key+"}:t").Int()
			if err != nil || n != 1 {
				return fmt.Errorf("the given-up script has not granted (counter %d, %v)", n, err)
			}
			if l, err := s.Get(ctx, key); !errors.Is(err, lease.ErrNotFound) {
				return fmt.Errorf("Get(%s) = %+v, %v; want the lease granted to a caller that gave up released", key, l, err)
			}
			return nil
		})
	}
}
