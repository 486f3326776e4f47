package lease

import (
	"context"
	"iter"
)

// Watcher is implemented by backends that can stream the changes to the
// leases under a key prefix. It is optional, like WaitAcquirer and
// Notifier; leasetest checks it for every backend that offers it.
type Watcher interface {
	// Watch streams the leases whose keys start with prefix: first the
	// current state, one Held event per unexpired lease (in key order),
	// then one Synced event, then every change as it happens (Acquired,
	// Renewed, Released, Expired), in the order the backend made them for
	// any one key; there is no order across keys. For each key, nothing
	// is missed or told twice between its state and its changes; a
	// backend that locks per key may take each key's state at its own
	// instant. Leases in events carry a zero ID (I4). The watch begins
	// when the caller ranges over the sequence, and each range is a watch
	// of its own.
	//
	// The stream ends when ctx ends or the caller leaves the loop
	// (without an error), or when it breaks: the backend failed or was
	// closed, or the caller read so slowly that the backend could not
	// keep its changes. A break yields the events already buffered, then
	// one error matching ErrUnavailable, and ends the stream; nothing
	// after the last event delivered is known, so the caller resumes by
	// calling Watch again, which starts again from the current state
	// (Follow does that, and says so with a Resync event). A
	// bad prefix (see ValidatePrefix) yields one error matching
	// ErrInvalid.
	//
	// Expired is reported once the backend's clock has passed the lease's
	// expiry with no renewal, within a delay each backend states.
	Watch(ctx context.Context, prefix string) iter.Seq2[Event, error]
}

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of Event, in the order a watch can first meet them.
const (
	// Held is a lease that was held when the watch started.
	Held EventKind = iota + 1
	// Synced ends the current state: the events after it are changes. Its
	// Lease is zero.
	Synced
	// Acquired is a new lease: a new token on its key.
	Acquired
	// Renewed is a lease extended by its holder, with the same token (I2)
	// and a later expiry.
	Renewed
	// Released is a lease its holder ended, as it was before.
	Released
	// Expired is a lease whose TTL ran out on the backend's clock, as it
	// was before.
	Expired
	// Resync is Follow's own, never a Watcher's: the watch broke and was
	// started again, and the Held events and the Synced after it are the
	// current state, which replaces everything told before. Its Lease is
	// zero.
	Resync
)

var eventKindNames = [...]string{Held: "held", Synced: "synced", Acquired: "acquired",
	Renewed: "renewed", Released: "released", Expired: "expired", Resync: "resync"}

// String returns the kind's name as the HTTP API spells it ("acquired").
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "unknown"
}

// ParseEventKind is the inverse of EventKind.String for the kinds a Watcher
// yields, Held to Expired: the names of the HTTP API's stream. Resync, which
// no stream carries, is refused. The error matches ErrInvalid.
func ParseEventKind(s string) (EventKind, error) {
	for k, name := range eventKindNames[:Expired+1] {
		if name != "" && name == s {
			return EventKind(k), nil
		}
	}
	return 0, invalidf("unknown event kind %q", s)
}

// Event is one entry of a watch: a lease as it was when the event happened,
// without its ID.
type Event struct {
	Kind  EventKind
	Lease Lease
}

// ValidatePrefix reports whether prefix may be watched or listed: empty
// (every key), or the start of a valid key. The error matches ErrInvalid.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validateName("prefix", prefix)
}

// KeyWatcher is implemented by backends that can watch one key exactly:
// unlike Watch with the key as its prefix, the changes to other keys that
// start with it (svc-cache/x, svc2 for svc) never reach the watch, so
// they neither show in it nor fill its buffer. It is optional; WatchKey
// falls back to a prefix watch where a backend lacks it.
type KeyWatcher interface {
	// WatchKey is Watch of exactly one key: its lease, if held, as one
	// Held event, then Synced, then its changes, with Watch's break and
	// end. A bad key (see ValidateKey) yields one error matching
	// ErrInvalid.
	WatchKey(ctx context.Context, key string) iter.Seq2[Event, error]
}

// WatchKey watches exactly key on w: through w's WatchKey where w is a
// KeyWatcher, else through w's Watch of the prefix key, skipping the other
// keys that start with it. In the fallback those keys' changes still pass
// through the backend's buffer, so enough of them can break the watch
// (ErrUnavailable) as they would a prefix watch.
func WatchKey(ctx context.Context, w Watcher, key string) iter.Seq2[Event, error] {
	if kw, ok := w.(KeyWatcher); ok {
		return kw.WatchKey(ctx, key)
	}
	return func(yield func(Event, error) bool) {
		if err := ValidateKey(key); err != nil {
			yield(Event{}, err)
			return
		}
		for ev, err := range w.Watch(ctx, key) {
			if err == nil && ev.Kind != Synced && ev.Lease.Key != key {
				continue
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}
