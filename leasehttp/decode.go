package leasehttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehq/lease"
)

// MaxBodyBytes is the largest request body the server reads; a longer one
// is answered 413 with code "invalid".
const MaxBodyBytes = 64 << 10

// requestError is a client mistake found while reading a request: it carries
// the HTTP status (400, 413 or 415) and matches lease.ErrInvalid.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return "leasehttp: " + e.msg }
func (e *requestError) Unwrap() error { return lease.ErrInvalid }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// quoteName quotes an attacker-chosen name for an error message, cut short
// so that a 64 KiB field name does not come back as a 64 KiB message.
func quoteName(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}

// field is one member of a request object. Exactly one of str and num is
// set; decodeObject fills it and records that it was seen.
type field struct {
	name     string
	required bool
	str      *string
	num      *uint64
	seen     bool
}

// decodeBody reads r's body as one JSON object with exactly the given
// members: unknown or repeated members, members of the wrong type, numbers
// that are negative, fractional, written with an exponent or beyond uint64,
// and anything after the object are refused. encoding/json alone would
// accept "OWNER" for "owner" (it matches case-insensitively), a quoted
// number into json.Number, and null for anything, so members are matched
// here by exact name and each value is checked by its first byte.
func decodeBody(w http.ResponseWriter, r *http.Request, fields ...*field) error {
	if err := checkContentType(r); err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	dec := json.NewDecoder(body)
	err := decodeObject(dec, fields)
	if err == nil {
		// Only whitespace may follow the object.
		if _, terr := dec.Token(); terr != io.EOF {
			var tooBig *http.MaxBytesError
			if errors.As(terr, &tooBig) {
				err = terr
			} else {
				err = badRequest("request body has data after the JSON object")
			}
		}
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &requestError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes)}
	}
	var syn *json.SyntaxError
	switch {
	case err == nil:
	case errors.As(err, &syn):
		return badRequest("request body is not valid JSON: %v (at byte %d)", syn, syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body ends inside the JSON object")
	case errors.Is(err, lease.ErrInvalid):
		return err
	default:
		// A read error: the connection broke while the body was sent.
		return badRequest("reading request body: %v", err)
	}
	for _, f := range fields {
		if f.required && !f.seen {
			return badRequest("field %q is required", f.name)
		}
	}
	return nil
}

func decodeObject(dec *json.Decoder, fields []*field) error {
	tok, err := dec.Token()
	if err == io.EOF {
		return badRequest("request body is empty; want a JSON object")
	}
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return badRequest("request body must be a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string) // inside an object the decoder yields only string keys
		var f *field
		for _, c := range fields {
			if c.name == name {
				f = c
				break
			}
		}
		if f == nil {
			return badRequest("unknown field %s", quoteName(name))
		}
		if f.seen {
			return badRequest("field %q appears more than once", f.name)
		}
		f.seen = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if err := f.set(raw); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing brace; More has seen it
	return err
}

func (f *field) set(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if f.str != nil {
		if len(raw) == 0 || raw[0] != '"' {
			return badRequest("field %q must be a string", f.name)
		}
		return json.Unmarshal(raw, f.str)
	}
	switch {
	case len(raw) > 0 && raw[0] == '-':
		return badRequest("field %q must not be negative", f.name)
	case len(raw) == 0 || raw[0] < '0' || raw[0] > '9':
		return badRequest("field %q must be a number", f.name)
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return badRequest("field %q is too large", f.name)
	}
	if err != nil {
		return badRequest("field %q must be a whole number without fraction or exponent, got %s", f.name, quoteName(string(raw)))
	}
	*f.num = n
	return nil
}

// checkContentType insists on a JSON body. Besides telling a mistaken client
// early, it closes cross-site request forgery against a server bound to
// loopback without credentials: a web page can POST text/plain or a form
// anywhere without a preflight, but not application/json.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return &requestError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("Content-Type must be application/json, got %s", quoteName(ct))}
	}
	return nil
}

