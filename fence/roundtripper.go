package fence

import (
	"context"
	"fmt"
	"io"
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
// A request it was still sending when the Hold was lost (waiting for a
// connection, dialling, or being retried by the base transport) is
// abandoned then, so that it does not go out late; a response already
// received stays readable.
type Transport struct {
	// Base sends the stamped request; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Token returns the token to stamp, or an error to refuse the request.
	Token func() (lease.Token, error)

	hold *lease.Hold // set by NewHoldTransport: requests end with it
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
	return &Transport{Base: base, hold: h, Token: func() (lease.Token, error) {
		if err := h.Err(); err != nil {
			return 0, holdError(h, err)
		}
		return h.Token(), nil
	}}, nil
}

func holdError(h *lease.Hold, err error) error {
	return fmt.Errorf("fence: not sending a write under lease %q (token %d): %w", h.Key(), h.Token(), err)
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
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.hold == nil {
		return base.RoundTrip(stamp(req.Clone(req.Context()), token))
	}

	// Until the response arrives, the request ends when the Hold does.
	ctx, cancel := context.WithCancelCause(req.Context())
	h := t.hold
	stop := context.AfterFunc(h.Context(), func() { cancel(holdError(h, h.Err())) })
	resp, err := base.RoundTrip(stamp(req.Clone(ctx), token))
	ended := !stop()
	if err != nil {
		cancel(nil)
		if ended {
			// The Hold ended while the request was out: the caller must
			// learn the lease is gone, whatever the base transport said.
			err = fmt.Errorf("%w: %w", holdError(h, h.Err()), err)
		}
		return nil, err
	}
	// The response body is read under ctx: release it when the body is
	// closed, not before.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

// stamp sets out's Fencing-Token header to token, in place of any the
// caller set: also under a non-canonical key ("fencing-token"), which would
// otherwise go on the wire beside ours. out is a clone, so its Header is its
// own (and nil if the caller's was).
func stamp(out *http.Request, token lease.Token) *http.Request {
	if out.Header == nil {
		out.Header = make(http.Header, 1)
	}
	for k := range out.Header {
		if k != TokenHeader && http.CanonicalHeaderKey(k) == TokenHeader {
			delete(out.Header, k)
		}
	}
	out.Header.Set(TokenHeader, FormatToken(token))
	return out
}

// cancelOnClose is a response body that ends its request's context when it
// is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
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
