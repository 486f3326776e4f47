package leasehttp

import (
	"errors"
	"net/http"

	"github.com/leasehq/lease"
)

// ErrUnauthorized means the server wants a valid bearer token (HTTP 401,
// code "unauthorized"): none was sent or it matches no credential.
var ErrUnauthorized = errors.New("leasehttp: unauthorized")

// ErrForbidden means the bearer token is valid but its credential does not
// cover the key or prefix asked for, or that a server without credentials
// does not answer for the request's Host (see WithAllowedHosts) (HTTP 403,
// code "forbidden").
var ErrForbidden = errors.New("leasehttp: forbidden")

// ErrTooManyWatchers means the credential (or, on a server without
// credentials, all clients together) already has as many watch streams
// open as the server allows (WithMaxWatchers) (HTTP 429, code
// "too_many_watchers"). A slot frees when one of those streams ends.
var ErrTooManyWatchers = errors.New("leasehttp: too many watchers")

// errorKind is one row of the table that maps error codes, HTTP statuses
// and sentinel errors both ways: the server turns an error into a code and
// a status, the client turns a code back into an error matching the same
// sentinel, so errors.Is reads alike on both sides of the wire.
type errorKind struct {
	code   string
	status int
	err    error
}

// errorTable is searched in order by the server (first sentinel the error
// matches) and by code by the client. held, not_held and stale_token share
// 409; the code tells them apart.
var errorTable = []errorKind{
	{"held", http.StatusConflict, lease.ErrHeld},
	{"not_held", http.StatusConflict, lease.ErrNotHeld},
	{"stale_token", http.StatusConflict, lease.ErrStaleToken},
	{"not_found", http.StatusNotFound, lease.ErrNotFound},
	{"invalid", http.StatusBadRequest, lease.ErrInvalid},
	{"unauthorized", http.StatusUnauthorized, ErrUnauthorized},
	{"forbidden", http.StatusForbidden, ErrForbidden},
	{"too_many_watchers", http.StatusTooManyRequests, ErrTooManyWatchers},
	// The backend cannot do what was asked (watch): asking again will not
	// help, unlike unavailable.
	{"unsupported", http.StatusNotImplemented, errors.ErrUnsupported},
	{"unavailable", http.StatusServiceUnavailable, lease.ErrUnavailable},
}

// kindUnavailable is what an error matching no sentinel becomes: the server
// cannot vouch for the outcome, so the client must not either.
var kindUnavailable = errorTable[len(errorTable)-1]

// kindOf returns the table row for err, by the first sentinel it matches.
func kindOf(err error) errorKind {
	for _, k := range errorTable {
		if errors.Is(err, k.err) {
			return k
		}
	}
	return kindUnavailable
}

// kindByCode returns the table row for code, and false for a code this
// client does not know (a newer server).
func kindByCode(code string) (errorKind, bool) {
	for _, k := range errorTable {
		if k.code == code {
			return k, true
		}
	}
	return errorKind{}, false
}

// kindByStatus guesses the row from the HTTP status alone, for answers
// without an API error body (a proxy's 502 page, say).
func kindByStatus(status int) (errorKind, bool) {
	switch {
	case status == http.StatusConflict:
		return errorKind{}, false // ambiguous without a code
	case status == http.StatusNotFound:
		// Without a code a 404 is a missing route (a proxy, a wrong path
		// prefix), not the server saying no lease exists: ErrNotFound
		// would tell the caller the key is free.
		return errorKind{}, false
	case status == http.StatusTooManyRequests:
		// A proxy's rate limit, not this server's bound on watchers.
		return errorKind{}, false
	case status >= 500:
		return kindUnavailable, true
	case status == http.StatusRequestEntityTooLarge, status == http.StatusUnsupportedMediaType,
		status == http.StatusMethodNotAllowed, status == http.StatusRequestTimeout:
		return kindByCodeMust("invalid"), true
	}
	for _, k := range errorTable {
		if k.status == status {
			return k, true
		}
	}
	return errorKind{}, false
}

func kindByCodeMust(code string) errorKind {
	k, _ := kindByCode(code)
	return k
}