// millis converts a TTL given in milliseconds, refusing values outside
// [lease.MinTTL, lease.MaxTTL] before they could overflow a Duration.
func millisTTL(name string, ms uint64) (time.Duration, error) {
	if ms < uint64(lease.MinTTL/time.Millisecond) || ms > uint64(lease.MaxTTL/time.Millisecond) {
		return 0, badRequest("field %q is %d; want %d to %d milliseconds", name, ms,
			lease.MinTTL.Milliseconds(), lease.MaxTTL.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func checkToken(t uint64) (lease.Token, error) {
	if t == 0 || t > uint64(lease.MaxToken) {
		return 0, badRequest("field \"token\" is %d; want 1 to %d", t, uint64(lease.MaxToken))
	}
	return lease.Token(t), nil
}

func parseID(s string) (lease.ID, error) {
	id, err := lease.ParseID(s)
	if err != nil {
		return lease.ID{}, badRequest("field \"id\": %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return id, nil
}

// decodeAcquire reads {"owner","ttl_ms","wait_ms"}; wait_ms is optional
// (0 = try once) and capped at maxWait.
func decodeAcquire(w http.ResponseWriter, r *http.Request, maxWait time.Duration) (acquireRequest, error) {
	var owner string
	var ttl, wait uint64
	err := decodeBody(w, r,
		&field{name: "owner", required: true, str: &owner},
		&field{name: "ttl_ms", required: true, num: &ttl},
		&field{name: "wait_ms", num: &wait})
	if err != nil {
		return acquireRequest{}, err
	}
	if err := lease.ValidateOwner(owner); err != nil {
		return acquireRequest{}, badRequest("field \"owner\": %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	req := acquireRequest{Owner: owner}
	if req.TTL, err = millisTTL("ttl_ms", ttl); err != nil {
		return acquireRequest{}, err
	}
	// Cap before multiplying: wait_ms may be anything up to 2^64-1.
	if wait >= uint64(maxWait/time.Millisecond) {
		req.Wait = maxWait
	} else {
		req.Wait = time.Duration(wait) * time.Millisecond
	}
	return req, nil
}

// decodeRenew reads {"id","token","ttl_ms"}, all required.
func decodeRenew(w http.ResponseWriter, r *http.Request) (renewRequest, error) {
	var id string
	var token, ttl uint64
	err := decodeBody(w, r,
		&field{name: "id", required: true, str: &id},
		&field{name: "token", required: true, num: &token},
		&field{name: "ttl_ms", required: true, num: &ttl})
	if err != nil {
		return renewRequest{}, err
	}
	var req renewRequest
	if req.ID, err = parseID(id); err != nil {
		return renewRequest{}, err
	}
	if req.Token, err = checkToken(token); err != nil {
		return renewRequest{}, err
	}
	if req.TTL, err = millisTTL("ttl_ms", ttl); err != nil {
		return renewRequest{}, err
	}
	return req, nil
}

// decodeRelease reads {"id","token"}, both required.
func decodeRelease(w http.ResponseWriter, r *http.Request) (releaseRequest, error) {
	var id string
	var token uint64
	err := decodeBody(w, r,
		&field{name: "id", required: true, str: &id},
		&field{name: "token", required: true, num: &token})
	if err != nil {
		return releaseRequest{}, err
	}
	var req releaseRequest
	if req.ID, err = parseID(id); err != nil {
		return releaseRequest{}, err
	}
	if req.Token, err = checkToken(token); err != nil {
		return releaseRequest{}, err
	}
	return req, nil
}

// pathKey returns the {key} path segment, unescaped by ServeMux, checked
// with lease.ValidateKey.
func pathKey(r *http.Request) (string, error) {
	k := r.PathValue("key")
	if err := lease.ValidateKey(k); err != nil {
		return "", badRequest("key in path: %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return k, nil
}

// listPrefix reads the query of GET /v1/leases: at most one prefix, no other
// parameters. An empty or absent prefix lists every key.
func listPrefix(r *http.Request) (string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", badRequest("query string: %v", err)
	}
	for name := range q {
		if name != "prefix" {
			return "", badRequest("unknown query parameter %s", quoteName(name))
		}
	}
	ps := q["prefix"]
	if len(ps) > 1 {
		return "", badRequest("query parameter \"prefix\" given %d times", len(ps))
	}
	if len(ps) == 0 || ps[0] == "" {
		return "", nil
	}
	if err := lease.ValidateKey(ps[0]); err != nil {
		return "", badRequest("prefix: %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return ps[0], nil
}
