// Package sqlident checks names that pgstore and the SQL guards (pgfence,
// sqlfence) quote into SQL as identifiers. Quoting makes any name safe to
// put in a statement; these checks reject, before any statement runs, the
// names that the engine itself cannot hold, each engine by its own rules.
package sqlident

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Rules are one engine's limits on quoted identifiers. Every engine here
// also refuses the empty name, invalid UTF-8 and the NUL byte.
type Rules struct {
	// Engine names the engine in messages.
	Engine string
	// MaxBytes and MaxChars bound a name's length in bytes and in
	// characters; 0 is no bound.
	MaxBytes, MaxChars int
	// BMPOnly refuses characters above U+FFFF.
	BMPOnly bool
	// NoTrailingSpace refuses a name that ends with a space.
	NoTrailingSpace bool
}

var (
	// PostgreSQL: at most NAMEDATALEN − 1 = 63 bytes.
	PostgreSQL = Rules{Engine: "PostgreSQL", MaxBytes: 63}
	// MySQL (and MariaDB): at most 64 characters of the Basic Multilingual
	// Plane, not ending with a space.
	MySQL = Rules{Engine: "MySQL", MaxChars: 64, BMPOnly: true, NoTrailingSpace: true}
	// SQLite: no limit beyond the common ones.
	SQLite = Rules{Engine: "SQLite"}
)

// Check reports why name cannot be an identifier under r. what names it in
// the message ("schema", "table prefix" …).
func (r Rules) Check(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", what)
	case r.MaxBytes > 0 && len(name) > r.MaxBytes:
		return fmt.Errorf("%s %q is %d bytes, more than %s's %d", what, name, len(name), r.Engine, r.MaxBytes)
	case r.MaxChars > 0 && utf8.RuneCountInString(name) > r.MaxChars:
		return fmt.Errorf("%s %q is %d characters, more than %s's %d", what, name, utf8.RuneCountInString(name), r.Engine, r.MaxChars)
	case r.NoTrailingSpace && strings.HasSuffix(name, " "):
		return fmt.Errorf("%s %q ends with a space, which %s does not allow", what, name, r.Engine)
	}
	if r.BMPOnly {
		for _, c := range name {
			if c > 0xFFFF {
				return fmt.Errorf("%s %q has %U, outside the characters %s allows in names", what, name, c, r.Engine)
			}
		}
	}
	return nil
}
