package chaos_test

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/tools/chaos"
)

// silenceBound is how soon a watch through a replica whose link to etcd
// falls silent must end: etcdstore's silence limit (5 s), a heartbeat of
// the replica, and room for a loaded machine.
const silenceBound = 10 * time.Second

// TestReplicaCutFromEtcd blackholes the link between one `lease serve`
// replica and etcd (toxiproxy's timeout toxic with no timeout: nothing
// passes, the connection stays open) while a watch runs through it, then
// hands the watched lease to another holder through a second replica.
// The first replica must not go on telling the old holder as current:
// its watch ends with ErrUnavailable within silenceBound (it used to stay
// open for good, kept alive by the replica's heartbeats), its /readyz is
// 503 and a renewal through it is not answered; a watch opened again on
// the client's list gets the new holder from the second replica.
func TestReplicaCutFromEtcd(t *testing.T) {
	px, cut, whole := startCutAndWhole(t, "silent", "--watch-heartbeat", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	viaCut := cut.client(t, 0, leasehttp.WithTimeout(2*time.Second))
	a, err := viaCut.Acquire(ctx, "k", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st := follow(t, "the watch through the replica cut from etcd", func(ctx context.Context) iter.Seq2[lease.Event, error] {
		return viaCut.Watch(ctx, "")
	})
	if ev := st.event(replicaWait, "k held"); ev.Kind != lease.Held || ev.Lease.Owner != "a" {
		t.Fatalf("first event %+v, want k held by a", ev)
	}
	if ev := st.event(replicaWait, "synced"); ev.Kind != lease.Synced {
		t.Fatalf("second event %+v, want synced", ev)
	}

	blackhole(t, px)
	holed := time.Now()
	viaWhole := whole.client(t, 0)
	if err := viaWhole.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, err := viaWhole.Acquire(ctx, "k", "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	it := st.next(silenceBound+time.Second, "the end of the watch")
	if !errors.Is(it.err, lease.ErrUnavailable) {
		t.Fatalf("the watch through the cut replica told %+v, %v; want it to end with ErrUnavailable", it.v, it.err)
	}
	if d := it.at.Sub(holed); d > silenceBound {
		t.Errorf("the watch through the cut replica ended %v after the cut, beyond %v", d, silenceBound)
	}
	t.Logf("the watch through the cut replica ended %v after the cut: %v", it.at.Sub(holed).Round(time.Millisecond), it.err)

	if _, err := viaCut.Renew(ctx, a, time.Minute); err == nil {
		t.Error("a renewal through the cut replica was answered ok")
	}
	if code := readyz(t, cut.url(0)); code != 503 {
		t.Errorf("/readyz of the cut replica: %d, want 503", code)
	}

	// The client's list moves on to the whole replica.
	both, err := leasehttp.NewClient(cut.url(0)+","+whole.url(0), leasehttp.WithAuthToken(replicaToken), leasehttp.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	for {
		if ctx.Err() != nil {
			t.Fatal("no watch through the list opened on the whole replica")
		}
		var first lease.Event
		var werr error
		for ev, err := range both.Watch(ctx, "") {
			first, werr = ev, err
			break
		}
		if werr != nil {
			continue // the cut replica; the list moves on
		}
		if first.Kind != lease.Held || first.Lease.Owner != "b" || first.Lease.Token != b.Token {
			t.Fatalf("a watch through the list begins with %+v, want k held by b (token %d)", first, b.Token)
		}
		break
	}
}

// readyz is the status /readyz of the server at base answers.
func readyz(t *testing.T, base string) int {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// memberDropBound is how soon a replica's etcd client stops sending
// requests to a member whose link went silent: etcdstore's keep-alive, a
// ping after 10 s without traffic unanswered for 5 s, and room for a
// loaded machine.
const memberDropBound = 25 * time.Second

// TestReplicaWithOneSilentMember blackholes the link between a replica
// and one of three etcd members (each member behind a proxy of its own),
// the other two still reachable. Within memberDropBound the replica must
// answer every request at once again: it used to keep the silent
// connection in its etcd client's balancer for good, so that a request
// sent there waited out the 10 s backend timeout, about every other Get
// (6 rounds of 5 s: 2 answered in each).
func TestReplicaWithOneSilentMember(t *testing.T) {
	cluster := etcdtest.StartCluster(t, 3)
	var pxs []*chaos.Proxies
	var addrs []string
	for _, ep := range cluster.Endpoints() {
		px, err := chaos.NewProxies([]string{strings.TrimPrefix(ep, "http://")})
		if err != nil {
			t.Fatal(err)
		}
		defer px.Close()
		pxs, addrs = append(pxs, px), append(addrs, px.Listen(0))
	}
	rs := startReplicasOf(t, 1, "etcd://"+strings.Join(addrs, ",")+"/member")
	c := rs.client(t, 0, leasehttp.WithTimeout(15*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Acquire(ctx, "k", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	blackhole(t, pxs[1])
	holed := time.Now()
	// A run of quick answers lasting quickRun, each Get within quick.
	const quick, quickRun = 500 * time.Millisecond, 3 * time.Second
	var runStart time.Time
	for n := 0; ; n++ {
		if since := time.Since(holed); since > memberDropBound {
			t.Fatalf("%v after the blackhole, Gets through the replica still take over %v (%d asked)", since.Round(time.Millisecond), quick, n)
		}
		sent := time.Now()
		if runStart.IsZero() {
			runStart = sent
		}
		l, err := c.Get(ctx, "k")
		if err != nil || l.Owner != "o" {
			t.Fatalf("Get: %+v, %v", l, err)
		}
		if time.Since(sent) > quick {
			runStart = time.Time{}
			continue
		}
		if time.Since(runStart) >= quickRun {
			t.Logf("every Get quick again from %v after the blackhole (%d asked)", runStart.Sub(holed).Round(time.Millisecond), n)
			return
		}
	}
}
