package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrHeld means another holder has an unexpired lease on the key. Errors from
// Acquire that match it are usually a *HeldError naming the holder.
var ErrHeld = errors.New("lease: held by another owner")

// ErrNotHeld means the lease named in a Renew or Release is no longer the
// current lease on its key: it expired, was released, or was superseded by a
// newer holder. Nothing was changed.
var ErrNotHeld = errors.New("lease: not held")

// ErrNotFound means no unexpired lease exists on the key (Get).
var ErrNotFound = errors.New("lease: not found")

// ErrLost is the cause of a Hold's context when the client can no longer be
// sure it holds the lease: its safe deadline passed without a successful
// renewal, or the backend said the lease is gone.
var ErrLost = errors.New("lease: lost")

// ErrReleased is the cause of a Hold's context after Release was called.
var ErrReleased = errors.New("lease: released")

// ErrStaleToken means a guard rejected a write because its fencing token is
// older than the newest token the resource has accepted. Errors that match it
// are usually a *fence.StaleTokenError naming the resource and both tokens.
var ErrStaleToken = errors.New("lease: stale fencing token")

// ErrInvalid means an argument is malformed: an empty or oversized key, a key
// with control characters, a TTL outside [MinTTL, MaxTTL], a zero token or ID.
var ErrInvalid = errors.New("lease: invalid argument")

// ErrConflict means a caller's settings for something shared disagree with
// the ones stored for it by those already using it: a semaphore opened with
// a limit other than the one its holders were admitted under. Nothing was
// taken; changing the setting is an explicit operation (semaphore.WithResize).
var ErrConflict = errors.New("lease: conflicting settings")

// ErrUnavailable means the backend could not be reached or could not answer.
// The outcome of the operation may be unknown; see the wrapped error.
var ErrUnavailable = errors.New("lease: backend unavailable")

// HeldError is returned by Acquire when the key is held by someone else. It
// matches ErrHeld.
type HeldError struct {
	// Key is the key that was asked for.
	Key string
	// Owner is the current holder's owner name, as it gave it.
	Owner string
	// Token is the current holder's token.
	Token Token
	// Expires is when the current lease expires, on the backend's clock.
	Expires time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease: %q held by %q (token %d) until %s",
		e.Key, e.Owner, e.Token, e.Expires.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes a *HeldError match ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// StillHeld is the error for a wait on key that ended without the lease. It
// is last when that names the holder (a *HeldError); otherwise it asks b who
// holds key now and names that holder; when the key came free just now (b
// says ErrNotFound), it is an error matching ErrHeld that says the key was
// held until the wait ended. When b cannot say (it failed), the wait has
// learned nothing of the key, and the error is that failure, matching
// ErrUnavailable, not ErrHeld: a client of several servers moves on to the
// next after ErrUnavailable and not after ErrHeld, and a server cut off
// from its backend answered "held" at the end of every wait, so that its
// clients waited on there for a key free through the others.
func StillHeld(ctx context.Context, b Backend, key string, last error) error {
	var he *HeldError
	if errors.As(last, &he) {
		return he
	}
	l, err := b.Get(ctx, key)
	switch {
	case err == nil:
		return &HeldError{Key: key, Owner: l.Owner, Token: l.Token, Expires: l.Expires}
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("%w: %q was held until the wait ended; try again", ErrHeld, key)
	case errors.Is(err, ErrUnavailable):
		return fmt.Errorf("lease: the wait for %q ran out, and who holds it is unknown: %w", key, err)
	}
	return fmt.Errorf("%w: the wait for %q ran out, and who holds it is unknown: %w", ErrUnavailable, key, err)
}

// HolderExpires returns when the holder that err names expires, on the
// backend's clock: the Expires of the first *HeldError in err's chain, or
// the zero time when err names no holder. A waiter takes it as a hint of
// when to try again, never as a promise: the backend's clock decides.
func HolderExpires(err error) time.Time {
	var he *HeldError
	if errors.As(err, &he) {
		return he.Expires
	}
	return time.Time{}
}

// invalidf returns an error matching ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
