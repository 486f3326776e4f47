package redisstore

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehq/lease"
)

// A lease is one Redis string, so that a grant is one SET with PX (the
// expiry and the value in one command), a held key or a Get is one GET, and
// a release one GET and one DEL:
//
//	W ID TOKEN ':' TIME ':' TTL ':' OWNER
//
// W is '1' once a waiter asked to be told of the release (want.lua), '0'
// before; ID the 32 hex digits of the lease's secret ID; TOKEN the fencing
// token; TIME the server's clock (its TIME) at the grant or last renewal,
// as seconds since the epoch, '.', and six digits of microseconds; TTL in
// milliseconds; OWNER last, so it may hold any byte, ':' included. Numbers
// are decimal. The lease expires at TIME + TTL on the server's clock (I5):
// the scripts store TIME as the server gave it, because copying its strings
// costs a script less than adding numbers and formatting the sum, and the
// reader does the addition. A value written by an earlier version holds in
// place of TIME the expiry itself, in microseconds since the epoch and
// without a '.'; parseValue reads both, and renew.lua rewrites either.
// ID and TOKEN together, with the ':' that ends TOKEN, are the proof that
// Renew and Release send (I4): the scripts compare it with the bytes after
// W.

const (
	idLen    = 32            // hex digits of a lease.ID
	valueMin = 1 + idLen + 7 // W, ID, and the shortest "1:0:0:" + owner
	wanted   = '1'
	unwanted = '0'
)

// proof is what Renew and Release must match: the value's bytes after W.
func proof(l lease.Lease) string {
	var b strings.Builder // one allocation
	b.Grow(idLen + 21)
	b.Write(hex.AppendEncode(make([]byte, 0, idLen), l.ID[:]))
	b.Write(strconv.AppendUint(make([]byte, 0, 20), uint64(l.Token), 10))
	b.WriteByte(':')
	return b.String()
}

// leaseValue is a parsed lease value.
type leaseValue struct {
	id      string // 32 hex digits
	token   lease.Token
	expires time.Time
	ttl     time.Duration
	owner   string
	wanted  bool
}

// parseValue reads a lease value, which the store's scripts wrote unless
// someone else wrote the store's keys.
func parseValue(v string) (leaseValue, error) {
	if len(v) < valueMin || (v[0] != wanted && v[0] != unwanted) {
		return leaseValue{}, fmt.Errorf("malformed lease value %q", v)
	}
	f := strings.SplitN(v[1+idLen:], ":", 4)
	if len(f) != 4 {
		return leaseValue{}, fmt.Errorf("malformed lease value %q: %d fields after the id, want 4", v, len(f))
	}
	tok, err1 := strconv.ParseUint(f[0], 10, 64)
	exp, err2 := parseTime(f[1])
	ttl, err3 := strconv.ParseInt(f[2], 10, 64)
	switch {
	case err1 != nil || tok < 1 || lease.Token(tok) > lease.MaxToken:
		return leaseValue{}, fmt.Errorf("malformed lease value %q: token %q outside [1, 2^53]", v, f[0])
	case err2 != nil || err3 != nil || ttl < 1:
		return leaseValue{}, fmt.Errorf("malformed lease value %q: bad time or ttl", v)
	case f[3] == "":
		return leaseValue{}, fmt.Errorf("malformed lease value %q: no owner", v)
	}
	if exp.grant {
		exp.us += ttl * 1000
	}
	return leaseValue{id: v[1 : 1+idLen], token: lease.Token(tok), expires: time.UnixMicro(exp.us),
		ttl: time.Duration(ttl) * time.Millisecond, owner: f[3], wanted: v[0] == wanted}, nil
}

// valueTime is a value's TIME field in microseconds since the epoch: the
// grant or renewal time, to which the TTL is still to be added, or (grant
// false, a value of an earlier version) the expiry.
type valueTime struct {
	us    int64
	grant bool
}

// parseTime reads SECONDS '.' MICROSECONDS (six digits), or the bare
// microseconds of an expiry.
func parseTime(f string) (valueTime, error) {
	sec, usec, ok := strings.Cut(f, ".")
	if !ok {
		us, err := strconv.ParseInt(f, 10, 64)
		return valueTime{us: us}, err
	}
	s, err1 := strconv.ParseInt(sec, 10, 64)
	u, err2 := strconv.ParseUint(usec, 10, 32)
	if err1 != nil || err2 != nil || len(usec) != 6 || s < 0 || s > 1<<40 {
		return valueTime{}, fmt.Errorf("bad time %q", f)
	}
	return valueTime{us: s*1e6 + int64(u), grant: true}, nil
}

// lease returns the lease v describes, without its secret ID.
func (v leaseValue) lease(key string) lease.Lease {
	return lease.Lease{Key: key, Owner: v.owner, Token: v.token, TTL: v.ttl, Expires: v.expires}
}
