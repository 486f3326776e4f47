package fence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/leasehq/lease"
)

// TokenHeader is the HTTP header a writer sends its fencing token in, as a
// decimal number: "Fencing-Token: 42".
const TokenHeader = "Fencing-Token"

// maxTokenDigits is the length of lease.MaxToken (2^53 = 9007199254740992)
// in decimal: a longer header value cannot be a valid token.
const maxTokenDigits = 16

// ParseToken parses the value of a Fencing-Token header: a decimal number in
// [1, lease.MaxToken] written with the digits 0-9 only — no sign, no
// spaces, no leading zeros — so that each token has exactly one spelling.
// The error matches lease.ErrInvalid.
func ParseToken(s string) (lease.Token, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: fence: %s is empty", lease.ErrInvalid, TokenHeader)
	}
	if len(s) > maxTokenDigits {
		return 0, fmt.Errorf("%w: fence: %s %.20q is longer than %d digits", lease.ErrInvalid, TokenHeader, s, maxTokenDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: fence: %s %q is not a decimal number", lease.ErrInvalid, TokenHeader, s)
		}
	}
	if s[0] == '0' && len(s) > 1 {
		return 0, fmt.Errorf("%w: fence: %s %q has a leading zero", lease.ErrInvalid, TokenHeader, s)
	}
	n, err := strconv.ParseUint(s, 10, 64) // cannot fail: at most 16 digits
	if err != nil {
		return 0, fmt.Errorf("%w: fence: %s %q: %v", lease.ErrInvalid, TokenHeader, s, err)
	}
	t := lease.Token(n)
	if err := ValidateToken(t); err != nil {
		return 0, err
	}
	return t, nil
}

// FormatToken returns t as a Fencing-Token header value.
func FormatToken(t lease.Token) string { return strconv.FormatUint(uint64(t), 10) }

// TokenFromRequest returns the token in r's Fencing-Token header. A missing
// header, a header given more than once or a malformed value is an error
// matching lease.ErrInvalid.
func TokenFromRequest(r *http.Request) (lease.Token, error) {
	vals := r.Header.Values(TokenHeader)
	switch len(vals) {
	case 0:
		return 0, fmt.Errorf("%w: fence: request has no %s header", lease.ErrInvalid, TokenHeader)
	case 1:
		return ParseToken(vals[0])
	default:
		return 0, fmt.Errorf("%w: fence: request has %d %s headers, want one", lease.ErrInvalid, len(vals), TokenHeader)
	}
}

type tokenKey struct{}

// TokenFromContext returns the fencing token Middleware admitted the request
// with, for a handler that wants to store it beside the data it writes. It
// reports false outside a guarded request.
func TokenFromContext(ctx context.Context) (lease.Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(lease.Token)
	return t, ok
}

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware) error

// GuardMethods guards only requests with one of the given methods (for
// example "PUT", "POST", "PATCH", "DELETE"); requests with other methods go
// straight to the handler, unchecked and needing no token. Without this
// option every request the middleware sees is guarded — mount it only on the
// routes that write, or use GuardMethods to let reads through.
func GuardMethods(methods ...string) MiddlewareOption {
	return func(m *middleware) error {
		if len(methods) == 0 {
			return fmt.Errorf("%w: fence: GuardMethods needs at least one method", lease.ErrInvalid)
		}
		m.methods = make(map[string]bool, len(methods))
		for _, meth := range methods {
			if meth == "" {
				return fmt.Errorf("%w: fence: GuardMethods given an empty method", lease.ErrInvalid)
			}
			m.methods[meth] = true
		}
		return nil
	}
}

type middleware struct {
	guard    Guard
	resource func(*http.Request) (string, error)
	methods  map[string]bool // nil: guard every method
}

