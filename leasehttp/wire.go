package leasehttp

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// The wire codec: the one place that writes and reads the JSON of the
// API's answers (a lease, a page of leases, the answer to POST /v1/renew,
// an error) and of the client's requests. Every body is appended by hand,
// byte for byte as encoding/json writes the shapes below (LeaseJSON and
// the reference types of the tests), and read with scanner (scan.go), in
// one pass with no reflection: on POST /v1/renew's 256 leases each way,
// encoding/json cost more than the HTTP exchange and the commit. Only
// strings that need escaping go through encoding/json, and the cold bodies
// of no fixed shape (/v1/stats, health).
//
// The reader is strict where encoding/json is lenient and it could not read
// alike (a repeated member, a member named in another case, null for a
// value), and skips members it does not know, from a newer server. The
// tests hold both directions to encoding/json: whatever is written reads
// back the same with json.Unmarshal, and whatever the reader accepts
// json.Unmarshal reads the same way.

// expiresLayout is RFC 3339 with exactly three fractional digits, as the API
// promises; the client parses any RFC 3339 time.
const expiresLayout = "2006-01-02T15:04:05.000Z07:00"

// LeaseJSON is a lease as the API sends it:
//
//	{"key":"jobs/nightly","owner":"host-42","token":7,"id":"…","ttl_ms":30000,"expires_at":"2026-12-02T10:00:00.000Z"}
//
// ID is empty in the answers of GET and list, which never reveal a lease's
// secret. The lease command's "-o json" prints this shape.
type LeaseJSON struct {
	Key       string      `json:"key"`
	Owner     string      `json:"owner"`
	Token     lease.Token `json:"token"`
	ID        string      `json:"id,omitempty"`
	TTLMillis int64       `json:"ttl_ms,omitempty"`
	ExpiresAt string      `json:"expires_at"`
}

// NewLeaseJSON returns l in the API's shape, with its secret ID only if
// withID is true (the answers to acquire and renew, given to the holder).
func NewLeaseJSON(l lease.Lease, withID bool) LeaseJSON {
	j := LeaseJSON{
		Key:       l.Key,
		Owner:     l.Owner,
		Token:     l.Token,
		TTLMillis: l.TTL.Milliseconds(),
		ExpiresAt: l.Expires.UTC().Format(expiresLayout),
	}
	if withID && !l.ID.IsZero() {
		j.ID = l.ID.Reveal()
	}
	return j
}

// Lease converts j back, checking what a server must have sent: a valid key,
// a token within [1, 2^53], a well-formed id if any, and an RFC 3339 expiry.
// The error matches lease.ErrInvalid.
func (j LeaseJSON) Lease() (lease.Lease, error) {
	if err := lease.ValidateKey(j.Key); err != nil {
		return lease.Lease{}, err
	}
	if err := checkAnswerToken(uint64(j.Token)); err != nil {
		return lease.Lease{}, err
	}
	if j.TTLMillis < 0 {
		return lease.Lease{}, fmt.Errorf("%w: leasehttp: ttl_ms %d is negative", lease.ErrInvalid, j.TTLMillis)
	}
	ttl, err := answerTTL(uint64(j.TTLMillis))
	if err != nil {
		return lease.Lease{}, err
	}
	exp, err := parseExpires([]byte(j.ExpiresAt))
	if err != nil {
		return lease.Lease{}, err
	}
	l := lease.Lease{Key: j.Key, Owner: j.Owner, Token: j.Token, TTL: ttl, Expires: exp}
	if j.ID != "" {
		if l.ID, err = lease.ParseID(j.ID); err != nil {
			return lease.Lease{}, err
		}
	}
	return l, nil
}

// checkAnswerToken checks a token a server sent.
func checkAnswerToken(t uint64) error {
	if t == 0 || t > uint64(lease.MaxToken) {
		return fmt.Errorf("%w: leasehttp: token %d outside [1, 2^53]", lease.ErrInvalid, t)
	}
	return nil
}

