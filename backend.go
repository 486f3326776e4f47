package lease

import (
	"context"
	"time"
)

// Backend is the store that serialises contenders for a key and mints its
// tokens. It is the interface for implementers; applications use Client.
//
// Every method is a single atomic operation judged on the backend's own clock
// (I5). Backends start no goroutines for renewal or retries: those live in
// Client. Every backend must pass leasetest.TestBackend. Arguments are checked
// with ValidateKey, ValidateTTL and ValidateLease; bad input returns an error
// matching ErrInvalid, never a panic.
type Backend interface {
	// Acquire grants a new lease on key to owner for ttl if no unexpired
	// lease exists, with a token strictly greater than every token issued
	// before for key (I1) and a fresh random ID. If the key is held it
	// returns an error matching ErrHeld (a *HeldError when the holder is
	// known) and changes nothing.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)

	// Renew extends l to expire ttl from now, keeping its token (I2). It
	// returns ErrNotHeld, changing nothing, if l is not the current unexpired
	// lease on l.Key with l.Token and l.ID.
	Renew(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)

	// Release ends l. It returns ErrNotHeld, changing nothing, if l is not the
	// current unexpired lease on l.Key with l.Token and l.ID (I4).
	Release(ctx context.Context, l Lease) error

	// Get returns the current unexpired lease on key, with a zero ID, or
	// ErrNotFound.
	Get(ctx context.Context, key string) (Lease, error)

	// List returns one page of the unexpired leases whose keys start with
	// prefix (empty: every key), with zero IDs, in byte order of their keys:
	// at most page.Limit of them (0: DefaultPageLimit), those after the
	// key page.After names. ListPage.Next continues the walk; it is empty
	// when no more leases came after the page as it was read. A walk sees
	// every lease that stays held throughout exactly once (see ListPage).
	// ParseList checks prefix and page; bad ones match ErrInvalid.
	List(ctx context.Context, prefix string, page Page) (ListPage, error)
}

// WaitAcquirer is implemented by backends that can wait for a key themselves,
// serving waiters in the order they arrived (FIFO). Client.Acquire prefers it
// to polling.
type WaitAcquirer interface {
	// AcquireWait is Acquire that, while the key is held, waits for its
	// release or expiry until ctx is done. On ctx's end it returns ctx's
	// error (or an error matching ErrHeld) and holds nothing.
	AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)
}

// Notifier is implemented by backends that can push word that a key may have
// become free, so that Client.Acquire need not poll.
type Notifier interface {
	// WaitChange blocks until key may have been released or expired, or until
	// ctx is done. It may return early or spuriously; callers try again.
	// It returns nil when a retry is worthwhile, ctx's error when ctx ended,
	// and another error when notifications are not working (callers then
	// fall back to polling).
	WaitChange(ctx context.Context, key string) error
}
