package leasehttp

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/leasehq/lease"
)

// AllKeys is the prefix that grants a credential every key.
const AllKeys = "*"

// Credential is one bearer token the server accepts and the key prefixes it
// may use. A prefix is literal ("jobs/" covers "jobs/nightly"); only the
// lone AllKeys covers everything.
type Credential struct {
	// Token is the secret the client sends as "Authorization: Bearer TOKEN":
	// printable ASCII without spaces. Use at least 32 random characters.
	Token string
	// Prefixes are the key prefixes the token may acquire, renew, release,
	// get and list: at least one; AllKeys for every key.
	Prefixes []string
}

// validate checks c the same way whether it came from a file or from code.
func (c Credential) validate() error {
	if c.Token == "" {
		return errors.New("token is empty")
	}
	for i := 0; i < len(c.Token); i++ {
		if b := c.Token[i]; b <= ' ' || b > '~' {
			return fmt.Errorf("token has byte %#x at %d; want printable ASCII without spaces", b, i)
		}
	}
	if len(c.Prefixes) == 0 {
		return errors.New("no key prefix; write * for all keys")
	}
	for _, p := range c.Prefixes {
		if p == AllKeys {
			continue
		}
		if p == "" {
			return errors.New("empty key prefix; write * for all keys")
		}
		// A '*' elsewhere looks like a glob but would match only a literal
		// '*', so a typo would silently grant nothing — or the wrong thing.
		if strings.Contains(p, "*") {
			return fmt.Errorf("key prefix %s contains '*'; prefixes are literal (\"jobs/\" covers \"jobs/x\") and only a lone * means all keys", quoteName(p))
		}
		if err := lease.ValidateKey(p); err != nil {
			return fmt.Errorf("key prefix %s: %v", quoteName(p), strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
		}
	}
	return nil
}

// ParseCredentials reads credentials, one per line: a token, then one or
// more key prefixes separated by spaces or tabs, "*" meaning all keys:
//
//	# comment lines and blank lines are ignored
//	Zq3…8fK   *
//	Hv9…2mD   jobs/ cron/
//
// Comments take whole lines. A malformed line, a token given twice or a file without any credential is
// an error naming the line; the error matches lease.ErrInvalid.
func ParseCredentials(r io.Reader) ([]Credential, error) {
	creds, _, err := parseCredentials(r)
	return creds, err
}

// parseCredentials is ParseCredentials that also returns the line number of
// each credential, for warnings that must name a token without quoting it.
func parseCredentials(r io.Reader) ([]Credential, []int, error) {
	var creds []Credential
	var lines []int
	firstLine := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if i := slices.IndexFunc(fields, func(f string) bool { return strings.HasPrefix(f, "#") }); i > 0 {
			// Taken as prefixes, the words of a trailing comment would grant
			// keys nobody meant to grant.
			return nil, nil, fmt.Errorf("%w: leasehttp: credentials line %d: %q starts a comment after the token; put comments on lines of their own", lease.ErrInvalid, n, fields[i])
		}
		c := Credential{Token: fields[0], Prefixes: fields[1:]}
		if err := c.validate(); err != nil {
			return nil, nil, fmt.Errorf("%w: leasehttp: credentials line %d: %v", lease.ErrInvalid, n, err)
		}
		if prev, dup := firstLine[c.Token]; dup {
			return nil, nil, fmt.Errorf("%w: leasehttp: credentials line %d: the token of line %d again", lease.ErrInvalid, n, prev)
		}
		firstLine[c.Token] = n
		creds = append(creds, c)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("%w: leasehttp: reading credentials: %v", lease.ErrInvalid, err)
	}
	if len(creds) == 0 {
		// An empty file must not quietly turn authentication off.
		return nil, nil, fmt.Errorf("%w: leasehttp: no credentials found", lease.ErrInvalid)
	}
	return creds, lines, nil
}

// ShortToken is the length in bytes under which ReadCredentialsFile warns
// that a token could be guessed. It is a warning, not an error, so that an
// existing file keeps working while its owner replaces the token.
const ShortToken = 16

// CredentialsFile is a credentials file as ReadCredentialsFile found it.
type CredentialsFile struct {
	// Credentials are the file's credentials, in file order.
	Credentials []Credential
	// Warnings say what makes the file weaker than it should be: access
	// for group or others, tokens shorter than ShortToken (by line
	// number). They never quote a token, so they can go to a log.
	Warnings []string
}

// ReadCredentialsFile reads the credentials file at path (see
// ParseCredentials) and checks it for what should be fixed but does not stop
// a server: a mode giving group or others any access (on Unix), and tokens
// shorter than ShortToken.
func ReadCredentialsFile(path string) (*CredentialsFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("leasehttp: credentials: %w", err)
	}
	defer f.Close()
	creds, lines, err := parseCredentials(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := &CredentialsFile{Credentials: creds}
	// Windows reports no group or other bits worth reading.
	if fi, err := f.Stat(); err == nil && runtime.GOOS != "windows" {
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			out.Warnings = append(out.Warnings, fmt.Sprintf(
				"leasehttp: credentials file has mode %#o: group or others may read or change its tokens; chmod 600 it", perm))
		}
	}
	for i, c := range creds {
		if len(c.Token) < ShortToken {
			out.Warnings = append(out.Warnings, fmt.Sprintf(
				"leasehttp: credentials line %d: token shorter than %d bytes could be guessed; use 32 random characters", lines[i], ShortToken))
		}
	}
	return out, nil
}