// answerTTL checks a ttl_ms a server sent and returns it as a Duration.
func answerTTL(ms uint64) (time.Duration, error) {
	if ms > uint64(lease.MaxTTL.Milliseconds()) {
		return 0, fmt.Errorf("%w: leasehttp: ttl_ms %d outside [0, %d]", lease.ErrInvalid, ms, lease.MaxTTL.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Writing.

// appendJSONString appends s as encoding/json writes a string: quoted, with
// '"', '\\', control characters, '<', '>', '&', U+2028 and U+2029 escaped
// and invalid UTF-8 replaced by U+FFFD. Strings of plain printable ASCII,
// which keys, owners, IDs and times almost always are, are copied as they
// are; the rest go through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// lastExpiry is the last expiry appendLease wrote, kept for the next: the
// leases of one batch, renewed at one instant for one TTL, mostly share it.
type lastExpiry struct {
	t    time.Time
	text []byte
}

// appendLease appends json.Marshal(NewLeaseJSON(l, withID)). last, if not
// nil, is the last expiry written.
func appendLease(b []byte, l lease.Lease, withID bool, last *lastExpiry) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, l.Key)
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, l.Owner)
	b = append(b, `,"token":`...)
	b = strconv.AppendUint(b, uint64(l.Token), 10)
	if withID && !l.ID.IsZero() {
		b = append(b, `,"id":"`...)
		b = hex.AppendEncode(b, l.ID[:])
		b = append(b, '"')
	}
	if ms := l.TTL.Milliseconds(); ms != 0 {
		b = append(b, `,"ttl_ms":`...)
		b = strconv.AppendInt(b, ms, 10)
	}
	b = append(b, `,"expires_at":"`...)
	if last == nil {
		b = l.Expires.UTC().AppendFormat(b, expiresLayout)
	} else {
		b = last.append(b, l.Expires)
	}
	return append(b, `"}`...)
}

// append appends t as expires_at's text, the last text again if t is the
// last instant written.
func (last *lastExpiry) append(b []byte, t time.Time) []byte {
	if last.text != nil && t.Equal(last.t) { // the same instant is the same text in UTC
		return append(b, last.text...)
	}
	n := len(b)
	b = t.UTC().AppendFormat(b, expiresLayout)
	last.t, last.text = t, append(last.text[:0], b[n:]...)
	return b
}

// appendError appends the body of every error answer:
//
//	{"error":{"code":"held","message":"…","holder":{"key":…,"owner":…,"token":…,"expires_at":…}}}
//
// holder is present only with code "held", when the holder is known
// (holder not nil).
func appendError(b []byte, code, msg string, holder *lease.HeldError) []byte {
	b = append(b, `{"error":`...)
	b = appendErrorDetail(b, code, msg, holder)
	return append(b, '}')
}

// appendErrorDetail appends the object inside appendError's, which is also
// a refused renewal's result in the answer to POST /v1/renew.
func appendErrorDetail(b []byte, code, msg string, holder *lease.HeldError) []byte {
	b = append(b, `{"code":`...)
	b = appendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	if holder != nil {
		b = append(b, `,"holder":`...)
		b = appendLease(b, lease.Lease{Key: holder.Key, Owner: holder.Owner, Token: holder.Token, Expires: holder.Expires}, false, nil)
	}
	return append(b, '}')
}

// appendList appends the answer to GET /v1/leases: {"leases":[…],"next":…},
// the leases without their IDs; next continues the walk (?after=) and is
// empty on the last page.
func appendList(b []byte, p lease.ListPage) []byte {
	var last lastExpiry
	b = append(b, `{"leases":[`...)
	for i, l := range p.Leases {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLease(b, l, false, &last)
	}
	b = append(b, `],"next":`...)
	b = appendJSONString(b, p.Next)
	return append(b, '}')
}

// appendRenewAnswer appends the answer to POST /v1/renew,
// {"results":[…]}: one result per renewal, in their order, each
// {"lease":{…}}, the renewed lease, or {"error":{…}}, the error that
// refused it. minimal (Prefer: return=minimal) answers a renewed lease with
// only what a renewal changes, {"ttl_ms":…,"expires_at":…}.
func appendRenewAnswer(b []byte, results []lease.RenewResult, minimal bool) []byte {
	var last lastExpiry
	b = append(b, `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case r.Err != nil:
			b = append(b, `{"error":`...)
			b = appendErrorDetail(b, kindOf(r.Err).code, r.Err.Error(), nil)
			b = append(b, '}')
		case minimal:
			b = append(b, `{"ttl_ms":`...)
			b = strconv.AppendInt(b, r.Lease.TTL.Milliseconds(), 10)
			b = append(b, `,"expires_at":"`...)
			b = last.append(b, r.Lease.Expires)
			b = append(b, `"}`...)
		default:
			b = append(b, `{"lease":`...)
			b = appendLease(b, r.Lease, true, &last)
			b = append(b, '}')
		}
	}
	return append(b, "]}"...)
}

// appendAcquireRequest appends the body of POST
// /v1/leases/{key}/acquire: {"owner","ttl_ms","wait_ms","ticket","last"},
// the last three only when not zero.
func appendAcquireRequest(b []byte, owner string, ttl, wait time.Duration, ticket lease.ID, last bool) []byte {
	b = append(b, `{"owner":`...)
	b = appendJSONString(b, owner)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, ttlMillis(ttl), 10)
	if ms := wait.Milliseconds(); ms != 0 {
		b = append(b, `,"wait_ms":`...)
		b = strconv.AppendInt(b, ms, 10)
	}
	if !ticket.IsZero() {
		b = append(b, `,"ticket":"`...)
		b = hex.AppendEncode(b, ticket[:])
		b = append(b, '"')
		if last {
			b = append(b, `,"last":true`...)
		}
	}
	return append(b, '}')
}

