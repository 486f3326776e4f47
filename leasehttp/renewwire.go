package leasehttp

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// POST /v1/renew carries up to 256 renewals each way, and encoding/json's
// reflection over them (the client's Marshal of the request and Unmarshal
// of the answer, the server's Marshal of the answer) cost more than the
// HTTP exchange and the commit. So this file writes both bodies by hand,
// byte for byte as encoding/json would, and the client reads the answer
// with the request decoder's scanner when it is exactly what this
// package's server writes, leaving anything else to json.Unmarshal. The
// tests check both against encoding/json.

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

// lastExpiry is the last expiry appendLeaseJSON wrote, kept for the next:
// the leases of one batch, renewed at one instant for one TTL, mostly
// share it.
type lastExpiry struct {
	t    time.Time
	text []byte
}

// appendLeaseJSON appends json.Marshal(NewLeaseJSON(l, withID)). last, if
// not nil, is the last expiry written.
func appendLeaseJSON(b []byte, l lease.Lease, withID bool, last *lastExpiry) []byte {
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
	switch {
	case last == nil:
		b = l.Expires.UTC().AppendFormat(b, expiresLayout)
	case last.text != nil && l.Expires.Equal(last.t): // the same instant is the same text in UTC
		b = append(b, last.text...)
	default:
		n := len(b)
		b = l.Expires.UTC().AppendFormat(b, expiresLayout)
		last.t, last.text = l.Expires, append(last.text[:0], b[n:]...)
	}
	return append(b, `"}`...)
}

