package leasehttp_test

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// streamServer answers every request with the event stream body, written
// in the pieces given, a flush after each, then ends the answer.
func streamServer(t *testing.T, contentType string, pieces ...string) string {
	t.Helper()
	hs := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		for _, p := range pieces {
			if p == "<pause>" {
				select {
				case <-time.After(300 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
				continue
			}
			_, _ = w.Write([]byte(p))
			http.NewResponseController(w).Flush()
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

const (
	leaseA = `{"key":"jobs/a","owner":"o","token":3,"ttl_ms":1000,"expires_at":"2026-01-01T00:00:00.000Z"}`
	leaseB = `{"key":"jobs/b","owner":"p","token":4,"ttl_ms":2000,"expires_at":"2026-01-01T00:00:01.000Z"}`
)

// TestClientWatchReadsAnyWellFormedStream: the client reads the stream as
// the HTML standard says, not only as this package's server writes it:
// CRLF and CR line ends, a BOM, comments, data split over several lines,
// fields it does not use. The server's error event ends the watch with the
// error of its code.
func TestClientWatchReadsAnyWellFormedStream(t *testing.T) {
	split := strings.Index(leaseA, `"owner"`) // the data's line break falls between members
	url := streamServer(t, "text/event-stream; charset=utf-8",
		"\ufeff: hello\r\nretry: 5\r\n\r\n",
		"id: 1\r\nevent: held\r\ndata: "+leaseA[:split]+"\r\ndata: "+leaseA[split:]+"\r\n\r\n",
		"id: 2\revent: synced\rdata: {}\r\r",
		": ping\n\n",
		"id:3\nevent:acquired\nfoo: bar\ndata:"+leaseB+"\n\n",
		"event: end\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"going away\"}}\n\n")
	ch, _ := goWatch(t, newClient(t, url), "jobs/")
	var got []string
	for {
		it, ok := nextItem(t, ch, "the stream's events")
		if !ok {
			t.Fatalf("the watch ended without an error after %q", got)
		}
		if it.err != nil {
			if !errors.Is(it.err, lease.ErrUnavailable) || !strings.Contains(it.err.Error(), "going away") {
				t.Errorf("error %v, want the server's: ErrUnavailable, going away", it.err)
			}
			break
		}
		l := it.ev.Lease
		got = append(got, it.ev.Kind.String()+" "+l.Key)
		if it.ev.Kind == lease.Held && (l.Owner != "o" || l.Token != 3 || l.TTL != time.Second || !l.Expires.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))) {
			t.Errorf("held lease %+v, want the one sent", l)
		}
	}
	if want := []string{"held jobs/a", "synced ", "acquired jobs/b"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestClientWatchBreaksOnWhatItCannotRead: a stream the client cannot
// follow ends the watch with an error matching ErrUnavailable rather than
// leaving the caller with a picture it believes complete.
func TestClientWatchBreaksOnWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"unknown event", "text/event-stream", "event: synced\ndata: {}\n\nevent: moved\ndata: {}\n\n", "not one this client knows"},
		{"bad lease", "text/event-stream", "event: synced\ndata: {}\n\nevent: acquired\ndata: {\"key\":\"jobs/a\"}\n\n", "malformed"},
		{"outside the prefix", "text/event-stream", "event: synced\ndata: {}\n\nevent: acquired\ndata: " + strings.Replace(leaseA, "jobs/a", "other/a", 1) + "\n\n", "outside the prefix"},
		{"end without error", "text/event-stream", "event: synced\ndata: {}\n\n", "without saying why"},
		{"not a stream", "application/json", `{"leases":[]}`, "not an event stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, _ := goWatch(t, newClient(t, streamServer(t, tc.contentType, tc.body)), "jobs/")
			if err := watchErr(t, ch, "the break"); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrUnavailable saying %q", err, tc.want)
			}
		})
	}
}

// TestClientWatchTimeoutBoundsOnlyTheStart: WithTimeout bounds the wait for
// the stream's answer, not the stream: events that come later than the
// timeout after the start are delivered.
func TestClientWatchTimeoutBoundsOnlyTheStart(t *testing.T) {
	url := streamServer(t, "text/event-stream",
		"event: synced\ndata: {}\n\n", "<pause>", "<pause>",
		"event: acquired\ndata: "+leaseA+"\n\n", "<pause>")
	ch, _ := goWatch(t, newClient(t, url, leasehttp.WithTimeout(100*time.Millisecond)), "jobs/")
	syncedKeys(t, ch)
	if it, ok := nextItem(t, ch, "the late event"); !ok || it.err != nil || it.ev.Kind != lease.Acquired {
		t.Fatalf("%+v (open %v), want the Acquired sent 600 ms after the start", it, ok)
	}

	// A server that never begins its answer is given up after the timeout.
	hang := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)
	ch, _ = goWatch(t, newClient(t, hang.URL, leasehttp.WithTimeout(100*time.Millisecond)), "jobs/")
	if err := watchErr(t, ch, "the timeout"); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("a server that does not answer: %v, want ErrUnavailable", err)
	}
}

