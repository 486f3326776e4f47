package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
)

// waitCutBound is how soon a waiting acquire through a replica whose link
// to etcd went silent must end: a wait chunk (2 s), the replica's bound on
// asking etcd who holds the key (leasehttp's backend timeout, 10 s), and
// room for a loaded machine.
const waitCutBound = 20 * time.Second

// TestWaitThroughReplicaCutFromEtcd queues a waiting acquire through a
// replica, then blackholes that replica's link to etcd and frees the key
// through another replica. The waiter's client, with the CLI's 30 s
// timeout (longer than the replica's 10 s for a backend call), must be
// told the replica cannot serve it — an error matching ErrUnavailable,
// after which its list moves on and the next call acquires through the
// other replica — within waitCutBound. It used to be answered "held" at the
// end of every chunk, as if the key were still taken (the replica could
// not ask etcd who held it and said held anyway), and stayed on the cut
// replica, waiting for a free key until its context ended.
func TestWaitThroughReplicaCutFromEtcd(t *testing.T) {
	px, cut, whole := startCutAndWhole(t, "waitcut")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	holder := whole.client(t, 0)
	h, err := holder.Acquire(ctx, "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := leasehttp.NewClient(cut.url(0)+","+whole.url(0), leasehttp.WithAuthToken(replicaToken),
		leasehttp.WithTimeout(30*time.Second), leasehttp.WithWaitChunk(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	type result struct {
		l   lease.Lease
		err error
		at  time.Time
	}
	waited := make(chan result, 1)
	wctx, stopWaiting := context.WithTimeout(ctx, 70*time.Second)
	defer stopWaiting()
	go func() {
		l, err := waiter.AcquireWait(wctx, "k", "waiter", 2*time.Second)
		waited <- result{l, err, time.Now()}
	}()
	poll.True(t, 10*time.Second, "the waiter queues through the replica to be cut", func() bool { return replicaWaiters(t, cut.url(0)) > 0 })

	blackhole(t, px)
	holed := time.Now()
	if err := holder.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-waited:
	case <-time.After(waitCutBound + 10*time.Second):
		r = <-waited // its ctx ends it
		t.Fatalf("the waiter through the cut replica was still waiting %v after the cut, for a free key; it ended %v after the cut with %+v, %v",
			waitCutBound+10*time.Second, r.at.Sub(holed).Round(time.Millisecond), r.l, r.err)
	}
	took := r.at.Sub(holed)
	t.Logf("the waiter through the cut replica ended %v after the cut: %v", took.Round(time.Millisecond), r.err)
	if r.err == nil {
		t.Fatalf("the waiter through the cut replica was granted %+v", r.l)
	}
	if !errors.Is(r.err, lease.ErrUnavailable) || errors.Is(r.err, lease.ErrHeld) || strings.Contains(r.err.Error(), "went away") {
		t.Errorf("the waiter through the cut replica ended with %v; want ErrUnavailable (the replica cannot reach etcd), not held", r.err)
	}
	if took > waitCutBound {
		t.Errorf("the waiter through the cut replica ended %v after the cut, beyond %v", took.Round(time.Millisecond), waitCutBound)
	}
	// The client's list has moved on: called again, it acquires the free
	// key through the other replica (once the cut replica's queue entry,
	// left without keep-alives, has expired).
	l, err := waiter.AcquireWait(ctx, "k", "waiter", 2*time.Second)
	if err != nil {
		t.Fatalf("waiting again through the list: %v", err)
	}
	if l.Token <= h.Token {
		t.Errorf("token %d after the holder's %d", l.Token, h.Token)
	}
}

// replicaWaiters is the number of waits replica base has under way
// (/v1/stats, with the replicas' token).
func replicaWaiters(t *testing.T, base string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+replicaToken)
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Waiters int `json:"waiters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/stats of %s: %d, %v", base, resp.StatusCode, err)
	}
	return st.Waiters
}