// Middleware returns HTTP middleware that fences the wrapped handler with g.
// For each guarded request it
//
//   - reads the token from the Fencing-Token header (ParseToken); a missing,
//     repeated or malformed header is answered 400 with the error code
//     "invalid", and the handler does not run;
//   - names the resource with resource(r); an error is answered 400
//     "invalid", and the handler does not run;
//   - runs the handler inside g.Check, so that comparing the token, the
//     handler's write and recording the token are one atomic step (I6). A
//     stale token is answered 409 with the error code "stale_token" and the
//     handler does not run.
//
// The handler counts as having written — and the token is recorded as the
// highest accepted — only if it answers with a status below 400. A handler
// that answers 400 or more must leave the resource unchanged, as if its
// transaction rolled back: its answer goes to the client, and the token is
// not recorded (in Strict mode it can still be used).
//
// The handler's response is buffered until g has recorded the token, so a
// client never sees success for a write the guard did not record: if g fails
// after the handler succeeded (a guard whose commit fails), the client gets
// 503 "unavailable" instead. Buffering means guarded handlers cannot stream
// or flush; fenced writes answer briefly. The admitted token is available to
// the handler through TokenFromContext.
//
// Error bodies have the shape of the lease HTTP API:
//
//	{"error":{"code":"stale_token","message":"…","resource":"…","token":1,"highest":2}}
//
// where resource, token and highest appear only for stale_token.
func Middleware(g Guard, resource func(*http.Request) (string, error), opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: fence: Middleware needs a guard, got nil", lease.ErrInvalid)
	}
	if resource == nil {
		return nil, fmt.Errorf("%w: fence: Middleware needs a resource function, got nil", lease.ErrInvalid)
	}
	m := &middleware{guard: g, resource: resource}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: fence: Middleware given a nil option", lease.ErrInvalid)
		}
		if err := opt(m); err != nil {
			return nil, err
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(next, w, r)
		})
	}, nil
}

// handlerFailed is what the write passed to Guard.Check returns when the
// handler answered 400 or more, so that the guard records nothing.
type handlerFailed struct{ status int }

func (e *handlerFailed) Error() string {
	return fmt.Sprintf("fence: handler answered %d", e.status)
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if m.methods != nil && !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	token, err := TokenFromRequest(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, errorBody{Code: "invalid", Message: err.Error()})
		return
	}
	name, err := m.resource(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, errorBody{Code: "invalid",
			Message: fmt.Sprintf("fence: request names no resource: %v", err)})
		return
	}

	r = r.WithContext(context.WithValue(r.Context(), tokenKey{}, token))
	rec := newRecorder(w.Header())
	err = m.guard.Check(r.Context(), name, token, func() error {
		next.ServeHTTP(rec, r)
		if rec.status >= 400 {
			return &handlerFailed{status: rec.status}
		}
		return nil
	})

	var failed *handlerFailed
	var stale *StaleTokenError
	switch {
	case err == nil, errors.As(err, &failed):
		rec.copyTo(w)
	case errors.As(err, &stale):
		writeError(w, http.StatusConflict, errorBody{
			Code:     "stale_token",
			Message:  stale.Error(),
			Resource: &stale.Resource,
			Token:    &stale.Token,
			Highest:  &stale.Highest,
		})
	case errors.Is(err, lease.ErrInvalid):
		writeError(w, http.StatusBadRequest, errorBody{Code: "invalid", Message: err.Error()})
	default:
		// The guard could not answer (its store is down, or the client went
		// away): whether the write happened is unknown to the client, so
		// it must not be told it succeeded.
		writeError(w, http.StatusServiceUnavailable, errorBody{Code: "unavailable",
			Message: fmt.Sprintf("fence: guard for %q failed: %v", name, err)})
	}
}

// errorBody is the "error" member of an error response, as in the lease
// HTTP API, with the details of a stale token added.
type errorBody struct {
	Code     string       `json:"code"`
	Message  string       `json:"message"`
	Resource *string      `json:"resource,omitempty"`
	Token    *lease.Token `json:"token,omitempty"`
	Highest  *lease.Token `json:"highest,omitempty"`
}

func writeError(w http.ResponseWriter, status int, e errorBody) {
	body, err := json.Marshal(struct {
		Error errorBody `json:"error"`
	}{e})
	if err != nil { // cannot happen: strings and numbers only
		http.Error(w, e.Message, status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// recorder buffers a handler's response until the guard has decided.
type recorder struct {
	header http.Header
	status int // 0 until the first final status or Write
	body   bytes.Buffer
}

func newRecorder(base http.Header) *recorder {
	// Start from the headers set before the middleware ran (by outer
	// middleware), so the handler sees them as it would without buffering.
	return &recorder{header: base.Clone()}
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if status < 100 || status > 999 {
		// As net/http does — but here, inside the guard's Check, so that
		// the token is not recorded for a handler that cannot answer.
		panic(fmt.Sprintf("invalid WriteHeader code %v", status))
	}
	if rec.status != 0 || (status >= 100 && status < 200) {
		// Like net/http: a second WriteHeader is ignored; informational
		// responses cannot be relayed from a buffer, so they are dropped.
		return
	}
	rec.status = status
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.body.Write(p)
}

// copyTo sends the buffered response to w.
func (rec *recorder) copyTo(w http.ResponseWriter) {
	h := w.Header()
	clear(h)
	for k, v := range rec.header {
		h[k] = v
	}
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(rec.body.Bytes())
}
