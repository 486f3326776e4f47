package lease

import (
	"context"
	"encoding/base64"
	"fmt"
	"iter"
)

// Limits on the pages of Backend.List, the same for every backend.
const (
	// DefaultPageLimit is the most leases a page holds when Page.Limit is 0.
	DefaultPageLimit = 1000
	// MaxPageLimit is the largest Page.Limit a backend accepts.
	MaxPageLimit = 10000
)

// Page asks Backend.List for one page of the leases under a prefix. The zero
// Page asks for the first DefaultPageLimit of them.
type Page struct {
	// Limit is the most leases the page may hold: 1 to MaxPageLimit, or 0
	// for DefaultPageLimit. Anything else is an error matching ErrInvalid.
	Limit int
	// After is the Next of the previous page, to go on from there; empty
	// starts at the first key. It is opaque: callers pass back what List
	// returned, and a malformed cursor is an error matching ErrInvalid.
	After string
}

// ListPage is one page of Backend.List: leases in byte order of their keys.
//
// A walk that starts with the zero Page and passes each Next back as
// Page.After until Next is empty sees every lease that stays held for the
// whole walk exactly once, whatever else is acquired, renewed, released or
// expires meanwhile. A lease acquired or released during the walk may or may
// not be seen, and each lease is reported as it was when its page was read.
type ListPage struct {
	// Leases are the page's leases, with zero IDs, in key order; at most
	// the page's limit.
	Leases []Lease
	// Next is the cursor that continues after the last of Leases, or empty
	// if, when the page was read, no unexpired lease under the prefix came
	// after it.
	Next string
}

// Cursor returns the cursor that continues a walk after key, for backends to
// put in ListPage.Next. It is key's bytes in unpadded base64url: printable,
// safe in a URL query, and opaque to callers, who only pass it back.
func Cursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// cursorEncoding decodes only what Cursor encodes: one spelling per key.
var cursorEncoding = base64.RawURLEncoding.Strict()

// ParseList checks the arguments of Backend.List for backends: prefix by
// ValidatePrefix, and p. It returns the page's limit (DefaultPageLimit for
// 0) and the key its cursor names, after which the page starts (empty: at
// the first key). Errors match ErrInvalid.
func ParseList(prefix string, p Page) (limit int, after string, err error) {
	if err := ValidatePrefix(prefix); err != nil {
		return 0, "", err
	}
	switch {
	case p.Limit == 0:
		limit = DefaultPageLimit
	case p.Limit < 0 || p.Limit > MaxPageLimit:
		return 0, "", invalidf("page limit %d is outside [1, %d] (0 means %d)", p.Limit, MaxPageLimit, DefaultPageLimit)
	default:
		limit = p.Limit
	}
	if p.After == "" {
		return limit, "", nil
	}
	b, err := cursorEncoding.DecodeString(p.After)
	// The decoder skips newlines: only Cursor's own spelling is one.
	if err != nil || Cursor(string(b)) != p.After {
		return 0, "", invalidf("page cursor is malformed: not one that List returned")
	}
	if err := ValidateKey(string(b)); err != nil {
		return 0, "", invalidf("page cursor is malformed: it names no valid key")
	}
	return limit, string(b), nil
}

// PageOf returns the ListPage of leases, which a backend read in key order:
// up to limit+1 of the unexpired leases under the prefix after the cursor.
// One beyond the limit means there are more: the page keeps the first limit
// and its Next continues after the last of them.
func PageOf(leases []Lease, limit int) ListPage {
	if len(leases) <= limit {
		return ListPage{Leases: leases}
	}
	leases = leases[:limit:limit]
	return ListPage{Leases: leases, Next: Cursor(leases[limit-1].Key)}
}

// All walks every page of b.List under prefix, yielding each lease in key
// order, with a zero ID. It stops at the first error, which it yields with
// a zero Lease. It sees every lease that stays held during the walk exactly
// once (see ListPage); a walk over many keys is many List calls, so a lease
// seen early may have changed by the time the walk ends.
func All(ctx context.Context, b Backend, prefix string) iter.Seq2[Lease, error] {
	return func(yield func(Lease, error) bool) {
		var (
			p    Page
			last string // the key p.After names
		)
		for {
			page, err := b.List(ctx, prefix, p)
			if err != nil {
				yield(Lease{}, err)
				return
			}
			for _, l := range page.Leases {
				if !yield(l, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			// A cursor that does not move on would walk forever.
			_, next, err := ParseList("", Page{After: page.Next})
			if err != nil || next <= last {
				yield(Lease{}, fmt.Errorf("%w: lease: listing %q: the backend's next cursor does not move past %q", ErrUnavailable, prefix, last))
				return
			}
			p.After, last = page.Next, next
		}
	}
}

// All walks every lease under prefix, page by page; see the function All.
func (c *Client) All(ctx context.Context, prefix string) iter.Seq2[Lease, error] {
	return All(ctx, c.backend, prefix)
}
