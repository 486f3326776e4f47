package redisstore

import (
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
//	W ID TOKEN ':' EXP ':' TTL ':' OWNER
//
// W is '1' once a waiter asked to be told of the release (want.lua), '0'
// before; ID the 32 hex digits of the lease's secret ID; TOKEN the fencing
// token; EXP the expiry in microseconds since the epoch on the server's clock
// (its TIME at the grant or last renewal plus the TTL); TTL in milliseconds;
// OWNER last, so it may hold any byte, ':' included. Numbers are decimal.
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
	return l.ID.String() + strconv.FormatUint(uint64(l.Token), 10) + ":"
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
	exp, err2 := strconv.ParseInt(f[1], 10, 64)
	ttl, err3 := strconv.ParseInt(f[2], 10, 64)
	switch {
	case err1 != nil || tok < 1 || lease.Token(tok) > lease.MaxToken:
		return leaseValue{}, fmt.Errorf("malformed lease value %q: token %q outside [1, 2^53]", v, f[0])
	case err2 != nil || err3 != nil || ttl < 1:
		return leaseValue{}, fmt.Errorf("malformed lease value %q: bad expiry or ttl", v)
	case f[3] == "":
		return leaseValue{}, fmt.Errorf("malformed lease value %q: no owner", v)
	}
	return leaseValue{id: v[1 : 1+idLen], token: lease.Token(tok), expires: time.UnixMicro(exp),
		ttl: time.Duration(ttl) * time.Millisecond, owner: f[3], wanted: v[0] == wanted}, nil
}

// lease returns the lease v describes, without its secret ID.
func (v leaseValue) lease(key string) lease.Lease {
	return lease.Lease{Key: key, Owner: v.owner, Token: v.token, TTL: v.ttl, Expires: v.expires}
}