// appendRenewRequest appends the body of POST /v1/leases/{key}/renew,
// {"id","token","ttl_ms"}, and withKey a renewal of POST /v1/renew's,
// {"key","id","token","ttl_ms"}.
func appendRenewRequest(b []byte, l lease.Lease, ttl time.Duration, withKey bool) []byte {
	b = append(b, '{')
	if withKey {
		b = append(b, `"key":`...)
		b = appendJSONString(b, l.Key)
		b = append(b, ',')
	}
	b = appendLeaseRef(b, l)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, ttlMillis(ttl), 10)
	return append(b, '}')
}

// appendReleaseRequest appends the body of POST
// /v1/leases/{key}/release: {"id","token"}.
func appendReleaseRequest(b []byte, l lease.Lease) []byte {
	return append(appendLeaseRef(append(b, '{'), l), '}')
}

// appendLeaseRef appends the members that name a lease generation to
// renew or release it: "id":…,"token":….
func appendLeaseRef(b []byte, l lease.Lease) []byte {
	b = append(b, `"id":"`...)
	b = hex.AppendEncode(b, l.ID[:])
	b = append(b, `","token":`...)
	return strconv.AppendUint(b, uint64(l.Token), 10)
}

// appendRenewBatchRequest appends the body of POST /v1/renew:
// {"renewals":[{"key","id","token","ttl_ms"},…]}.
func appendRenewBatchRequest(b []byte, renewals []lease.Renewal) []byte {
	b = append(b, `{"renewals":[`...)
	for i, r := range renewals {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRenewRequest(b, r.Lease, r.TTL, true)
	}
	return append(b, "]}"...)
}

// bufPool holds the buffers bodies are written and read into.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuf is the largest buffer put back: a body of 256 renewals of
// the longest keys is kept out, so the pool does not pin megabytes.
const maxPooledBuf = 256 << 10

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBuf {
		*b = (*b)[:0]
		bufPool.Put(b)
	}
}

// Reading.

// leaseMembers are the members of a lease, in the order of the m*
// constants.
var leaseMembers = []string{"key", "owner", "token", "id", "ttl_ms", "expires_at"}

const (
	mKey = iota
	mOwner
	mToken
	mID
	mTTL
	mExpires
)

// leaseReader reads the leases of one answer. It keeps the owner and the
// expiry it read last, which the leases of a batch mostly share, and key,
// if not empty, is the valid key the next lease is expected to have, whose
// string is then reused.
type leaseReader struct {
	key        string
	owner      string
	expiresRaw []byte // a slice of the body
	expires    time.Time
}

// lease reads the lease that is next at s, what, and checks it as
// LeaseJSON.Lease does. A value that fails its check is reported once the
// whole object is read: a member of the wrong shape after it is the error
// (errorDetail keeps an answer whose holder fails the checks, not one whose
// holder is not of the shape).
func (s *scanner) lease(r *leaseReader, what string) (lease.Lease, error) {
	var l lease.Lease
	var failed error // the first check failed
	m := members{names: leaseMembers}
	err := s.known(what, &m, func(i int) error {
		err := s.leaseMember(r, &l, i)
		if err != nil && !isRequestError(err) {
			failed, err = cmp.Or(failed, err), nil
		}
		return err
	})
	switch {
	case err != nil:
		return lease.Lease{}, err
	case failed != nil:
		return lease.Lease{}, failed
	case !m.has(mKey):
		return lease.Lease{}, lease.ValidateKey("")
	case !m.has(mToken):
		return lease.Lease{}, checkAnswerToken(0)
	case !m.has(mExpires):
		_, err := parseExpires(nil)
		return lease.Lease{}, err
	}
	return l, nil
}

// isRequestError reports whether err is a *requestError. Apart from lease,
// whose every member would otherwise pay for the target errors.As takes:
// escaping to it, declared where lease's closure tests err, it was
// allocated for each member read, seven a lease.
func isRequestError(err error) bool {
	var re *requestError
	return errors.As(err, &re)
}

