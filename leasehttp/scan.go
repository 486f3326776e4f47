package leasehttp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is the one JSON reader of the wire codec: the server reads
// request bodies with it (decode.go), the client every answer and watch
// event (wire.go). It reads the JSON grammar in one pass over the body and
// leaves only strings with escapes or non-UTF-8 bytes to encoding/json,
// which also judges their escapes. Its errors are requestErrors (400): the
// server answers them as they are, the client wraps their text into a
// malformed answer.
type scanner struct {
	b []byte
	i int
}

// maxDepth bounds the nesting of the values skip reads, as encoding/json
// bounds its own (at 10000, deeper than this).
const maxDepth = 1000

// errTruncated is a body that ends inside a JSON value.
var errTruncated = badRequest("body ends inside a JSON value")

// next skips JSON whitespace and returns the byte there, 0 at the end (a
// NUL byte is never valid JSON outside a string, so 0 is refused either way).
func (s *scanner) next() byte {
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

// unexpected is the error for the byte at s.i, which is not what the JSON
// grammar allows there.
func (s *scanner) unexpected(want string) error {
	if s.i >= len(s.b) {
		return errTruncated
	}
	return badRequest("body is not valid JSON: want %s, got %s at byte %d", want, quoteName(string(s.b[s.i:s.i+1])), s.i)
}

// end checks that nothing but whitespace follows the value read.
func (s *scanner) end() error {
	if s.next(); s.i < len(s.b) {
		return badRequest("body has data after the JSON value")
	}
	return nil
}

// str reads the string whose opening quote is at s.i and returns its
// contents: a slice of the body when it needs no decoding, else what
// encoding/json makes of it (which also judges its escapes).
func (s *scanner) str() ([]byte, error) {
	start, plain := s.i, true
	var bits byte // every byte ORed: below utf8.RuneSelf, the string is ASCII
	i := start + 1
	for i+8 <= len(s.b) && !special8(binary.LittleEndian.Uint64(s.b[i:])) {
		i += 8 // eight bytes of printable ASCII, none of them '"' or '\\'
	}
	for ; i < len(s.b); i++ {
		c := s.b[i]
		bits |= c
		switch {
		case c == '"':
			s.i = i + 1
			raw := s.b[start:s.i]
			if plain && (bits < utf8.RuneSelf || utf8.Valid(raw)) {
				return raw[1 : len(raw)-1], nil
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, badRequest("body is not valid JSON: %v (in the string at byte %d)", err, start)
			}
			return []byte(v), nil
		case c == '\\':
			plain = false
			i++ // the escaped byte cannot end the string
		case c < 0x20:
			s.i = i
			return nil, s.unexpected("no control character in a string")
		}
	}
	return nil, errTruncated
}

// special8 reports whether any of the eight bytes in x is '"', '\\', a
// control character or not ASCII: what str must look at byte by byte.
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - ones) &^ v & highs } // non-zero if a byte of v is 0
	return zero(x^(ones*'"'))|zero(x^(ones*'\\'))|((x-ones*0x20)&^x&highs)|(x&highs) != 0
}

// checkText reports why the JSON string raw (with its quotes, already read
// by scanner.str, so its escapes are well formed) is not Unicode text.
func checkText(raw []byte) error {
	if !utf8.Valid(raw) {
		return errors.New("is not valid UTF-8")
	}
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		r := hexRune(raw[i+1 : i+5])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		// A surrogate must be a high one followed by a \u escape of a low one.
		if i+6 < len(raw)-1 && raw[i+1] == '\\' && raw[i+2] == 'u' &&
			utf16.DecodeRune(r, hexRune(raw[i+3:i+7])) != utf8.RuneError {
			i += 6
			continue
		}
		return fmt.Errorf("has a lone UTF-16 surrogate \\u%04x", r)
	}
	return nil
}

// hexRune reads four hex digits.
func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		default:
			r = r<<4 | rune(c-'A'+10)
		}
	}
	return r
}

// object reads the object that is next at s, calling member with each
// member's name, decoded, and s at the member's value, which member must
// read. what names the value for the error if it is not an object.
func (s *scanner) object(what string, member func(name []byte) error) error {
	if s.next() != '{' {
		if s.i == len(s.b) {
			return errTruncated
		}
		return badRequest("%s must be a JSON object", what)
	}
	s.i++
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		if s.next() != '"' {
			return s.unexpected("a member name")
		}
		name, err := s.str()
		if err != nil {
			return err
		}
		if s.next() != ':' {
			return s.unexpected("':'")
		}
		s.i++
		if err := member(name); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.unexpected("',' or '}'")
		}
	}
}