// appendRenewRequest appends json.Marshal(renewBatchBody) for renewals:
// POST /v1/renew's body.
func appendRenewRequest(b []byte, renewals []lease.Renewal) []byte {
	b = append(b, `{"renewals":[`...)
	for i, r := range renewals {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"key":`...)
		b = appendJSONString(b, r.Lease.Key)
		b = append(b, `,"id":"`...)
		b = hex.AppendEncode(b, r.Lease.ID[:])
		b = append(b, `","token":`...)
		b = strconv.AppendUint(b, uint64(r.Lease.Token), 10)
		b = append(b, `,"ttl_ms":`...)
		b = strconv.AppendInt(b, ttlMillis(r.TTL), 10)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendRenewAnswer appends json.Marshal(renewBatchJSON) for results:
// POST /v1/renew's answer, each result the renewed lease or the error that
// refused it.
func appendRenewAnswer(b []byte, results []lease.RenewResult) []byte {
	var last lastExpiry
	b = append(b, `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if r.Err != nil {
			b = append(b, `{"error":{"code":`...)
			b = appendJSONString(b, kindOf(r.Err).code)
			b = append(b, `,"message":`...)
			b = appendJSONString(b, r.Err.Error())
			b = append(b, "}}"...)
			continue
		}
		b = append(b, `{"lease":`...)
		b = appendLeaseJSON(b, r.Lease, true, &last)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// bufPool holds the buffers the bodies of POST /v1/renew are written into.
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

// scanRenewAnswer reads body, the answer to POST /v1/renew for renewals,
// into out (of the same length) when it is exactly what this package's
// server writes: {"results":[…]} holding one result per renewal, each
// {"lease":{…}} with the renewal's key and token, a valid id if any, a TTL
// in range and an RFC 3339 expiry, or {"error":{"code":"not_held",
// "message":…}}. It reports false for anything else, malformed or merely
// unexpected (a member it does not know, from a newer server, or another
// error code), which the caller then reads with json.Unmarshal and judges
// as before: for the bodies this accepts, both read the same.
func scanRenewAnswer(body []byte, renewals []lease.Renewal, out []lease.RenewResult) bool {
	s := &scanner{b: body}
	if s.next() != '{' {
		return false
	}
	s.i++
	if name, ok := s.memberName(); !ok || string(name) != "results" {
		return false
	}
	if s.next() != '[' {
		return false
	}
	s.i++
	n := 0
	if s.next() == ']' {
		s.i++
	} else {
		var last scanned
		for ; ; n++ {
			if n == len(renewals) || !s.renewResult(renewals[n], &out[n], &last) {
				return false
			}
			c := s.next()
			s.i++
			if c == ']' {
				n++
				break
			}
			if c != ',' {
				return false
			}
		}
	}
	if n != len(renewals) || s.next() != '}' {
		return false
	}
	s.i++
	s.next()
	return s.i == len(s.b)
}

// memberName reads `"name":` and returns the name, decoded.
func (s *scanner) memberName() ([]byte, bool) {
	if s.next() != '"' {
		return nil, false
	}
	name, err := s.str()
	if err != nil || s.next() != ':' {
		return nil, false
	}
	s.i++
	return name, true
}

// scanned is what scanRenewAnswer read last of an owner and an expiry, to
// reuse when the next is the same: a batch's leases mostly share both.
type scanned struct {
	owner      string
	expiresRaw []byte // a slice of the body
	expires    time.Time
}

// renewResult reads one result, {"lease":{…}} or {"error":{…}}, for r into
// res.
func (s *scanner) renewResult(r lease.Renewal, res *lease.RenewResult, last *scanned) bool {
	if s.next() != '{' {
		return false
	}
	s.i++
	name, ok := s.memberName()
	if !ok || s.next() != '{' {
		return false
	}
	s.i++
	switch string(name) {
	case "lease":
		l, ok := s.renewedLease(r, last)
		if !ok {
			return false
		}
		*res = lease.RenewResult{Lease: l}
	case "error":
		if !s.notHeld() {
			return false
		}
		*res = lease.RenewResult{Err: fmt.Errorf("leasehttp: renew %s: %w", quoteName(r.Lease.Key), lease.ErrNotHeld)}
	default:
		return false
	}
	if s.next() != '}' {
		return false
	}
	s.i++
	return true
}

// Members of a lease in an answer, as bits of what renewedLease has seen.
const (
	seenKey = 1 << iota
	seenOwner
	seenToken
	seenID
	seenTTL
	seenExpires
)

// renewedLease reads the members of a lease answered for r, after its '{',
// and checks what RenewBatch checks of it: LeaseJSON.Lease's checks, and
// r's key and token.
func (s *scanner) renewedLease(r lease.Renewal, last *scanned) (lease.Lease, bool) {
	l := lease.Lease{Key: r.Lease.Key, Token: r.Lease.Token}
	var seen int
	for first := true; ; first = false {
		switch s.next() {
		case '}':
			s.i++
			const required = seenKey | seenToken | seenExpires
			return l, seen&required == required
		case ',':
			if first {
				return l, false
			}
			s.i++
		default:
			if !first {
				return l, false
			}
		}
		name, ok := s.memberName()
		if !ok {
			return l, false
		}
		var bit int
		switch string(name) {
		case "key":
			bit = seenKey
			v, ok := s.strValue()
			if !ok || string(v) != r.Lease.Key {
				return l, false
			}
		case "owner":
			bit = seenOwner
			v, ok := s.strValue()
			if !ok {
				return l, false
			}
			if string(v) != last.owner {
				last.owner = string(v)
			}
			l.Owner = last.owner
		case "token":
			bit = seenToken
			n, ok := s.uintValue()
			if !ok || n != uint64(r.Lease.Token) {
				return l, false
			}
		case "id":
			bit = seenID
			v, ok := s.strValue()
			if !ok {
				return l, false
			}
			if len(v) > 0 {
				if len(v) != 2*len(l.ID) {
					return l, false
				}
				if _, err := hex.Decode(l.ID[:], v); err != nil || l.ID.IsZero() {
					return l, false
				}
			}
		case "ttl_ms":
			bit = seenTTL
			n, ok := s.uintValue()
			if !ok || n > uint64(lease.MaxTTL.Milliseconds()) {
				return l, false
			}
			l.TTL = time.Duration(n) * time.Millisecond
		case "expires_at":
			bit = seenExpires
			v, ok := s.strValue()
			if !ok {
				return l, false
			}
			if last.expiresRaw != nil && string(v) == string(last.expiresRaw) {
				l.Expires = last.expires
				break
			}
			if l.Expires, ok = parseExpires(v); !ok {
				return l, false
			}
			last.expiresRaw, last.expires = v, l.Expires
		default:
			return l, false
		}
		if seen&bit != 0 {
			return l, false
		}
		seen |= bit
	}
}

// notHeld reads the members of an error, after its '{': a code not_held
// and a message, nothing else.
func (s *scanner) notHeld() bool {
	var code, msg bool
	for first := true; ; first = false {
		switch s.next() {
		case '}':
			s.i++
			return code && msg
		case ',':
			if first {
				return false
			}
			s.i++
		default:
			if !first {
				return false
			}
		}
		name, ok := s.memberName()
		if !ok {
			return false
		}
		v, ok := s.strValue()
		switch {
		case !ok:
			return false
		case string(name) == "code" && !code:
			code = true
			if string(v) != "not_held" {
				return false
			}
		case string(name) == "message" && !msg:
			msg = true
		default:
			return false
		}
	}
}

// strValue reads a string value, decoded.
func (s *scanner) strValue() ([]byte, bool) {
	if s.next() != '"' {
		return nil, false
	}
	v, err := s.str()
	return v, err == nil
}

// uintValue reads a whole number written as JSON writes one: digits
// without sign, fraction, exponent or leading zero, within uint64.
func (s *scanner) uintValue() (uint64, bool) {
	c := s.next()
	if c < '0' || c > '9' {
		return 0, false
	}
	start := s.i
	var n uint64
	for ; s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9'; s.i++ {
		d := uint64(s.b[s.i] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	return n, s.i-start == 1 || s.b[start] != '0'
}

// parseExpires reads an expiry: time.Parse(time.RFC3339Nano, v), done by
// hand for the form the server writes (expiresLayout in UTC,
// 2026-12-02T10:00:00.000Z), whose fields it checks as time.Parse does.
func parseExpires(v []byte) (time.Time, bool) {
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
			return time.Date(year, time.Month(month), day, hour, minute, sec, milli*int(time.Millisecond), time.UTC), true
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(v))
	return t, err == nil
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