// leaseMember reads the value of the lease member leaseMembers[i] at s into
// l, and checks it.
func (s *scanner) leaseMember(r *leaseReader, l *lease.Lease, i int) error {
	if i == mToken || i == mTTL {
		n, err := s.uint(leaseMembers[i])
		switch {
		case err != nil:
		case i == mToken:
			err = checkAnswerToken(n)
			l.Token = lease.Token(n)
		default:
			l.TTL, err = answerTTL(n)
		}
		return err
	}
	v, err := s.string(leaseMembers[i])
	switch {
	case err != nil:
	case i == mKey && r.key != "" && string(v) == r.key:
		l.Key = r.key
	case i == mKey:
		l.Key = string(v)
		err = lease.ValidateKey(l.Key)
	case i == mOwner:
		if string(v) != r.owner {
			r.owner = string(v)
		}
		l.Owner = r.owner
	case i == mID && len(v) > 0:
		l.ID, err = parseIDBytes(v)
	case i == mExpires && r.expiresRaw != nil && string(v) == string(r.expiresRaw):
		l.Expires = r.expires
	case i == mExpires:
		if l.Expires, err = parseExpires(v); err == nil {
			r.expiresRaw, r.expires = v, l.Expires
		}
	}
	return err
}

// readLease reads body, one lease: the answer to acquire, renew and get,
// and a watch event's data.
func readLease(body []byte) (lease.Lease, error) {
	s := &scanner{b: body}
	l, err := s.lease(&leaseReader{}, "the lease")
	if err == nil {
		err = s.end()
	}
	return l, err
}

// readWhole reads body, the object what and nothing after it, calling
// read with s at the value of each member it knows, names[i], and
// skipping the others. names[0] is required.
func readWhole(body []byte, what string, names []string, read func(s *scanner, i int) error) error {
	s := &scanner{b: body}
	m := members{names: names}
	if err := s.known(what, &m, func(i int) error { return read(s, i) }); err != nil {
		return err
	}
	if !m.has(0) {
		return badRequest("member %q is missing", names[0])
	}
	return s.end()
}

// readList reads body, the answer to GET /v1/leases.
func readList(body []byte) (lease.ListPage, error) {
	var p lease.ListPage
	var r leaseReader
	err := readWhole(body, "the list", []string{"leases", "next"}, func(s *scanner, i int) error {
		if i == 1 {
			v, err := s.string("next")
			p.Next = string(v)
			return err
		}
		p.Leases = []lease.Lease{} // not nil, as an empty page is
		return s.array(`"leases"`, func(int) error {
			l, err := s.lease(&r, "a lease of the list")
			p.Leases = append(p.Leases, l)
			return err
		})
	})
	return p, err
}

// errorAnswer is an error body as the client reads it.
type errorAnswer struct {
	code, message string
	holder        *lease.Lease // with code held, when the server knows the holder
}

// readError reads body, an error answer's (appendError).
func readError(body []byte) (errorAnswer, error) {
	var e errorAnswer
	err := readWhole(body, "the error answer", []string{"error"}, func(s *scanner, _ int) error {
		var err error
		e, err = s.errorDetail()
		return err
	})
	return e, err
}

// errorDetail reads the object that is next at s, appendErrorDetail's.
func (s *scanner) errorDetail() (errorAnswer, error) {
	var e errorAnswer
	m := members{names: []string{"code", "message", "holder"}}
	err := s.known(`"error"`, &m, func(i int) error {
		if i == 2 {
			// A holder that fails the checks (token 0, say) is left out,
			// not the error: that the key is held is the answer. One not
			// of the shape (a requestError) is not.
			s.next()
			start := s.i
			if err := s.skip(1); err != nil {
				return err
			}
			h, err := readLease(s.b[start:s.i])
			var re *requestError
			switch {
			case errors.As(err, &re):
				return err
			case err == nil:
				e.holder = &h
			}
			return nil
		}
		v, err := s.string(m.names[i])
		if i == 0 {
			e.code = string(v)
		} else {
			e.message = string(v)
		}
		return err
	})
	if err == nil && !m.has(0) {
		err = badRequest(`member "code" is missing`)
	}
	return e, err
}

