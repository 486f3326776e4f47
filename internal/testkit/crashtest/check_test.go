package crashtest

import (
	"strings"
	"testing"
	"time"
)

// TestCheckCatchesEachViolation is the negative control: each history
// breaks one rule, and Check must say so.
func TestCheckCatchesEachViolation(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	acq := func(tok uint64, grant time.Duration, ttl time.Duration, sent, acked uint64) Acquisition {
		exp := t0.Add(grant + ttl)
		return Acquisition{Key: "k", Owner: "o", Token: tok, TTL: ttl, Expires: exp, HeldUntil: exp, Sent: sent, Acked: acked}
	}
	released := func(a Acquisition) Acquisition { a.ReleaseTried = true; return a }
	renewedTo := func(a Acquisition, until time.Duration) Acquisition { a.HeldUntil = t0.Add(until); return a }
	sec := time.Second
	for _, tc := range []struct {
		name    string
		history []Acquisition
		want    string // "" means no violation
	}{
		{"clean", []Acquisition{acq(1, 0, sec, 1, 2), acq(2, sec, sec, 3, 4)}, ""},
		{"released early is fine", []Acquisition{released(acq(1, 0, sec, 1, 2)), acq(2, sec/2, sec, 3, 4)}, ""},
		{"gap of unknown outcomes is fine", []Acquisition{acq(1, 0, sec, 1, 2), acq(5, 3*sec, sec, 3, 4)}, ""},
		{"concurrent sends may come back in any order", []Acquisition{acq(2, sec, sec, 1, 4), acq(1, 0, sec, 2, 3)}, ""},
		{"duplicate token", []Acquisition{acq(1, 0, sec, 1, 2), acq(1, 2*sec, sec, 3, 4)}, "issued twice"},
		{"granted before expiry", []Acquisition{acq(1, 0, sec, 1, 2), acq(2, sec/2, sec, 3, 4)}, "before token 1"},
		{"granted before renewed expiry", []Acquisition{renewedTo(acq(1, 0, sec, 1, 2), 3*sec), acq(2, 2*sec, sec, 3, 4)}, "before token 1"},
		{"token went backwards in real time", []Acquisition{acq(2, 0, sec, 1, 2), acq(1, 2*sec, sec, 3, 4)}, "not greater"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := Check(tc.history)
			if tc.want == "" {
				if len(bad) != 0 {
					t.Errorf("violations %q in a correct history", bad)
				}
				return
			}
			if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), tc.want) {
				t.Errorf("violations %q, want one saying %q", bad, tc.want)
			}
		})
	}
}
