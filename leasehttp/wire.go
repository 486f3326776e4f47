package leasehttp

import (
	"fmt"
	"time"

	"github.com/leasehq/lease"
)

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
	if j.Token == 0 || j.Token > lease.MaxToken {
		return lease.Lease{}, fmt.Errorf("%w: leasehttp: token %d outside [1, 2^53]", lease.ErrInvalid, j.Token)
	}
	if j.TTLMillis < 0 || j.TTLMillis > lease.MaxTTL.Milliseconds() {
		return lease.Lease{}, fmt.Errorf("%w: leasehttp: ttl_ms %d outside [0, %d]", lease.ErrInvalid, j.TTLMillis, lease.MaxTTL.Milliseconds())
	}
	exp, err := time.Parse(time.RFC3339Nano, j.ExpiresAt)
	if err != nil {
		return lease.Lease{}, fmt.Errorf("%w: leasehttp: expires_at %q is not RFC 3339", lease.ErrInvalid, j.ExpiresAt)
	}
	l := lease.Lease{Key: j.Key, Owner: j.Owner, Token: j.Token, TTL: time.Duration(j.TTLMillis) * time.Millisecond, Expires: exp}
	if j.ID != "" {
		if l.ID, err = lease.ParseID(j.ID); err != nil {
			return lease.Lease{}, err
		}
	}
	return l, nil
}

// listJSON is the answer to GET /v1/leases.
type listJSON struct {
	Leases []LeaseJSON `json:"leases"`
	// Next continues the walk (?after=); empty on the last page.
	Next string `json:"next"`
}

// renewBatchJSON is the answer to POST /v1/renew: one result per renewal,
// in their order, each the renewed lease or the error that refused it.
type renewBatchJSON struct {
	Results []renewResultJSON `json:"results"`
}

type renewResultJSON struct {
	Lease *LeaseJSON   `json:"lease,omitempty"`
	Error *errorDetail `json:"error,omitempty"`
}

// errorJSON is the body of every error answer:
//
//	{"error":{"code":"held","message":"…","holder":{"key":…,"owner":…,"token":…,"expires_at":…}}}
//
// holder is present only with code "held", when the holder is known.
type errorJSON struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string     `json:"code"`
	Message string     `json:"message"`
	Holder  *LeaseJSON `json:"holder,omitempty"`
}

// acquireRequest, renewRequest and releaseRequest are the decoded bodies;
// decode.go reads them strictly.
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