// readRenewAnswer reads body, the answer to POST /v1/renew for renewals,
// into out, of the same length: one result per renewal, each the renewed
// lease, with the renewal's key and token, or a not_held refusal. Any other
// refusal is an unexpected answer, reported as the error.
func readRenewAnswer(body []byte, renewals []lease.Renewal, out []lease.RenewResult) error {
	var r leaseReader
	n := 0
	err := readWhole(body, "the answer", []string{"results"}, func(s *scanner, _ int) error {
		return s.array(`"results"`, func(i int) error {
			if i == len(renewals) {
				return fmt.Errorf("more results than the %d renewals", len(renewals))
			}
			n = i + 1
			r.key = renewals[i].Lease.Key
			return s.renewResult(&r, renewals[i], &out[i])
		})
	})
	if err == nil && n != len(renewals) {
		err = fmt.Errorf("%d results for %d renewals", n, len(renewals))
	}
	return err
}

// renewResult reads the result that is next at s for rn into res:
// {"lease":{…}}, the renewed lease, which must have rn's key and token;
// {"ttl_ms":…,"expires_at":…}, the minimal answer's (Prefer:
// return=minimal), rn's lease with that TTL and expiry; or {"error":{…}},
// which must be not_held.
func (s *scanner) renewResult(r *leaseReader, rn lease.Renewal, res *lease.RenewResult) error {
	const (
		rLease = iota
		rError
		rTTL
		rExpires
	)
	key := func() string { return quoteName(rn.Lease.Key) } // for errors only
	m := members{names: renewResultMembers}
	minimal := rn.Lease
	err := s.known("a result", &m, func(i int) error {
		if n := btoi(m.has(rLease)) + btoi(m.has(rError)) + btoi(m.has(rTTL) || m.has(rExpires)); n > 1 {
			return fmt.Errorf("the result for %s is more than one of a lease, a renewal's TTL and expiry, and an error", key())
		}
		switch i {
		case rLease:
			l, err := s.lease(r, `"lease"`)
			switch {
			case err != nil:
				return err
			case l.Key != rn.Lease.Key || l.Token != rn.Lease.Token:
				return fmt.Errorf("the answer for %s, token %d, is for %s, token %d", key(), rn.Lease.Token, quoteName(l.Key), l.Token)
			}
			res.Lease = l
			return nil
		case rTTL:
			return s.leaseMember(r, &minimal, mTTL)
		case rExpires:
			return s.leaseMember(r, &minimal, mExpires)
		}
		e, err := s.errorDetail()
		switch {
		case err != nil:
			return err
		case e.code != "not_held":
			return fmt.Errorf("unexpected answer for %s: %q: %s", key(), e.code, e.message)
		}
		res.Err = fmt.Errorf("leasehttp: renew %s: %w", key(), lease.ErrNotHeld)
		return nil
	})
	switch {
	case err != nil:
	case m.has(rTTL) != m.has(rExpires):
		err = fmt.Errorf("the result for %s has one of ttl_ms and expires_at without the other", key())
	case m.has(rTTL):
		res.Lease = minimal
	case !m.has(rLease) && !m.has(rError):
		err = fmt.Errorf("the result for %s is neither a lease, a renewal's TTL and expiry, nor an error", key())
	}
	return err
}

// renewResultMembers are the members of a result renewResult reads.
var renewResultMembers = []string{"lease", "error", "ttl_ms", "expires_at"}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseExpires reads an expiry: time.Parse(time.RFC3339Nano, v), done by
// hand for the form the server writes (expiresLayout in UTC,
// 2026-12-02T10:00:00.000Z), whose fields it checks as time.Parse does.
func parseExpires(v []byte) (time.Time, error) {
	if len(v) == len("2006-01-02T15:04:05.000Z") && v[4] == '-' && v[7] == '-' && v[10] == 'T' &&
		v[13] == ':' && v[16] == ':' && v[19] == '.' && v[23] == 'Z' {
		year, ok1 := digits(v[0:4])
		month, ok2 := digits(v[5:7])
		day, ok3 := digits(v[8:10])
		hour, ok4 := digits(v[11:13])
		minute, ok5 := digits(v[14:16])
		sec, ok6 := digits(v[17:19])
		milli, ok7 := digits(v[20:23])
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 &&
			month >= 1 && month <= 12 && day >= 1 && day <= daysIn(time.Month(month), year) &&
			hour < 24 && minute < 60 && sec < 60 {
			return time.Date(year, time.Month(month), day, hour, minute, sec, milli*int(time.Millisecond), time.UTC), nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: leasehttp: expires_at %s is not RFC 3339", lease.ErrInvalid, quoteName(string(v)))
	}
	return t, nil
}

// digits reads a run of decimal digits.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// daysIn is the number of days in month m of year y.
func daysIn(m time.Month, y int) int {
	switch m {
	case time.February:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
