package leasehttp

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehq/lease"
)

// MaxBodyBytes is the largest request body the server reads; a longer one
// is answered 413 with code "invalid".
const MaxBodyBytes = 64 << 10

// MaxRenewBatchBodyBytes is the largest body of POST /v1/renew: room for
// lease.MaxRenewBatch renewals of the longest keys, every byte escaped.
const MaxRenewBatchBodyBytes = 1 << 20

// requestError is a client mistake found while reading a request: it carries
// the HTTP status (400, 413 or 415) and matches lease.ErrInvalid.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return "leasehttp: " + e.msg }
func (e *requestError) Unwrap() error { return lease.ErrInvalid }

// errTooLarge is the error for a request body over max bytes.
func errTooLarge(max int64) error {
	return &requestError{status: http.StatusRequestEntityTooLarge,
		msg: fmt.Sprintf("request body is larger than %d bytes", max)}
}

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

// field is one member of a request object. Exactly one of str, raw and num
// is set (or elem); decodeObject fills it and records that it was seen.
type field struct {
	name     string
	required bool
	str      *string
	num      *uint64
	boolean  *bool // set instead of str and num: true or false
	// raw, set instead of str, receives a string's contents as bytes:
	// a slice of the body when it needs no decoding, so valid only as
	// long as the body is.
	raw *[]byte
	// text refuses a string that is not Unicode text: invalid UTF-8, or a
	// \u escape of a lone UTF-16 surrogate. encoding/json turns either
	// into U+FFFD, so two different owners would read alike.
	text bool
	// elem, set instead of str and num, makes the value an array of
	// objects: elem is called for each element, with its index, and gives
	// the element's fields and a check to run once they are read.
	elem func(i int) ([]*field, func() error, error)
	seen bool
}

// decodeBody reads r's body, at most MaxBodyBytes, as one JSON object with
// exactly the given members: unknown or repeated members, members of the
// wrong type, numbers that are negative, fractional, written with an
// exponent or beyond uint64, and anything after the object are refused.
// The whole body is read first, so any body over the limit is 413 whatever
// it holds.
//
// encoding/json alone would accept "OWNER" for "owner" (it matches
// case-insensitively), a repeated member, and null for anything, and walking
// the object with json.Decoder.Token to check that costs more than the rest
// of a request. The bodies are small flat objects of strings and whole
// numbers, so decodeObject reads them with the wire codec's scanner
// (scan.go) in one pass.
func decodeBody(w http.ResponseWriter, r *http.Request, fields ...*field) error {
	return decodeBodyUpTo(w, r, MaxBodyBytes, fields...)
}

// decodeBodyUpTo is decodeBody with a limit of max bytes.
func decodeBodyUpTo(w http.ResponseWriter, r *http.Request, max int64, fields ...*field) error {
	return decodeBodyInto(w, r, max, nil, fields...)
}

// decodeBodyInto is decodeBodyUpTo reading the body into *buf's room, if
// buf is not nil, and leaving the buffer it read into there: no field
// holds on to the body once decoded (raw fields must be used up by then).
func decodeBodyInto(w http.ResponseWriter, r *http.Request, max int64, buf *[]byte, fields ...*field) error {
	if err := checkContentType(r); err != nil {
		return err
	}
	if err := checkContentEncoding(r); err != nil {
		return err
	}
	if r.ContentLength > max {
		// Refused when the headers arrive: reading the body first would
		// let a client hold the connection while it sends what is refused
		// anyway.
		return errTooLarge(max)
	}
	var dst []byte
	if buf != nil {
		dst = *buf
	}
	body, err := readBodyInto(dst, http.MaxBytesReader(w, r.Body, max), r.ContentLength, min(max, MaxBodyBytes))
	if buf != nil {
		*buf = body[:0]
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return errTooLarge(max)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// http.Server's ReadTimeout passed: a client too slow, or one
		// trickling its body to hold the connection.
		return &requestError{status: http.StatusRequestTimeout,
			msg: "request body did not arrive within the server's read timeout"}
	case err != nil:
		// The connection broke while the body was sent.
		return badRequest("reading request body: %v", err)
	}
	if rw, ok := w.(*responseWriter); ok {
		rw.bodyUnread = false
	}
	if err := decodeObject(body, fields); err != nil {
		return err
	}
	for _, f := range fields {
		if f.required && !f.seen {
			return badRequest("field %q is required", f.name)
		}
	}
	return nil
}

