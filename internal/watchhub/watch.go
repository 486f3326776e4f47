package watchhub

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/leasehq/lease"
)

// Start subscribes a watcher of prefix and takes its snapshot, in the
// backend's order (see the package comment). Its error ends the watch: a
// ctx error quietly, any other as a break.
type Start func(ctx context.Context, prefix string) (*Sub, error)

// Watch is lease.Watcher.Watch for a backend that feeds a Hub: it checks
// prefix, calls start when the caller begins to range, and yields the
// snapshot's leases as Held events in key order, then Synced, then the
// changes. Each range is a watch of its own. The range ends quietly when
// ctx ends or the caller stops, with one error matching ErrInvalid for a
// bad prefix, and with one matching ErrUnavailable (after the events
// buffered before it) when the watch breaks. It starts no goroutine.
func Watch(ctx context.Context, prefix string, start Start) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		if err := lease.ValidatePrefix(prefix); err != nil {
			yield(lease.Event{}, err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		sub, err := start(ctx, prefix)
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
