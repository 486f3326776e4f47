// Package pgident checks names that pgstore and pgfence quote into SQL as
// PostgreSQL identifiers. Quoting (pgx.Identifier.Sanitize) makes any name
// safe; this rejects the names PostgreSQL itself cannot hold.
package pgident

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxLen is PostgreSQL's identifier limit (NAMEDATALEN − 1) in bytes.
const MaxLen = 63

// Check reports why name cannot be a PostgreSQL identifier: empty, longer
// than MaxLen bytes, not UTF-8, or containing NUL. what names it in the
// message ("schema", "table prefix" …).
func Check(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case len(name) > MaxLen:
		return fmt.Errorf("%s %q is %d bytes, more than PostgreSQL's %d", what, name, len(name), MaxLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return errors.New(what + " contains a NUL byte")
		}
	}
	return nil
}
