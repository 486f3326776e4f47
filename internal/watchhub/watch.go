package watchhub

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/leasehq/lease"
)

// Start subscribes a watcher of sc (Hub.SubscribeScope) and takes its
// snapshot of the keys under sc.Prefix, in the backend's order (see the
// package comment); the Sub drops what is outside an exact scope. Its
// error ends the watch: a ctx error quietly, any other as a break.
type Start func(ctx context.Context, sc Scope) (*Sub, error)

// Watch is lease.Watcher.Watch for a backend that feeds a Hub: it checks
// prefix, calls start when the caller begins to range, and yields the
// snapshot's leases as Held events in key order, then Synced, then the
// changes. Each range is a watch of its own. The range ends quietly when
// ctx ends or the caller stops, with one error matching ErrInvalid for a
// bad prefix, and with one matching ErrUnavailable (after the events
// buffered before it) when the watch breaks. It starts no goroutine.
func Watch(ctx context.Context, prefix string, start Start) iter.Seq2[lease.Event, error] {
	return watch(ctx, Scope{Prefix: prefix}, lease.ValidatePrefix(prefix), start)
}

// WatchKey is lease.KeyWatcher.WatchKey for a backend that feeds a Hub: as
// Watch, of exactly key, whose changes alone reach the watcher's buffer. A
// bad key yields one error matching ErrInvalid.
func WatchKey(ctx context.Context, key string, start Start) iter.Seq2[lease.Event, error] {
	return watch(ctx, Scope{Prefix: key, Exact: true}, lease.ValidateKey(key), start)
}

func watch(ctx context.Context, sc Scope, invalid error, start Start) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		if invalid != nil {
			yield(lease.Event{}, invalid)
			return
		}
		if ctx.Err() != nil {
			return
		}
		sub, err := start(ctx, sc)
		if err != nil {
			if ctx.Err() == nil {
				yield(lease.Event{}, unavailable(err))
			}
			return
		}
		defer sub.Close()
		for _, l := range sub.sync() {
			if ctx.Err() != nil || !yield(lease.Event{Kind: lease.Held, Lease: l}, nil) {
				return
			}
		}
		if ctx.Err() != nil || !yield(lease.Event{Kind: lease.Synced}, nil) {
			return
		}
		for {
			if ctx.Err() != nil {
				return
			}
			ev, err, ok := sub.next()
			switch {
			case ok:
				if !yield(ev, nil) {
					return
				}
				continue
			case err != nil:
				yield(lease.Event{}, unavailable(err))
				return
			}
			select {
			case <-sub.wake:
			case <-ctx.Done():
				return
			}
		}
	}
}

// unavailable makes sure a break matches ErrUnavailable, as the caller
// resumes on that.
func unavailable(err error) error {
	if errors.Is(err, lease.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", lease.ErrUnavailable, err)
}
