package sqlguardtest

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehq/lease"
)

// BadInput calls check with each resource and token that a guard's Check
// must refuse as invalid, and fails t unless each error matches
// lease.ErrInvalid.
func BadInput(t *testing.T, check func(resource string, token lease.Token) error) {
	t.Helper()
	for name, c := range map[string]struct {
		res string
		tok lease.Token
	}{
		"zero token":    {"r", 0},
		"huge token":    {"r", lease.MaxToken + 1},
		"empty":         {"", 1},
		"NUL":           {"a\x00", 1},
		"invalid UTF-8": {"a\xff", 1},
		"too long":      {strings.Repeat("r", lease.MaxKeyLen+1), 1},
	} {
		if err := check(c.res, c.tok); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Check with %s: err = %v, want ErrInvalid", name, err)
		}
	}
}
