package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// expiresLayout is RFC 3339 with milliseconds, as the HTTP API writes
// expires_at.
const expiresLayout = "2006-01-02T15:04:05.000Z07:00"

// toJSON is l exactly as the HTTP API returns it; the id is present only if
// l carries one (acquire and renew, not get and list).
func toJSON(l lease.Lease) leasehttp.LeaseJSON { return leasehttp.NewLeaseJSON(l, true) }

// writeLease prints l as one JSON object or one logfmt-style line.
func writeLease(w io.Writer, l lease.Lease, asJSON bool) error {
	if asJSON {
		return writeJSON(w, toJSON(l))
	}
	_, err := fmt.Fprintln(w, textLine(l))
	return err
}

// writeLeases prints ls as {"leases":[…]} or one line per lease.
func writeLeases(w io.Writer, ls []lease.Lease, asJSON bool) error {
	if asJSON {
		out := struct {
			Leases []leasehttp.LeaseJSON `json:"leases"`
		}{Leases: make([]leasehttp.LeaseJSON, 0, len(ls))}
		for _, l := range ls {
			out.Leases = append(out.Leases, toJSON(l))
		}
		return writeJSON(w, out)
	}
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(textLine(l))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// textLine renders l as key=value pairs, values quoted only when they need
// it, so that the line reads well and still splits cleanly in a shell.
func textLine(l lease.Lease) string {
	var b strings.Builder
	field := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(quoteIfNeeded(v))
	}
	field("key", l.Key)
	field("token", strconv.FormatUint(uint64(l.Token), 10))
	if !l.ID.IsZero() {
		field("id", l.ID.Reveal())
	}
	field("owner", l.Owner)
	field("ttl", l.TTL.String())
	field("expires_at", l.Expires.UTC().Format(expiresLayout))
	return b.String()
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"'=\\$`") {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r > 0x7e {
			return strconv.Quote(s)
		}
	}
	return s
}

// describeHolder says who holds a key, for the one-line refusals of acquire
// and run.
func describeHolder(he *lease.HeldError) string {
	if he.Owner == "" && he.Token == 0 {
		// The backend said "held" without saying by whom (a concurrent
		// acquire won the race, or others queue for the key): an empty
		// owner and token 0 would read as "held by nobody".
		return fmt.Sprintf("%q is held by another owner", he.Key)
	}
	s := fmt.Sprintf("%q is held by %q (token %d)", he.Key, he.Owner, he.Token)
	if !he.Expires.IsZero() {
		s += " until " + he.Expires.UTC().Format(expiresLayout)
	}
	return s
}

// formatDuration is for messages: whole milliseconds are enough.
func formatDuration(d time.Duration) string { return d.Round(time.Millisecond).String() }
