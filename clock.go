package lease

import "time"

// Clock is the client's source of time. The real clock is used unless a test
// or simulation injects another with WithClock. The client uses it only to
// schedule renewals and to judge its own conservative deadline; expiry itself
// is always judged on the backend's clock.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d, unless stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call scheduled by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did so.
	Stop() bool
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
