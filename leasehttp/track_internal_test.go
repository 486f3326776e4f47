package leasehttp

import (
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a counter's or gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// testTracker is a tracker on a clock the test moves; the test calls sweep
// itself (the tracker's own timer runs on the real clock and, firing late,
// only sweeps again).
func testTracker(t *testing.T) (*tracker, *time.Time) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	tr := newTracker(m)
	tr.now = func() time.Time { return now }
	t.Cleanup(tr.close)
	return tr, &now
}

func checkTracked(t *testing.T, tr *tracker, live int, expired float64) {
	t.Helper()
	tr.mu.Lock()
	inMap, inHeap := len(tr.leases), tr.dl.Len()
	for k, e := range tr.leases {
		if !e.due.Queued() || e.key != k {
			t.Errorf("map entry %s (key %s): in the heap %v, want in it under its own key", k, e.key, e.due.Queued())
		}
	}
	tr.mu.Unlock()
	if inMap != live || inHeap != live {
		t.Errorf("tracking %d leases with %d deadlines, want %d of each", inMap, inHeap, live)
	}
	if got := value(t, tr.m.active); got != float64(live) {
		t.Errorf("lease_active_leases = %v, want %d", got, live)
	}
	if got := value(t, tr.m.expirations); got != expired {
		t.Errorf("lease_expirations_total = %v, want %v", got, expired)
	}
}

func TestTrackerForgetsReleasedLeases(t *testing.T) {
	tr, _ := testTracker(t)
	// Many short-lived keys under the longest TTL: nothing may stay behind.
	for i := range 5000 {
		l := lease.Lease{Key: "churn/" + string(rune('a'+i%26)), Token: lease.Token(i + 1), TTL: lease.MaxTTL}
		tr.granted(l)
		tr.released(l.Key, l.Token)
	}
	checkTracked(t, tr, 0, 0)
	// A release of another generation leaves the current one tracked.
	id := lease.NewID()
	tr.granted(lease.Lease{Key: "k", Token: 7, ID: id, TTL: time.Second})
	tr.released("k", 6)
	checkTracked(t, tr, 1, 0)
	tr.notHeld("k", 6, id)
	checkTracked(t, tr, 1, 0)
	// So does a refusal of the right token with a wrong ID: the holder may
	// well be renewing it.
	tr.notHeld("k", 7, lease.NewID())
	checkTracked(t, tr, 1, 0)
	tr.notHeld("k", 7, id)
	checkTracked(t, tr, 0, 1)
}

func TestTrackerCountsExpiries(t *testing.T) {
	tr, now := testTracker(t)
	for i, key := range []string{"a", "b", "c", "d"} {
		tr.granted(lease.Lease{Key: key, Token: lease.Token(i + 1), TTL: time.Duration(i+1) * time.Second})
	}
	checkTracked(t, tr, 4, 0)
	// b is renewed just before its deadline, for 10 s more.
	*now = now.Add(2 * time.Second)
	tr.renewed(lease.Lease{Key: "b", Token: 2, TTL: 10 * time.Second})
	// a's deadline (1 s + grace) has passed, b's has moved.
	*now = now.Add(expiryGrace)
	tr.sweep()
	checkTracked(t, tr, 3, 1)
	// c is granted anew while still tracked: its holder stopped renewing.
	tr.granted(lease.Lease{Key: "c", Token: 30, TTL: time.Minute})
	checkTracked(t, tr, 3, 2)
	// d (4 s) goes; b (renewed until 12 s) and the new c stay.
	*now = now.Add(5 * time.Second)
	tr.sweep()
	checkTracked(t, tr, 2, 3)
	*now = now.Add(6 * time.Second)
	tr.sweep()
	checkTracked(t, tr, 1, 4)
	tr.released("c", 30)
	checkTracked(t, tr, 0, 4)
	tr.sweep()
	checkTracked(t, tr, 0, 4)
}

// A renewal that moves a deadline later leaves its heap entry in place,
// and one that moves it earlier moves the entry: either way each lease is
// counted expired exactly when its last deadline passes, and the timer is
// armed for the earliest entry.
func TestTrackerRenewalsMoveDeadlines(t *testing.T) {
	tr, now := testTracker(t)
	start := *now
	for i, key := range []string{"a", "b", "c"} {
		tr.granted(lease.Lease{Key: key, Token: lease.Token(i + 1), TTL: time.Duration(i+1) * time.Second})
	}
	id := lease.NewID()
	tr.renewedBatch(
		[]lease.Renewal{{Lease: lease.Lease{Key: "a", Token: 1}}, {Lease: lease.Lease{Key: "c", Token: 3}}, {Lease: lease.Lease{Key: "x", Token: 9, ID: id}}},
		[]lease.RenewResult{
			{Lease: lease.Lease{Key: "a", Token: 1, TTL: 10 * time.Second}},
			{Lease: lease.Lease{Key: "c", Token: 3, TTL: 100 * time.Millisecond}},
			{Err: lease.ErrNotHeld},
		})
	checkTracked(t, tr, 3, 0)
	tr.mu.Lock()
	if !tr.at.Equal(start.Add(100*time.Millisecond + expiryGrace)) {
		t.Errorf("timer armed for %v after start, want c's shortened deadline", tr.at.Sub(start))
	}
	tr.mu.Unlock()
	for _, step := range []struct {
		at             time.Duration
		live           int
		expired        float64
		firstRemaining string
	}{
		{100*time.Millisecond + expiryGrace - 1, 3, 0, "c"},
		{100*time.Millisecond + expiryGrace, 2, 1, "a"}, // c; a's entry still sits at its first deadline
		{time.Second + expiryGrace, 2, 1, "b"},          // a renewed: moved on, not expired
		{2*time.Second + expiryGrace, 1, 2, "a"},
		{10*time.Second + expiryGrace - 1, 1, 2, "a"},
		{10*time.Second + expiryGrace, 0, 3, ""},
	} {
		*now = start.Add(step.at)
		tr.sweep()
		checkTracked(t, tr, step.live, step.expired)
		tr.mu.Lock()
		if step.firstRemaining != "" && (tr.dl.Len() == 0 || tr.dl.Peek().key != step.firstRemaining || !tr.at.Equal(tr.dl.Peek().due.Due)) {
			t.Errorf("at %v: %d entries, timer at %v; want %s's entry first, the timer at its due", step.at, tr.dl.Len(), tr.at.Sub(start), step.firstRemaining)
		}
		tr.mu.Unlock()
	}
}