// readBody reads r to its end. A body that announced its length (HTTP
// Content-Length; -1 if not) up to presizeMax is read into a buffer of that
// size: these bodies are tens of bytes, and io.ReadAll would start with 512.
// Reading on to EOF, not just the announced length, lets the HTTP client
// reuse the connection, and notices a body longer than announced.
func readBody(r io.Reader, length, presizeMax int64) ([]byte, error) {
	return readBodyInto(nil, r, length, presizeMax)
}

// readBodyInto is readBody reading into b's room (a buffer to reuse; its
// contents are overwritten), making a larger one only if it must.
func readBodyInto(b []byte, r io.Reader, length, presizeMax int64) ([]byte, error) {
	known := length >= 0 && length <= presizeMax
	switch {
	case !known && cap(b) == 0:
		return io.ReadAll(r)
	case known && int64(cap(b)) <= length:
		b = make([]byte, 0, length+1) // +1: a read that finds EOF needs room
	}
	b = b[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow, as io.ReadAll does
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		}
	}
}

// decodeObject decodes body, one JSON object whose members are among fields,
// and nothing but whitespace after it.
func decodeObject(body []byte, fields []*field) error {
	s := &scanner{b: body}
	switch c := s.next(); {
	case c == '{':
	case s.i == len(s.b):
		return badRequest("request body is empty; want a JSON object")
	default:
		return badRequest("request body must be a JSON object")
	}
	if err := s.fields("request body", fields); err != nil {
		return err
	}
	return s.end()
}

// fields reads the object that is next at s, what, into fields: unknown and
// repeated members are refused.
func (s *scanner) fields(what string, fields []*field) error {
	return s.object(what, func(name []byte) error {
		var f *field
		for _, c := range fields {
			if c.name == string(name) {
				f = c
				break
			}
		}
		switch {
		case f == nil:
			return badRequest("unknown field %s", quoteName(string(name)))
		case f.seen:
			return badRequest("field %q appears more than once", f.name)
		}
		f.seen = true
		return f.set(s)
	})
}

// array reads f's array of objects.
func (f *field) array(s *scanner) error {
	return s.array(fmt.Sprintf("field %q", f.name), func(i int) error {
		fields, check, err := f.elem(i)
		if err != nil {
			return err
		}
		if s.next() != '{' {
			return badRequest("field %q must be an array of objects", f.name)
		}
		if err := s.fields("", fields); err != nil {
			return err
		}
		for _, e := range fields {
			if e.required && !e.seen {
				return badRequest("field %q of element %d of %q is required", e.name, i, f.name)
			}
		}
		if err := check(); err != nil {
			return badRequest("element %d of %q: %v", i, f.name, strings.TrimPrefix(err.Error(), "leasehttp: "))
		}
		return nil
	})
}

// set reads f's value at s.
func (f *field) set(s *scanner) error {
	switch {
	case f.elem != nil:
		return f.array(s)
	case f.boolean != nil:
		v, err := s.boolean(f.name)
		*f.boolean = v
		return err
	case f.num != nil:
		n, err := s.uint(f.name)
		*f.num = n
		return err
	}
	s.next()
	start := s.i
	v, err := s.string(f.name)
	if err != nil {
		return err
	}
	if f.text {
		if err := checkText(s.b[start:s.i]); err != nil {
			return badRequest("field %q %v", f.name, err)
		}
	}
	if f.raw != nil {
		*f.raw = v
	} else {
		*f.str = string(v)
	}
	return nil
}

// checkContentType insists on a JSON body. Besides telling a mistaken client
// early, it closes cross-site request forgery against a server bound to
// loopback without credentials: a web page can POST text/plain or a form
// anywhere without a preflight, but not application/json.
func checkContentType(r *http.Request) error {
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		// Reading the first alone would make the order of the two decide.
		return &requestError{status: http.StatusUnsupportedMediaType,
			msg: "more than one Content-Type header; send one, application/json"}
	}
	ct := ""
	if len(cts) == 1 {
		ct = cts[0]
	}
	if ct == "application/json" {
		return nil // what every client sends; ParseMediaType would build a map for it
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return &requestError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("Content-Type must be application/json, got %s", quoteName(ct))}
	}
	return nil
}

// checkContentEncoding refuses a body sent compressed (or labelled so):
// read as it came, a gzipped body was a puzzling 400 "must be a JSON
// object", and a plain one labelled gzip was taken as it was.
func checkContentEncoding(r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return &requestError{status: http.StatusUnsupportedMediaType,
					msg: fmt.Sprintf("Content-Encoding %s is not supported; send the body uncompressed", quoteName(c))}
			}
		}
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