// TestClientWatchReportsASilentStream: a connection that stops delivering
// without closing (here a proxy that holds every byte) ends the watch with
// ErrUnavailable once MissedHeartbeats heartbeat intervals pass with
// nothing, where before the watch went on with its old picture for as long
// as TCP let it. A stream that is quiet but sound, its heartbeats
// arriving, is not cut.
func TestClientWatchReportsASilentStream(t *testing.T) {
	// In a bubble, on pipes: the heartbeats, the quiet spell and the
	// client's silence limit pass on the bubble's clock.
	synctest.Test(t, func(t *testing.T) {
		mem := memtest.New(t)
		const hb = 50 * time.Millisecond
		srv := newServer(t, mem, leasehttp.WithHeartbeat(hb))
		px, hc := newPipeFreezeProxy(t, servePipes(t, srv, &http.Server{}))
		ch, _ := goWatch(t, newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(hc)), "jobs/")
		syncedKeys(t, ch)

		// Quiet for well past the silence limit, with heartbeats: still open.
		time.Sleep(4 * (leasehttp.MissedHeartbeats*hb + leasehttp.SilenceSlack))
		mustAcquire(t, mem, "jobs/a")
		if it, ok := nextItem(t, ch, "the acquire after a quiet spell"); !ok || it.err != nil || it.ev.Kind != lease.Acquired {
			t.Fatalf("%+v (open %v), want the Acquired: a quiet stream with heartbeats is sound", it, ok)
		}

		px.freeze()
		frozen := time.Now()
		err := watchErr(t, ch, "the silent stream's break")
		took := time.Since(frozen)
		if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "silent") {
			t.Errorf("error %v, want ErrUnavailable saying the stream went silent", err)
		}
		// On the bubble's clock the limit is exact: the silence limit and
		// at most one heartbeat's gap before it.
		if limit := leasehttp.MissedHeartbeats*hb + leasehttp.SilenceSlack + hb; took > limit {
			t.Errorf("the break came %v after the freeze, want under %v", took, limit)
		}
	})
}

// TestClientWatchHeartbeatHeader: the client reads the server's heartbeat
// from the answer and refuses one it cannot use, rather than guessing.
func TestClientWatchHeartbeatHeader(t *testing.T) {
	for _, v := range []string{"0", "abc", "-5", "99999999999"} {
		hs := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set(leasehttp.HeartbeatHeader, v)
			_, _ = w.Write([]byte("event: synced\ndata: {}\n\n"))
		}))
		ch, _ := goWatch(t, newClient(t, hs.URL), "jobs/")
		if err := watchErr(t, ch, "the refusal"); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), leasehttp.HeartbeatHeader) {
			t.Errorf("%s %q: %v, want ErrUnavailable naming the header", leasehttp.HeartbeatHeader, v, err)
		}
		hs.Close()
	}
}

// followed is a lease.Watcher whose Watch is lease.Follow over w, pausing
// 10 ms after each break and calling onBreak before the pause.
type followed struct {
	w       lease.Watcher
	onBreak func(error)
}

func (f followed) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return lease.Follow(ctx, f.w, prefix, lease.FollowBackoff(10*time.Millisecond, 10*time.Millisecond),
		lease.FollowOnBreak(func(err error, _ time.Duration) error { f.onBreak(err); return nil }))
}

// TestFollowOverASilentStream: lease.Follow over a Client whose stream went
// silent (a frozen link) watches again once the link is back, and the new
// stream, after a Resync, tells what changed while the link was frozen.
func TestFollowOverASilentStream(t *testing.T) {
	mem := memtest.New(t)
	const hb = 50 * time.Millisecond
	_, hs := startServer(t, mem, leasehttp.WithHeartbeat(hb))
	px := newFreezeProxy(t, hs.Listener.Addr().String())
	broke := make(chan error)
	resume := make(chan struct{})
	ch, _ := goWatch(t, followed{w: newClient(t, px.URL()), onBreak: func(err error) {
		broke <- err
		<-resume
	}}, "jobs/")
	if keys := syncedKeys(t, ch); len(keys) != 0 {
		t.Fatalf("state %q, want none", keys)
	}
	px.freeze()
	select {
	case err := <-broke:
		if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "silent") {
			t.Errorf("break %v, want ErrUnavailable saying the stream went silent", err)
		}
	case <-time.After(patience):
		t.Fatalf("no break within %v of the freeze", patience)
	}
	mustAcquire(t, mem, "jobs/a") // while no stream is open
	px.thaw()
	close(resume)
	kinds := newPicture(t, ch)
	if want := []string{"resync ", "held jobs/a", "synced "}; !slices.Equal(kinds, want) {
		t.Errorf("after the break: %q, want %q", kinds, want)
	}
}

