package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// Token is a fencing token. For one key, every successful acquisition gets a
// token strictly greater than every token issued before for that key (I1).
// Tokens start at 1; 0 means "no token".
type Token uint64

// MaxToken is the largest token a backend issues: 2^53, so that a token
// survives a round trip through a JSON number in any language.
const MaxToken Token = 1 << 53

// ID is a lease's secret: 128 random bits that, together with the token,
// prove the right to renew or release it (I4). The zero ID is never issued.
type ID [16]byte

// NewID returns a fresh random ID from crypto/rand.
func NewID() ID {
	var id ID
	for id.IsZero() {
		_, _ = rand.Read(id[:]) // crypto/rand.Read never fails on supported platforms
	}
	return id
}

// IsZero reports whether id is the zero ID, which no backend issues.
func (id ID) IsZero() bool { return id == ID{} }

// Reveal returns id as 32 lowercase hex digits: the form the HTTP API, the
// CLI and the engines carry. It is the only way to print the secret; use it
// where the ID must travel, never in logs or error messages.
func (id ID) Reveal() string { return hex.EncodeToString(id[:]) }

// redactedID is how an ID prints anywhere but through Reveal.
const redactedID = "[redacted]"

// String returns a placeholder, never the secret: an ID that reaches a log
// line or an error message through fmt gives nothing away. Reveal returns
// the digits.
func (id ID) String() string { return redactedID }

// GoString is String for %#v.
func (id ID) GoString() string { return "lease.ID" + redactedID }

// Format prints the placeholder for every verb, so %x, %d and %+v (which
// would otherwise format the bytes) reveal nothing either.
func (id ID) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, id.GoString())
		return
	}
	_, _ = io.WriteString(f, redactedID)
}

// ParseID parses the 32 hex digits of ID.Reveal.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return ID{}, invalidf("lease id must be %d hex digits, got %d characters", 2*len(id), len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ID{}, invalidf("lease id is not hex: %v", err)
	}
	if id.IsZero() {
		return ID{}, invalidf("lease id is zero")
	}
	return id, nil
}

// Lease is one generation of a lease on a key, as the backend granted or
// renewed it.
type Lease struct {
	// Key is the name of the protected thing.
	Key string
	// Owner is the holder's self-chosen name, for people reading logs; it
	// proves nothing (I4).
	Owner string
	// Token is this generation's fencing token. Renewal keeps it (I2).
	Token Token
	// ID is the lease's secret. It is zero in leases returned by Get and List.
	ID ID
	// TTL is the time to live asked for in the last acquire or renew.
	TTL time.Duration
	// Expires is when the lease expires, on the backend's clock (I5). Clients
	// must not compare it with their own clock to decide they still hold it.
	Expires time.Time
}

// Limits on keys and TTLs, the same for every backend.
const (
	MaxKeyLen = 512
	MinTTL    = 10 * time.Millisecond
	MaxTTL    = 24 * time.Hour
)

// ValidateKey reports whether key is 1 to MaxKeyLen bytes of UTF-8 without
// control characters. The error matches ErrInvalid.
func ValidateKey(key string) error { return validateName("key", key) }

func validateName(what, key string) error {
	if key == "" {
		return invalidf("%s is empty", what)
	}
	if len(key) > MaxKeyLen {
		return invalidf("%s is %d bytes, more than %d", what, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf { // ASCII fast path
			if c < 0x20 || c == 0x7f {
				return invalidf("%s has control character %#x at byte %d", what, c, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(key[i:])
		if r == utf8.RuneError && size == 1 {
			return invalidf("%s is not valid UTF-8 at byte %d", what, i)
		}
		if r >= 0x80 && r <= 0x9f {
			return invalidf("%s has control character %U at byte %d", what, r, i)
		}
		i += size
	}
	return nil
}

// ValidateTTL reports whether ttl is within [MinTTL, MaxTTL]. The error
// matches ErrInvalid.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return invalidf("ttl %v is outside [%v, %v]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// ValidateLease checks what Renew and Release need from a lease: a valid key,
// a non-zero token and a non-zero ID. The error matches ErrInvalid.
func ValidateLease(l Lease) error {
	if err := ValidateKey(l.Key); err != nil {
		return err
	}
	if l.Token == 0 {
		return invalidf("token is zero")
	}
	if l.Token > MaxToken {
		return invalidf("token %d is above the maximum %d", l.Token, MaxToken)
	}
	if l.ID.IsZero() {
		return invalidf("lease id is zero")
	}
	return nil
}

// ValidateOwner reports whether owner is 1 to MaxKeyLen bytes of UTF-8
// without control characters. The error matches ErrInvalid.
func ValidateOwner(owner string) error { return validateName("owner", owner) }

// ValidateAcquire checks the arguments of Backend.Acquire: a valid key and
// owner and a TTL within [MinTTL, MaxTTL]. The error matches ErrInvalid.
func ValidateAcquire(key, owner string, ttl time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	return ValidateTTL(ttl)
}
