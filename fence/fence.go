// Package fence makes a protected resource reject the late writes of a
// holder whose lease has expired. A guard remembers, per resource, the
// highest fencing token it has accepted, and admits a write only if the
// writer's token is not older — comparing, writing and recording as one
// atomic step (I6).
//
// Guards for data kept elsewhere live beside this package: pgfence (inside a
// PostgreSQL transaction), sqlfence (inside a MySQL, MariaDB or SQLite
// transaction, through database/sql) and redisfence (a Lua compare-and-set).
package fence

import (
	"context"
	"fmt"

	"github.com/leasehq/lease"
)

// Mode is the rule a guard admits tokens by.
type Mode int

const (
	// AtLeast admits token >= highest accepted: one holder may write many
	// times with its token. It is the default.
	AtLeast Mode = iota
	// Strict admits only token > highest accepted: each token writes once,
	// the rule of the seed's FencedResource. A writer that sends a write
	// again after losing the answer to the first (a timeout, a dropped
	// connection) is refused as stale if the first was accepted; only
	// redisfence recognises its own client's resending. Use AtLeast for
	// writes that may be retried.
	Strict
)

func (m Mode) String() string {
	switch m {
	case AtLeast:
		return "at-least"
	case Strict:
		return "strict"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Admits reports whether m admits token when highest is the highest token
// accepted so far.
func (m Mode) Admits(token, highest lease.Token) bool {
	if m == Strict {
		return token > highest
	}
	return token >= highest
}

// ValidateMode checks that m is AtLeast or Strict, the rules a guard can
// admit tokens by. The error matches lease.ErrInvalid.
func ValidateMode(m Mode) error {
	if m != AtLeast && m != Strict {
		return fmt.Errorf("%w: fence: unknown mode %v", lease.ErrInvalid, m)
	}
	return nil
}

// Guard admits writes to resources by fencing token.
type Guard interface {
	// Check runs write if token is admitted for resource, while no other
	// write to resource can run, and records token as the highest accepted
	// if write returns nil. A rejected token returns a *StaleTokenError
	// (matching lease.ErrStaleToken) and runs nothing; a failed write
	// returns write's error and records nothing.
	Check(ctx context.Context, resource string, token lease.Token, write func() error) error
}

// StaleTokenError is a rejected write. It matches lease.ErrStaleToken.
type StaleTokenError struct {
	Resource string      // the resource written to
	Token    lease.Token // the token the writer gave
	Highest  lease.Token // the highest token the resource had accepted
	Mode     Mode        // the rule that rejected it
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: highest accepted is %d (mode %s)",
		e.Token, e.Resource, e.Highest, e.Mode)
}

// Unwrap makes a *StaleTokenError match lease.ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return lease.ErrStaleToken }

// ValidateToken checks that token is one a backend can have issued: 1 to
// lease.MaxToken. The error matches lease.ErrInvalid.
func ValidateToken(token lease.Token) error {
	if token == 0 || token > lease.MaxToken {
		return fmt.Errorf("%w: fence: token %d is outside [1, %d]", lease.ErrInvalid, token, lease.MaxToken)
	}
	return nil
}
