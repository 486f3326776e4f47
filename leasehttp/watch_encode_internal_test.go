package leasehttp

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// The encoding streams share is reused only for the very same event: one
// that differs in any field a watcher sees gets its own, and the secret ID
// is never in it.
func TestLastEncodedMatchesWholeEvent(t *testing.T) {
	base := lease.Event{Kind: lease.Acquired, Lease: lease.Lease{Key: "jobs/a", Owner: "o", Token: 7, ID: lease.NewID(),
		TTL: time.Second, Expires: time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)}}
	variants := map[string]func(*lease.Event){
		"same":    func(*lease.Event) {},
		"kind":    func(e *lease.Event) { e.Kind = lease.Renewed },
		"key":     func(e *lease.Event) { e.Lease.Key = "jobs/b" },
		"owner":   func(e *lease.Event) { e.Lease.Owner = "p" },
		"token":   func(e *lease.Event) { e.Lease.Token = 8 },
		"ttl":     func(e *lease.Event) { e.Lease.TTL = 2 * time.Second },
		"expires": func(e *lease.Event) { e.Lease.Expires = e.Lease.Expires.Add(time.Millisecond) },
	}
	for name, change := range variants {
		t.Run(name, func(t *testing.T) {
			var c lastEncoded
			first := c.data(base)
			ev := base
			change(&ev)
			got := c.data(ev)
			want, _ := json.Marshal(NewLeaseJSON(ev.Lease, false))
			if string(got) != string(want) {
				t.Errorf("after %s, encoded %s, want %s", string(first), got, want)
			}
			if name == "same" && &got[0] != &first[0] {
				t.Errorf("the same event encoded twice")
			}
			var j LeaseJSON
			if err := json.Unmarshal(got, &j); err != nil || j.ID != "" {
				t.Errorf("encoded %s (%v): want valid JSON without the ID", got, err)
			}
		})
	}
}
