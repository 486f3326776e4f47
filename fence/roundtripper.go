package fence

import (
	"fmt"
	"net/http"

	"github.com/leasehq/lease"
)

// Transport is an http.RoundTripper that stamps a fencing token on every
// request it sends, in the Fencing-Token header, for services guarded by
// Middleware. It sends a clone of the request and leaves the caller's
// request untouched; a Fencing-Token header the caller set is replaced.
//
// If Token fails, the request is not sent: RoundTrip closes the request body
// and returns Token's error. A Transport from NewHoldTransport fails once its
// Hold is lost, because a write whose lease is known to be gone would only
// be rejected by the guard — or, behind a guard with a stale view, do harm.
type Transport struct {
	// Base sends the stamped request; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Token returns the token to stamp, or an error to refuse the request.
	Token func() (lease.Token, error)
}

var _ http.RoundTripper = (*Transport)(nil)

// NewHoldTransport returns a Transport stamping h's token on requests sent
// through base (nil means http.DefaultTransport). Once h is lost or
// released it refuses to send, returning an error that matches h.Err():
// lease.ErrLost or lease.ErrReleased.
func NewHoldTransport(h *lease.Hold, base http.RoundTripper) (*Transport, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: fence: NewHoldTransport needs a hold, got nil", lease.ErrInvalid)
	}
	return &Transport{Base: base, Token: func() (lease.Token, error) {
		if err := h.Err(); err != nil {
			return 0, fmt.Errorf("fence: not sending a write under lease %q (token %d): %w", h.Key(), h.Token(), err)
		}
		return h.Token(), nil
	}}, nil
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := t.token()
	if err != nil {
		// RoundTrip must close the body even when it sends nothing.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Header.Set(TokenHeader, FormatToken(token))
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}

func (t *Transport) token() (lease.Token, error) {
	if t.Token == nil {
		return 0, fmt.Errorf("%w: fence: Transport has no Token function", lease.ErrInvalid)
	}
	token, err := t.Token()
	if err != nil {
		return 0, err
	}
	if err := ValidateToken(token); err != nil {
		return 0, err
	}
	return token, nil
}