// LoadCredentials reads the credentials file at path (see ParseCredentials);
// ReadCredentialsFile also says what is weak about it.
func LoadCredentials(path string) ([]Credential, error) {
	f, err := ReadCredentialsFile(path)
	if err != nil {
		return nil, err
	}
	return f.Credentials, nil
}

// credential is a Credential as the server keeps it: the token only as its
// SHA-256, so that every comparison is between 32-byte values and takes the
// same time whatever the lengths involved.
type credential struct {
	sum         [sha256.Size]byte
	prefixes    []string // nil with all
	all         bool
	fingerprint string // for logs: the first 8 hex digits of the hash
}

func newCredentials(cs []Credential) ([]credential, error) {
	if len(cs) == 0 {
		return nil, fmt.Errorf("%w: leasehttp: no credentials given; leave WithCredentials out to authorise every request", lease.ErrInvalid)
	}
	seen := map[string]bool{}
	out := make([]credential, 0, len(cs))
	for i, c := range cs {
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("%w: leasehttp: credential %d: %v", lease.ErrInvalid, i+1, err)
		}
		if seen[c.Token] {
			return nil, fmt.Errorf("%w: leasehttp: credential %d repeats an earlier token", lease.ErrInvalid, i+1)
		}
		seen[c.Token] = true
		sc := credential{sum: sha256.Sum256([]byte(c.Token))}
		sc.fingerprint = hex.EncodeToString(sc.sum[:4])
		for _, p := range c.Prefixes {
			if p == AllKeys {
				sc.all = true
			}
		}
		if !sc.all {
			sc.prefixes = append([]string(nil), c.Prefixes...)
		}
		out = append(out, sc)
	}
	return out, nil
}

// SetCredentials replaces the credentials of a server made WithCredentials
// in one atomic swap, for rotating tokens without a restart. A request is
// checked against the set current when it arrives and keeps that
// credential to its end, so requests in flight finish as they started. creds
// are checked as WithCredentials checks them; on an error the server keeps
// the credentials it has. A server made without credentials authorises
// every request and cannot be given credentials later: that would change
// who may reach it, which is decided when it starts.
func (s *Server) SetCredentials(creds []Credential) error {
	if s.creds.Load() == nil {
		return fmt.Errorf("%w: leasehttp: the server was made without WithCredentials and serves every request; it cannot take credentials later", lease.ErrInvalid)
	}
	set, err := newCredentials(creds)
	if err != nil {
		return err
	}
	s.creds.Store(&set)
	s.swappedMu.Lock()
	if s.swapped != nil {
		close(s.swapped)
		s.swapped = nil
	}
	s.swappedMu.Unlock()
	return nil
}

// credentialsSwapped returns a channel closed at the next SetCredentials.
// Taken before the set it guards is loaded, it misses no swap after that
// load: SetCredentials stores the set before it closes the channel.
func (s *Server) credentialsSwapped() <-chan struct{} {
	s.swappedMu.Lock()
	defer s.swappedMu.Unlock()
	if s.swapped == nil {
		s.swapped = make(chan struct{})
	}
	return s.swapped
}

// authenticate finds the credential of r's bearer token. It compares the
// token's hash with every credential's, without stopping at a match, so the
// time taken says nothing about which credential (if any) matched.
func authenticate(creds []credential, r *http.Request) (*credential, error) {
	hs := r.Header.Values("Authorization")
	if len(hs) > 1 {
		// Taking the first would let the order of the headers (one added
		// by a proxy, say) choose between two credentials.
		return nil, fmt.Errorf("%w: more than one Authorization header; send one \"Authorization: Bearer TOKEN\"", ErrUnauthorized)
	}
	h := ""
	if len(hs) == 1 {
		h = hs[0]
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" {
		return nil, fmt.Errorf("%w: no Authorization header; send \"Authorization: Bearer TOKEN\"", ErrUnauthorized)
	}
	tok = strings.TrimLeft(tok, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, fmt.Errorf("%w: Authorization header is not \"Bearer TOKEN\"", ErrUnauthorized)
	}
	sum := sha256.Sum256([]byte(tok))
	found := -1
	for i := range creds {
		eq := subtle.ConstantTimeCompare(sum[:], creds[i].sum[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return nil, fmt.Errorf("%w: bearer token matches no credential", ErrUnauthorized)
	}
	return &creds[found], nil
}

// covers reports whether the credential may use key.
func (c *credential) covers(key string) bool {
	if c == nil || c.all {
		return true // nil: the server runs without credentials
	}
	for _, p := range c.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// listPrefixes returns the prefixes to list so that a list of prefix shows
// only keys the credential covers: prefix itself if a credential prefix
// covers all of it, else the credential's prefixes that lie inside it
// (without any that another already covers). None means the credential can
// see nothing under prefix, which the server answers 403.
func (c *credential) listPrefixes(prefix string) []string {
	if c.covers(prefix) {
		return []string{prefix}
	}
	var inside []string
	for _, p := range c.prefixes {
		if strings.HasPrefix(p, prefix) {
			inside = append(inside, p)
		}
	}
	// Sorted, a prefix comes right before the prefixes it covers.
	slices.Sort(inside)
	var out []string
	for _, p := range inside {
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}
