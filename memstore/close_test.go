package memstore_test

import (
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

var _ io.Closer = (*memstore.Store)(nil)

// TestClose: Close ends a waiter and a watcher with an error matching
// lease.ErrUnavailable, stops the store's pending expiry checks, and every
// operation after it fails the same way, as after boltstore's Close; a
// second Close returns nil.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := fakeclock.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
		s := memtest.New(t, memstore.WithClock(clk))
		ctx := t.Context()
		held, err := s.Acquire(ctx, "k", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := s.AcquireWait(ctx, "k", "b", time.Minute)
			waited <- err
		}()
		watched := make(chan error, 1)
		go func() {
			for _, err := range s.Watch(ctx, "") {
				if err != nil {
					watched <- err
					return
				}
			}
			watched <- errors.New("the watch ended without an error")
		}()
		synctest.Wait()
		if len(clk.Pending()) == 0 {
			t.Fatal("no expiry check pending for a held key with a waiter and a watcher")
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := <-waited; !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("a waiter when the store closed: %v, want ErrUnavailable", err)
		}
		if err := <-watched; !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("a watcher when the store closed: %v, want ErrUnavailable", err)
		}
		if p := clk.Pending(); len(p) != 0 {
			t.Errorf("%d expiry checks still pending after Close", len(p))
		}
		for name, op := range map[string]func() error{
			"Acquire":     func() error { _, err := s.Acquire(ctx, "other", "a", time.Minute); return err },
			"AcquireWait": func() error { _, err := s.AcquireWait(ctx, "other", "a", time.Minute); return err },
			"Renew":       func() error { _, err := s.Renew(ctx, held, time.Minute); return err },
			"Release":     func() error { return s.Release(ctx, held) },
			"Get":         func() error { _, err := s.Get(ctx, "k"); return err },
			"List":        func() error { _, err := s.List(ctx, "", lease.Page{}); return err },
			"Watch": func() error {
				for _, err := range s.Watch(ctx, "") {
					return err
				}
				return nil
			},
		} {
			if err := op(); !errors.Is(err, lease.ErrUnavailable) {
				t.Errorf("%s after Close: %v, want ErrUnavailable", name, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("a second Close: %v, want nil", err)
		}
	})
}

// TestNewRefusesANilOption: a nil Option is refused as invalid, not called.
func TestNewRefusesANilOption(t *testing.T) {
	if _, err := memstore.New(nil); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("New(nil): %v, want ErrInvalid", err)
	}
}
