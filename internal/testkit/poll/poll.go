// Package poll waits in tests for a condition that another goroutine, a
// process or an engine makes true: the one place this repository's tests
// look again and again instead of sleeping for a guessed time.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// Backoff bounds: a condition met at once costs a millisecond, one met late
// is looked at every 20 ms.
const (
	first = time.Millisecond
	most  = 20 * time.Millisecond
)

// Err calls cond until it returns nil, and returns nil then; once patience
// has passed it returns cond's last error, with how long it waited. It
// looks again after 1 ms, then at growing gaps of up to 20 ms.
func Err(patience time.Duration, cond func() error) error {
	deadline := time.Now().Add(patience)
	gap := first
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", patience, err)
		}
		// real time: what cond reads changes in another goroutine, process
		// or engine; in a synctest bubble this advances the bubble's clock.
		time.Sleep(gap)
		gap = min(2*gap, most)
	}
}

// Until calls cond until it returns nil, failing t with cond's last error
// if patience passes first.
func Until(t testing.TB, patience time.Duration, cond func() error) {
	t.Helper()
	if err := Err(patience, cond); err != nil {
		t.Fatal(err)
	}
}

// True calls cond until it returns true, failing t with "what: not within
// patience" if patience passes first.
func True(t testing.TB, patience time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, patience, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("not yet: %s", what)
	})
}