// TestFollowPastItsOwnStrandedStream: a stream cut off for good without
// closing (its path died, the client then moved to another) is one the
// client gives up for silence and the server cannot tell from a sound one
// until its connection fails at last: TCP takes minutes to give up on a
// peer that acknowledges nothing, and a proxy that still takes the bytes
// never does. Meanwhile the server counts it, so with the credential at
// WithMaxWatchers the watch opened again is answered 429. That refusal is
// the client's own dead stream, not a bound it went over: it is a break
// that Follow watches again after, not the end of Follow (which ended
// lease watch with exit 1 and election.Observe with an error).
func TestFollowPastItsOwnStrandedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memtest.New(t)
		const hb = 50 * time.Millisecond
		srv := newServer(t, mem, leasehttp.WithHeartbeat(hb), leasehttp.WithMaxWatchers(1))
		px, hc := newPipeFreezeProxy(t, servePipes(t, srv, &http.Server{}))
		c := newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(hc))

		// Without a stream of its own given up, a 429 is the bound: it
		// ends Follow, as a refusal that watching again cannot mend.
		ch, stop := goWatch(t, c, "")
		syncedKeys(t, ch)
		over, _ := goWatch(t, followed{w: c, onBreak: func(err error) { t.Errorf("a break (%v), want the refusal", err) }}, "")
		if err := watchErr(t, over, "the refusal of a watch over the bound"); !errors.Is(err, leasehttp.ErrTooManyWatchers) || errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("over the bound: %v, want ErrTooManyWatchers alone", err)
		}
		stop()
		synctest.Wait() // the first stream's slot is free again

		breaks := make(chan error, 100)
		ch, _ = goWatch(t, followed{w: c, onBreak: func(err error) { breaks <- err }}, "")
		syncedKeys(t, ch)
		nextBreak := func(what string) error {
			t.Helper()
			select {
			case err := <-breaks:
				return err
			case it := <-ch:
				t.Fatalf("event %v (error %v) while waiting for %s", it.ev.Kind, it.err, what)
			case <-time.After(patience):
				t.Fatalf("no %s within %v", what, patience)
			}
			return nil
		}
		px.strand()
		if err := nextBreak("break for silence"); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "silent") {
			t.Fatalf("first break %v, want ErrUnavailable saying the stream went silent", err)
		}
		// The watch opened again is refused while the server counts the
		// stranded stream; Follow goes on.
		if err := nextBreak("429 told as a break"); !errors.Is(err, leasehttp.ErrTooManyWatchers) || !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("second break %v, want the 429 as a break (ErrUnavailable and ErrTooManyWatchers)", err)
		}
		mustAcquire(t, mem, "a") // while no stream of this client is open
		px.cutStranded()
		kinds := newPicture(t, ch)
		if want := []string{"resync ", "held a", "synced "}; !slices.Equal(kinds, want) {
			t.Errorf("once the stranded stream ended: %q, want %q", kinds, want)
		}
	})
}

// newPicture reads a followed watch's events up to its Synced, after a
// break, as "kind key" lines; the watch must not end meanwhile.
func newPicture(t *testing.T, ch <-chan watchItem) []string {
	t.Helper()
	var kinds []string
	for {
		it, ok := nextItem(t, ch, "the new picture")
		if !ok || it.err != nil {
			t.Fatalf("the followed watch ended: %v", it.err)
		}
		kinds = append(kinds, it.ev.Kind.String()+" "+it.ev.Lease.Key)
		if it.ev.Kind == lease.Synced {
			return kinds
		}
	}
}

// TestFollowPausesForARateLimitsRetryAfter: a watch refused 429 by a rate
// limit in front of the server (no API error body: not the server's bound
// on watchers) says "too many, try later": lease.Follow takes it for a
// break and watches again after the answer's Retry-After, where it ended
// with an unexpected answer (ending lease watch and election.Observe).
func TestFollowPausesForARateLimitsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, memtest.New(t))
		var refused atomic.Bool
		l := servePipes(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/watch" && refused.CompareAndSwap(false, true) {
				w.Header().Set("Retry-After", "3")
				http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
				return
			}
			srv.ServeHTTP(w, r)
		}), &http.Server{})
		c := newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(l.client()))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			breaks []error
			pauses []time.Duration
		)
		start := time.Now()
		for ev, err := range lease.Follow(ctx, c, "", lease.FollowBackoff(10*time.Millisecond, 10*time.Millisecond),
			lease.FollowOnBreak(func(err error, pause time.Duration) error {
				breaks, pauses = append(breaks, err), append(pauses, pause)
				return nil
			})) {
			if err != nil {
				t.Fatalf("Follow ended: %v; want it to watch again after the 429", err)
			}
			if ev.Kind == lease.Synced {
				break
			}
		}
		if len(breaks) != 1 || !errors.Is(breaks[0], lease.ErrUnavailable) {
			t.Fatalf("breaks %v, want the 429 as one break (ErrUnavailable)", breaks)
		}
		if pauses[0] < 3*time.Second {
			t.Errorf("paused %v after the 429, want at least its Retry-After, 3s", pauses[0])
		}
		if took := time.Since(start); took < 3*time.Second {
			t.Errorf("watched again %v after the 429, want at least 3s", took)
		}
	})
}