// parseIDBytes is parseID of string(b), without making the string for a
// valid ID.
func parseIDBytes(b []byte) (lease.ID, error) {
	var id lease.ID
	if len(b) == 2*len(id) {
		if _, err := hex.Decode(id[:], b); err == nil && !id.IsZero() {
			return id, nil
		}
	}
	return parseID(string(b))
}

func parseID(s string) (lease.ID, error) {
	id, err := lease.ParseID(s)
	if err != nil {
		return lease.ID{}, badRequest("field \"id\": %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return id, nil
}

// acquireRequest, renewRequest and releaseRequest are the decoded bodies;
// decodeBody reads them strictly.
type acquireRequest struct {
	Owner string
	TTL   time.Duration
	Wait  time.Duration // 0: try once; already capped at the server's max wait
	// Ticket names a wait that outlives this request (zero: none); see
	// WithWaitGrace.
	Ticket lease.ID
	// Last says the client will not ask again with Ticket once this
	// request's wait_ms has run: a wait that runs it whole leaves the line
	// at once (one that Capped cuts short is kept, as the client asks
	// again).
	Last bool
	// Capped says Wait is the server's max wait, shorter than wait_ms.
	Capped bool
}

type renewRequest struct {
	ID    lease.ID
	Token lease.Token
	TTL   time.Duration
}

type releaseRequest struct {
	ID    lease.ID
	Token lease.Token
}

// decodeAcquire reads {"owner","ttl_ms","wait_ms","ticket","last"};
// wait_ms is optional (0 = try once), at most MaxMaxWait, and capped at
// maxWait; ticket is optional, 32 hex digits; last is optional, and only
// with a ticket.
func decodeAcquire(w http.ResponseWriter, r *http.Request, maxWait time.Duration) (acquireRequest, error) {
	var owner, ticket string
	var ttl, wait uint64
	var last bool
	ticketField := &field{name: "ticket", str: &ticket}
	err := decodeBody(w, r,
		&field{name: "owner", required: true, str: &owner, text: true},
		&field{name: "ttl_ms", required: true, num: &ttl},
		&field{name: "wait_ms", num: &wait},
		ticketField,
		&field{name: "last", boolean: &last})
	if err != nil {
		return acquireRequest{}, err
	}
	if err := lease.ValidateOwner(owner); err != nil {
		return acquireRequest{}, badRequest("field \"owner\": %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	req := acquireRequest{Owner: owner, Last: last}
	if last && !ticketField.seen {
		return acquireRequest{}, badRequest("field \"last\" needs a \"ticket\"")
	}
	if ticketField.seen {
		// "" too: a ticket sent empty is a client's bug, not a wait
		// without one.
		if req.Ticket, err = lease.ParseID(ticket); err != nil {
			return acquireRequest{}, badRequest("field \"ticket\" is not 32 hex digits (not all zero)")
		}
	}
	if req.TTL, err = millisTTL("ttl_ms", ttl); err != nil {
		return acquireRequest{}, err
	}
	// Like ttl_ms, wait_ms has one range on every server, so that a
	// mistaken value (seconds for milliseconds, say) is told, not
	// quietly cut. Within it, each server caps the wait at its own
	// maximum and the client asks again.
	if wait > uint64(MaxMaxWait/time.Millisecond) {
		return acquireRequest{}, badRequest("field \"wait_ms\" is %d; want 0 to %d milliseconds", wait, MaxMaxWait.Milliseconds())
	}
	if wait >= uint64(maxWait/time.Millisecond) {
		req.Wait, req.Capped = maxWait, wait > uint64(maxWait/time.Millisecond)
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

// minRenewalBytes is the least a renewal takes in a POST /v1/renew body:
// {"key":"k","id":"<32 hex digits>","token":1,"ttl_ms":1000}.
const minRenewalBytes = 64

// decodeRenewBatch reads {"renewals":[{"key","id","token","ttl_ms"},…]}: 1
// to lease.MaxRenewBatch renewals, each checked as a renew's body is. One
// set of fields serves every element, and the id is parsed where it lies
// in the body.
func decodeRenewBatch(w http.ResponseWriter, r *http.Request) ([]lease.Renewal, error) {
	var (
		out        []lease.Renewal
		key        string
		id         []byte
		token, ttl uint64
	)
	if n := r.ContentLength; n > 0 {
		out = make([]lease.Renewal, 0, min(n/minRenewalBytes+1, lease.MaxRenewBatch))
	}
	fields := []*field{
		{name: "key", required: true, str: &key, text: true},
		{name: "id", required: true, raw: &id},
		{name: "token", required: true, num: &token},
		{name: "ttl_ms", required: true, num: &ttl},
	}
	check := func() error {
		var rn lease.Renewal
		if err := lease.ValidateKey(key); err != nil {
			return badRequest("field \"key\": %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
		}
		rn.Lease.Key = key
		var err error
		if rn.Lease.ID, err = parseIDBytes(id); err != nil {
			return err
		}
		if rn.Lease.Token, err = checkToken(token); err != nil {
			return err
		}
		if rn.TTL, err = millisTTL("ttl_ms", ttl); err != nil {
			return err
		}
		out = append(out, rn)
		return nil
	}
	buf := getBuf()
	defer putBuf(buf)
	err := decodeBodyInto(w, r, MaxRenewBatchBodyBytes, buf, &field{name: "renewals", required: true, elem: func(i int) ([]*field, func() error, error) {
		if i == lease.MaxRenewBatch {
			return nil, nil, badRequest("field \"renewals\" holds more than %d renewals", lease.MaxRenewBatch)
		}
		key, id, token, ttl = "", nil, 0, 0
		for _, f := range fields {
			f.seen = false
		}
		return fields, check, nil
	}})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, badRequest("field \"renewals\" is empty; want 1 to %d renewals", lease.MaxRenewBatch)
	}
	return out, nil
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

// watchQuery reads the query of GET /v1/watch: prefix, or key for a watch
// of exactly one key (lease.KeyWatcher), not both, each at most once.
func watchQuery(r *http.Request) (target string, exact bool, err error) {
	q, err := queryOf(r, "prefix", "key")
	if err != nil {
		return "", false, err
	}
	k, ok := q["key"]
	if !ok {
		p, err := queryPrefix(q)
		return p, false, err
	}
	if _, both := q["prefix"]; both {
		return "", false, badRequest("prefix and key together: a watch follows a prefix or one key")
	}
	if err := lease.ValidateKey(k[0]); err != nil {
		return "", false, badRequest("key: %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return k[0], true, nil
}

// listQuery reads the query of GET /v1/leases: prefix, limit (a decimal
// number; absent means lease.DefaultPageLimit) and after (a page's next),
// each at most once, no other parameters.
func listQuery(r *http.Request) (string, lease.Page, error) {
	q, err := queryOf(r, "prefix", "limit", "after")
	if err != nil {
		return "", lease.Page{}, err
	}
	prefix, err := queryPrefix(q)
	if err != nil {
		return "", lease.Page{}, err
	}
	var page lease.Page
	if ls, ok := q["limit"]; ok {
		// Digits only: no sign, no spaces; ParseList checks the range.
		n, err := strconv.Atoi(ls[0])
		if err != nil || strings.TrimLeft(ls[0], "0123456789") != "" {
			return "", lease.Page{}, badRequest("limit %s is not a whole number from 1 to %d (or 0, for %d)", quoteName(ls[0]), lease.MaxPageLimit, lease.DefaultPageLimit)
		}
		page.Limit = n
	}
	if as, ok := q["after"]; ok {
		page.After = as[0]
	}
	if _, _, err := lease.ParseList(prefix, page); err != nil {
		return "", lease.Page{}, badRequest("%v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return prefix, page, nil
}

// noQuery refuses a query on a route that takes none (acquire, renew,
// release, get, POST /v1/renew): dropped, a wait_ms sent there by a
// careless client would quietly make its acquire try once.
func noQuery(r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	_, err := queryOf(r)
	return err
}

// queryOf parses r's query, which may hold each of names at most once and
// nothing else.
func queryOf(r *http.Request, names ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query string: %v", err)
	}
	for name, vs := range q {
		if !slices.Contains(names, name) {
			return nil, badRequest("unknown query parameter %s", quoteName(name))
		}
		if len(vs) > 1 {
			return nil, badRequest("query parameter %s given %d times", quoteName(name), len(vs))
		}
	}
	return q, nil
}

// queryPrefix is q's prefix, checked; empty or absent means every key.
func queryPrefix(q url.Values) (string, error) {
	p := q.Get("prefix")
	if p == "" {
		return "", nil
	}
	if err := lease.ValidateKey(p); err != nil {
		return "", badRequest("prefix: %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return p, nil
}