// array reads the array that is next at s, calling elem with s at each
// element, which elem must read, and its index.
func (s *scanner) array(what string, elem func(i int) error) error {
	if s.next() != '[' {
		if s.i == len(s.b) {
			return errTruncated
		}
		return badRequest("%s must be an array", what)
	}
	s.i++
	if s.next() == ']' {
		s.i++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.unexpected("',' or ']'")
		}
	}
}

// string reads the string value of the member name.
func (s *scanner) string(name string) ([]byte, error) {
	if s.next() != '"' {
		return nil, badRequest("field %q must be a string", name)
	}
	return s.str()
}

// uint reads the value of the member name, a whole number written as JSON
// writes one: digits without sign, fraction, exponent or leading zero,
// within uint64.
func (s *scanner) uint(name string) (uint64, error) {
	switch c := s.next(); {
	case c == '-':
		return 0, badRequest("field %q must not be negative", name)
	case c < '0' || c > '9':
		return 0, badRequest("field %q must be a number", name)
	}
	start := s.i
	var n uint64
	tooLarge := false
	for ; s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9'; s.i++ {
		d := uint64(s.b[s.i] - '0')
		tooLarge = tooLarge || n > (math.MaxUint64-d)/10
		n = n*10 + d
	}
	switch {
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return 0, badRequest("field %q must be a whole number without fraction or exponent", name)
	case s.i-start > 1 && s.b[start] == '0':
		return 0, badRequest("body is not valid JSON: field %q has a leading zero", name)
	case tooLarge:
		return 0, badRequest("field %q is too large", name)
	}
	return n, nil
}

// boolean reads the value of the member name, true or false.
func (s *scanner) boolean(name string) (bool, error) {
	s.next()
	for _, lit := range []string{"true", "false"} {
		if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
			s.i += len(lit)
			return lit == "true", nil
		}
	}
	return false, badRequest("field %q must be true or false", name)
}

// skip reads a JSON value of any kind, checking its grammar, and drops it:
// the value of a member an answer reader does not know (from a newer
// server, say), which must still be JSON.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return badRequest("body nests deeper than %d values", maxDepth)
	}
	switch c := s.next(); {
	case c == '{':
		return s.object("", func([]byte) error { return s.skip(depth + 1) })
	case c == '[':
		return s.array("", func(int) error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
			s.i += len(lit)
			return nil
		}
	}
	return s.unexpected("a JSON value")
}

// number reads a JSON number of any kind:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		start := s.i
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
		}
		return s.i - start
	}
	start := s.i
	switch n := digits(); {
	case n == 0:
		return s.unexpected("a digit")
	case n > 1 && s.b[start] == '0':
		return badRequest("body is not valid JSON: a number has a leading zero at byte %d", start)
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.unexpected("a digit")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.unexpected("a digit")
		}
	}
	return nil
}

// members are the names of an object's members that an answer reader
// knows, and which of them it has read.
type members struct {
	names []string
	seen  uint32
	next  int // the index after the last member read
}

// known reads the object that is next at s, what, calling read with the
// index in m.names of each member it knows, s at its value, and skipping
// the others. A member read twice, or one whose name differs from a known
// one only in case, is an error: encoding/json, whose reading of the shape
// this codec must match, would read it as that member (it matches names
// without regard to case, and a repeated member's last value wins).
func (s *scanner) known(what string, m *members, read func(i int) error) error {
	return s.object(what, func(name []byte) error {
		// The writer's order first: almost always right.
		i := m.next
		if i >= len(m.names) || string(name) != m.names[i] {
			i = slices.Index(m.names, string(name))
		}
		switch {
		case i >= 0 && m.has(i):
			return badRequest("member %q appears more than once", m.names[i])
		case i >= 0:
			m.seen |= 1 << i
			m.next = i + 1
			return read(i)
		}
		for _, n := range m.names {
			if strings.EqualFold(string(name), n) {
				return badRequest("member %s is not %q", quoteName(string(name)), n)
			}
		}
		return s.skip(1)
	})
}

// has reports whether the member m.names[i] was read.
func (m *members) has(i int) bool { return m.seen&(1<<i) != 0 }
