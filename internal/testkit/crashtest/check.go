package crashtest

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/leasehq/lease"
)

// Acquisition is one acquire the server acknowledged, as the client saw it.
type Acquisition struct {
	Key   string
	Owner string
	Token uint64
	// TTL and Expires are the server's answer; Expires − TTL is the grant
	// instant on the server's clock.
	TTL     time.Duration
	Expires time.Time
	// HeldUntil is the latest acknowledged expiry: Expires, moved on by each
	// acknowledged renewal.
	HeldUntil time.Time
	// Sent and Acked order events in real time across all clients: Sent was
	// taken before the request went out, Acked after the answer came back.
	Sent, Acked uint64
	// ReleaseTried means a release was sent; its outcome may be unknown (the
	// server may have died), so the lease may have ended before HeldUntil.
	ReleaseTried bool
}

// Acknowledged is the record of l, acquired by owner: its request was sent
// at clock reading sent and its answer came back at acked.
func Acknowledged(owner string, l lease.Lease, sent, acked uint64) *Acquisition {
	return &Acquisition{Key: l.Key, Owner: owner, Token: uint64(l.Token), TTL: l.TTL, Expires: l.Expires,
		HeldUntil: l.Expires, Sent: sent, Acked: acked}
}

// Grant is the instant the server granted the lease, on its clock.
func (a Acquisition) Grant() time.Time { return a.Expires.Add(-a.TTL) }

// Check returns every violation in history of the two rules the crash test
// proves:
//
//   - Tokens: for one key, tokens are unique, and an acquisition
//     acknowledged before another was sent has the smaller token (I1).
//   - Exclusion: ordered by token, each acquisition of a key was granted, on
//     the server's clock, no earlier than the previous acknowledged holder's
//     last acknowledged expiry, unless that holder sent a release (I3).
//
// Acquisitions whose answer was lost are not in history; a correct server
// keeps both rules across them, so the rules still hold between the
// acknowledged ones around them.
func Check(history []Acquisition) []string {
	byKey := map[string][]Acquisition{}
	for _, a := range history {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var bad []string
	for _, k := range keys {
		as := byKey[k]
		slices.SortFunc(as, func(a, b Acquisition) int { return cmp.Compare(a.Token, b.Token) })
		for i := 1; i < len(as); i++ {
			prev, cur := as[i-1], as[i]
			if prev.Token == cur.Token {
				bad = append(bad, fmt.Sprintf("%q: token %d issued twice (to %s and %s)", k, cur.Token, prev.Owner, cur.Owner))
				continue
			}
			if !prev.ReleaseTried && cur.Grant().Before(prev.HeldUntil) {
				bad = append(bad, fmt.Sprintf("%q: token %d granted to %s at %s, before token %d of %s expired at %s",
					k, cur.Token, cur.Owner, stamp(cur.Grant()), prev.Token, prev.Owner, stamp(prev.HeldUntil)))
			}
		}
		// Real-time order: sorted by Acked, a later-sent acquisition must
		// have a greater token than every one acknowledged before it was
		// sent. Sweep in Sent order, keeping the greatest acknowledged token.
		bySent := slices.Clone(as)
		slices.SortFunc(bySent, func(a, b Acquisition) int { return cmp.Compare(a.Sent, b.Sent) })
		byAcked := slices.Clone(as)
		slices.SortFunc(byAcked, func(a, b Acquisition) int { return cmp.Compare(a.Acked, b.Acked) })
		var (
			j    int
			maxA Acquisition
		)
		for _, cur := range bySent {
			for j < len(byAcked) && byAcked[j].Acked < cur.Sent {
				if byAcked[j].Token > maxA.Token {
					maxA = byAcked[j]
				}
				j++
			}
			if maxA.Token != 0 && cur.Token <= maxA.Token {
				bad = append(bad, fmt.Sprintf("%q: token %d sent after token %d was acknowledged, but not greater", k, cur.Token, maxA.Token))
			}
		}
	}
	return bad
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }
