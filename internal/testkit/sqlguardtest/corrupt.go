package sqlguardtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// CorruptMarks are tokens, as SQL literals, that no guard writes but that a
// table of the operator's making (without the guard's CHECK) can hold: put
// there by hand, or by a script that "reset" a mark.
var CorruptMarks = []string{"NULL", "0", "-5", "9007199254740993", "9223372036854775807"}

// MarkTable is a guard's table on one engine, with a token column that
// takes any BIGINT and NULL.
type MarkTable struct {
	// Put stores mark (an SQL literal) as resource's token, committed.
	Put func(resource, mark string) error
	// Stored returns resource's committed token as text ("NULL" for NULL).
	Stored func(resource string) (string, error)
	// Check runs the guard's Check for resource and token in a transaction
	// of its own, committed if Check returns nil and rolled back otherwise.
	Check func(resource string, token lease.Token) error
	// Highest is the guard's Highest.
	Highest func(resource string) (lease.Token, error)
}

// RefusesCorruptMarks puts each of CorruptMarks in a resource's row and
// fails t unless Check, with tokens below, equal to and above every real
// token (1, 7, lease.MaxToken), is refused with an error matching
// lease.ErrUnavailable (neither admitted nor a StaleTokenError naming the
// mark as the highest accepted) and leaves the mark as it was, and
// Highest refuses it too.
func RefusesCorruptMarks(t *testing.T, m MarkTable) {
	t.Helper()
	for i, mark := range CorruptMarks {
		res := fmt.Sprintf("corrupt-%d", i)
		if err := m.Put(res, mark); err != nil {
			t.Fatalf("storing mark %s: %v", mark, err)
		}
		for _, tok := range []lease.Token{1, 7, lease.MaxToken} {
			err := m.Check(res, tok)
			if !errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrStaleToken) {
				t.Errorf("mark %s: Check with token %d = %v, want an error matching ErrUnavailable", mark, tok, err)
			}
			if got, err := m.Stored(res); err != nil || got != mark {
				t.Errorf("mark %s: after Check with token %d the row holds %s (%v)", mark, tok, got, err)
			}
		}
		if h, err := m.Highest(res); !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("mark %s: Highest = %d, %v; want an error matching ErrUnavailable", mark, h, err)
		}
	}
	// A real mark beside them is still kept as ever.
	if err := m.Check("corrupt-none", 3); err != nil {
		t.Fatalf("Check on a fresh resource: %v", err)
	}
	var stale *fence.StaleTokenError
	if err := m.Check("corrupt-none", 2); !errors.As(err, &stale) || stale.Highest != 3 {
		t.Errorf("token 2 after 3: %v, want a StaleTokenError with highest 3", err)
	}
}
