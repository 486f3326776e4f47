package leasehttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// patience bounds every wait for something that must come.
const patience = 10 * time.Second

// rawStream is a watch read line by line off the wire, as any SSE client
// sees it.
type rawStream struct {
	t      *testing.T
	resp   *http.Response
	lines  chan string
	cancel context.CancelFunc
}

// openRaw sends GET url with the bearer token (if any) and the headers
// given as name, value pairs; it fails the test unless the answer is
// status.
func openRaw(t *testing.T, url, token string, status int, header ...string) *rawStream {
	t.Helper()
	return openRawWith(t, http.DefaultClient, url, token, status, header...)
}

// openRawWith is openRaw through hc.
func openRawWith(t *testing.T, hc *http.Client, url, token string, status int, header ...string) *rawStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	st := &rawStream{t: t, resp: resp, lines: make(chan string, 1<<16), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(st.lines)
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			st.lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	if resp.StatusCode != status {
		var body strings.Builder
		for l := range st.lines {
			body.WriteString(l)
		}
		t.Fatalf("GET %s: HTTP %d %s, want %d", url, resp.StatusCode, body.String(), status)
	}
	return st
}

// line returns the next line; ok is false at the end of the stream.
func (st *rawStream) line(what string) (string, bool) {
	st.t.Helper()
	select {
	case l, ok := <-st.lines:
		return l, ok
	case <-time.After(patience):
		st.t.Fatalf("no line within %v while waiting for %s", patience, what)
		return "", false
	}
}

// message is one SSE message as it was written: its field lines, in
// order, without comments.
type message struct{ id, event, data string }

// next returns the next message, skipping comment lines and blank lines
// before it; it fails the test at the end of the stream.
func (st *rawStream) next(what string) message {
	st.t.Helper()
	var m message
	fields := 0
	for {
		l, ok := st.line(what)
		if !ok {
			st.t.Fatalf("the stream ended while waiting for %s", what)
		}
		switch {
		case strings.HasPrefix(l, ":"):
			continue
		case l == "":
			if fields > 0 {
				return m
			}
			continue
		}
		name, value, _ := strings.Cut(l, ": ")
		switch name {
		case "id":
			m.id = value
		case "event":
			m.event = value
		case "data":
			m.data = value
		case "retry":
			continue
		default:
			st.t.Fatalf("unexpected line %q while waiting for %s", l, what)
		}
		fields++
	}
}

// expect reads the next message and checks its id, event and the key in
// its data.
func (st *rawStream) expect(id, event, key string) message {
	st.t.Helper()
	m := st.next(fmt.Sprintf("%s %s of %q", id, event, key))
	var j leasehttp.LeaseJSON
	if err := json.Unmarshal([]byte(m.data), &j); err != nil {
		st.t.Fatalf("message %+v: data is not a lease: %v", m, err)
	}
	if m.id != id || m.event != event || j.Key != key {
		st.t.Fatalf("message id %q event %q key %q (%s), want id %q event %q key %q", m.id, m.event, j.Key, m.data, id, event, key)
	}
	return m
}

// expectSynced reads the next message, which must be synced with id.
func (st *rawStream) expectSynced(id string) {
	st.t.Helper()
	if m := st.next("synced"); m != (message{id: id, event: "synced", data: "{}"}) {
		st.t.Fatalf("message %+v, want synced with id %s and data {}", m, id)
	}
}

// ended waits for the end of the stream, failing on any further message.
func (st *rawStream) ended(what string) {
	st.t.Helper()
	for {
		l, ok := st.line(what)
		if !ok {
			return
		}
		if l != "" && !strings.HasPrefix(l, ":") {
			st.t.Fatalf("line %q while waiting for %s", l, what)
		}
	}
}

// watchItem is one item of a Go watch.
type watchItem struct {
	ev  lease.Event
	err error
}

// goWatch runs w's watch of prefix, read through a channel so that the
// test can wait for an item with a bound.
func goWatch(t *testing.T, w lease.Watcher, prefix string) (<-chan watchItem, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan watchItem)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for ev, err := range w.Watch(ctx, prefix) {
			select {
			case ch <- watchItem{ev, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ch, cancel
}

func nextItem(t *testing.T, ch <-chan watchItem, what string) (watchItem, bool) {
	t.Helper()
	select {
	case it, ok := <-ch:
		return it, ok
	case <-time.After(patience):
		t.Fatalf("nothing within %v while waiting for %s", patience, what)
		return watchItem{}, false
	}
}

// syncedKeys reads a watch's current state and returns the keys held.
func syncedKeys(t *testing.T, ch <-chan watchItem) []string {
	t.Helper()
	var keys []string
	for {
		it, ok := nextItem(t, ch, "the current state")
		switch {
		case !ok:
			t.Fatal("the watch ended before Synced")
		case it.err != nil:
			t.Fatalf("the watch failed before Synced: %v", it.err)
		case it.ev.Kind == lease.Synced:
			return keys
		case it.ev.Kind != lease.Held:
			t.Fatalf("%v event before Synced", it.ev.Kind)
		}
		keys = append(keys, it.ev.Lease.Key)
	}
}

// watchErr reads a watch to its end, which must be one error and nothing
// after it, and returns the error.
func watchErr(t *testing.T, ch <-chan watchItem, what string) error {
	t.Helper()
	for {
		it, ok := nextItem(t, ch, what)
		if !ok {
			t.Fatalf("the watch ended without an error while waiting for %s", what)
		}
		if it.err != nil {
			if it, ok := nextItem(t, ch, "the end after the error"); ok {
				t.Fatalf("the watch goes on after its error: %+v", it)
			}
			return it.err
		}
	}
}

func mustAcquire(t *testing.T, b lease.Backend, key string) lease.Lease {
	t.Helper()
	l, err := b.Acquire(ctxFor(t), key, "owner-of-"+key, time.Hour)
	if err != nil {
		t.Fatalf("Acquire %q: %v", key, err)
	}
	return l
}

// TestWatchStreamFormat reads a watch off the wire: the headers, retry:,
// each event's id, event and data lines (the data as GET answers the
// lease, without its id), and heartbeat comments while nothing happens.
func TestWatchStreamFormat(t *testing.T) {
	mem := memtest.New(t)
	_, hs := startServer(t, mem, leasehttp.WithHeartbeat(20*time.Millisecond))
	mustAcquire(t, mem, "jobs/b")
	mustAcquire(t, mem, "jobs/a")
	mustAcquire(t, mem, "other/x")

	st := openRaw(t, hs.URL+"/v1/watch?prefix=jobs%2F", "", 200)
	for name, want := range map[string]string{
		"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
	} {
		if got := st.resp.Header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if l, _ := st.line("retry:"); l != "retry: 1000" {
		t.Fatalf("first line %q, want retry: 1000", l)
	}
	held := st.expect("1", "held", "jobs/a")
	_, get := call(t, "GET", hs.URL+"/v1/leases/jobs%2Fa", "", "")
	if held.data != strings.TrimSpace(get) {
		t.Errorf("held data %s, want the lease as GET answers it: %s", held.data, get)
	}
	if strings.Contains(held.data, `"id"`) {
		t.Errorf("held data %s shows the lease's id", held.data)
	}
	st.expect("2", "held", "jobs/b")
	st.expectSynced("3")

	// Quiet now: heartbeats, and nothing else.
	for pings := 0; pings < 3; {
		l, ok := st.line("heartbeats")
		switch {
		case !ok:
			t.Fatal("the stream ended while quiet")
		case l == ": ping":
			pings++
		case l != "":
			t.Fatalf("line %q while nothing changed, want only heartbeats", l)
		}
	}
	l := mustAcquire(t, mem, "jobs/c")
	st.expect("4", "acquired", "jobs/c")
	if _, err := mem.Renew(ctxFor(t), l, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	st.expect("5", "renewed", "jobs/c")
	if err := mem.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	st.expect("6", "released", "jobs/c")
	short, err := mem.Acquire(ctxFor(t), "jobs/d", "brief", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	st.expect("7", "acquired", "jobs/d")
	m := st.expect("8", "expired", "jobs/d")
	var j leasehttp.LeaseJSON
	_ = json.Unmarshal([]byte(m.data), &j)
	if j.Token != short.Token || j.Owner != "brief" || j.TTLMillis != 30 {
		t.Errorf("expired data %s, want the lease that ended", m.data)
	}

	// HEAD answers the headers and ends.
	req, _ := http.NewRequestWithContext(ctxFor(t), "HEAD", hs.URL+"/v1/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("HEAD /v1/watch: HTTP %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// A query it does not know is a client mistake.
	if status, body := call(t, "GET", hs.URL+"/v1/watch?prefix=a&since=3", "", ""); status != 400 || !strings.Contains(body, `"invalid"`) {
		t.Errorf("watch with an unknown parameter: HTTP %d %s, want 400 invalid", status, body)
	}
}

// TestWatchScopedByCredential: a watch sees only the keys its credential
// covers. A wider prefix is narrowed, to several prefixes if need be (one
// snapshot in key order, one synced, then the changes of all); a prefix
// outside the credential is 403.
func TestWatchScopedByCredential(t *testing.T) {
	mem := memtest.New(t)
	_, hs := startServer(t, mem, leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: "token-all", Prefixes: []string{"*"}},
		{Token: "token-jobs", Prefixes: []string{"jobs/"}},
		{Token: "token-two", Prefixes: []string{"jobs/c/", "jobs/a/"}},
	}))
	for _, k := range []string{"jobs/a/1", "jobs/b/1", "jobs/c/1", "other/1"} {
		mustAcquire(t, mem, k)
	}
	all := newClient(t, hs.URL, leasehttp.WithAuthToken("token-all"))
	jobs := newClient(t, hs.URL, leasehttp.WithAuthToken("token-jobs"))
	two := newClient(t, hs.URL, leasehttp.WithAuthToken("token-two"))

	chAll, _ := goWatch(t, all, "")
	chJobs, _ := goWatch(t, jobs, "")
	chTwo, _ := goWatch(t, two, "jobs/")
	for _, tc := range []struct {
		name string
		ch   <-chan watchItem
		want string
	}{
		{"all", chAll, "[jobs/a/1 jobs/b/1 jobs/c/1 other/1]"},
		{"jobs", chJobs, "[jobs/a/1 jobs/b/1 jobs/c/1]"},
		{"two", chTwo, "[jobs/a/1 jobs/c/1]"},
	} {
		if got := fmt.Sprint(syncedKeys(t, tc.ch)); got != tc.want {
			t.Errorf("%s: Held %s, want %s", tc.name, got, tc.want)
		}
	}
	// Changes in the order made; each watch must see exactly its own.
	for _, k := range []string{"other/2", "jobs/b/2", "jobs/c/2", "jobs/a/2", "zz/marker"} {
		mustAcquire(t, mem, k)
	}
	for _, tc := range []struct {
		name string
		ch   <-chan watchItem
		want []string
	}{
		{"all", chAll, []string{"other/2", "jobs/b/2", "jobs/c/2", "jobs/a/2", "zz/marker"}},
		{"jobs", chJobs, []string{"jobs/b/2", "jobs/c/2", "jobs/a/2"}},
		{"two", chTwo, nil}, // jobs/c/2 and jobs/a/2 in either order
	} {
		var got []string
		n := len(tc.want)
		if tc.name == "two" {
			n = 2
		}
		for range n {
			it, ok := nextItem(t, tc.ch, tc.name+"'s changes")
			if !ok || it.err != nil || it.ev.Kind != lease.Acquired {
				t.Fatalf("%s: %+v (open %v), want an Acquired", tc.name, it, ok)
			}
			got = append(got, it.ev.Lease.Key)
		}
		if tc.name == "two" {
			if s := fmt.Sprint(got); s != "[jobs/c/2 jobs/a/2]" && s != "[jobs/a/2 jobs/c/2]" {
				t.Errorf("two: changes %s, want jobs/c/2 and jobs/a/2", s)
			}
		} else if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: changes %v, want %v", tc.name, got, tc.want)
		}
	}
	// A marker each narrow watch may see proves nothing else came before it.
	mustAcquire(t, mem, "jobs/a/zz-marker")
	for name, ch := range map[string]<-chan watchItem{"jobs": chJobs, "two": chTwo} {
		it, ok := nextItem(t, ch, name+"'s marker")
		if !ok || it.err != nil || it.ev.Lease.Key != "jobs/a/zz-marker" {
			t.Errorf("%s: %+v, want the marker's Acquired and nothing outside the credential", name, it)
		}
	}

	// Outside the credential: 403, on the wire and through the client.
	if status, body := call(t, "GET", hs.URL+"/v1/watch?prefix=other%2F", "token-jobs", ""); status != 403 || !strings.Contains(body, `"forbidden"`) {
		t.Errorf("watch outside the credential: HTTP %d %s, want 403 forbidden", status, body)
	}
	ch, _ := goWatch(t, two, "jobs/b/")
	if err := watchErr(t, ch, "a refused watch"); !errors.Is(err, leasehttp.ErrForbidden) {
		t.Errorf("watch outside the credential: %v, want ErrForbidden", err)
	}
	if status, _ := call(t, "GET", hs.URL+"/v1/watch", "", ""); status != 401 {
		t.Errorf("watch without a token: HTTP %d, want 401", status)
	}
}

// TestWatchBoundPerCredential: past WithMaxWatchers streams of one
// credential, a watch is 429 too_many_watchers; other credentials are not
// affected, and a stream that ends frees its slot.
func TestWatchBoundPerCredential(t *testing.T) {
	_, hs := startServer(t, memtest.New(t), leasehttp.WithMaxWatchers(2), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: "token-a", Prefixes: []string{"*"}},
		{Token: "token-b", Prefixes: []string{"*"}},
	}))
	a1 := openRaw(t, hs.URL+"/v1/watch", "token-a", 200)
	openRaw(t, hs.URL+"/v1/watch?prefix=x", "token-a", 200)
	status, body := call(t, "GET", hs.URL+"/v1/watch", "token-a", "")
	if status != 429 || !strings.Contains(body, `"code":"too_many_watchers"`) {
		t.Fatalf("a third watch of one credential: HTTP %d %s, want 429 too_many_watchers", status, body)
	}
	// HEAD asks what GET would answer, and GET would refuse.
	if status, _ := call(t, "HEAD", hs.URL+"/v1/watch", "token-a", ""); status != 429 {
		t.Errorf("HEAD of a third watch of one credential: HTTP %d, want 429, as GET answers", status)
	}
	if status, _ := call(t, "HEAD", hs.URL+"/v1/watch", "token-b", ""); status != 200 {
		t.Errorf("HEAD of another credential's first watch: HTTP %d, want 200", status)
	}
	ch, _ := goWatch(t, newClient(t, hs.URL, leasehttp.WithAuthToken("token-a")), "")
	if err := watchErr(t, ch, "a watch past the bound"); !errors.Is(err, leasehttp.ErrTooManyWatchers) || errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("the client's watch past the bound: %v, want ErrTooManyWatchers (and not ErrUnavailable: watching again at once will not help)", err)
	}
	openRaw(t, hs.URL+"/v1/watch", "token-b", 200) // another credential has its own
	if got := metric(t, hs.URL, "lease_watchers"); got != 3 {
		t.Errorf("lease_watchers = %v, want 3", got)
	}

	a1.cancel() // the client goes away; the server notices and frees the slot
	eventually(t, "the slot of a stream that ended is free", func() bool {
		return metric(t, hs.URL, "lease_watchers") == 2
	})
	openRaw(t, hs.URL+"/v1/watch", "token-a", 200)
}

// TestWatchBoundWithoutCredentials: without credentials the bound is on
// all streams together.
func TestWatchBoundWithoutCredentials(t *testing.T) {
	_, hs := startServer(t, memtest.New(t), leasehttp.WithMaxWatchers(1))
	openRaw(t, hs.URL+"/v1/watch?prefix=a", "", 200)
	if status, body := call(t, "GET", hs.URL+"/v1/watch?prefix=b", "", ""); status != 429 {
		t.Fatalf("a second watch past a bound of 1: HTTP %d %s, want 429", status, body)
	}
}

// TestWatchResumeStartsFromCurrentState: a client reconnecting with
// Last-Event-ID gets a new stream, numbered from 1, that begins with the
// state as it is now (not as it was, nor the changes it missed), then
// synced, then the changes.
func TestWatchResumeStartsFromCurrentState(t *testing.T) {
	mem := memtest.New(t)
	_, hs := startServer(t, mem)
	a := mustAcquire(t, mem, "jobs/a")
	st := openRaw(t, hs.URL+"/v1/watch?prefix=jobs%2F", "", 200)
	st.expect("1", "held", "jobs/a")
	st.expectSynced("2")
	mustAcquire(t, mem, "jobs/b")
	last := st.expect("3", "acquired", "jobs/b")
	st.cancel()
	// Missed while away: jobs/a released, jobs/c acquired and released.
	if err := mem.Release(ctxFor(t), a); err != nil {
		t.Fatal(err)
	}
	c := mustAcquire(t, mem, "jobs/c")
	if err := mem.Release(ctxFor(t), c); err != nil {
		t.Fatal(err)
	}

	again := openRaw(t, hs.URL+"/v1/watch?prefix=jobs%2F", "", 200, "Last-Event-ID", last.id)
	var comment bool
	for {
		l, _ := again.line("the resumed stream's start")
		if strings.HasPrefix(l, ":") {
			comment = strings.Contains(l, "no replay")
		}
		if l == "" {
			break
		}
	}
	if !comment {
		t.Error("a resumed stream does not say that it starts over")
	}
	again.expect("1", "held", "jobs/b")
	again.expectSynced("2")
	mustAcquire(t, mem, "jobs/d")
	again.expect("3", "acquired", "jobs/d")
}

// TestWatchEndsOnServerClose: Close ends open streams at once with an error
// event (so http.Server.Shutdown is not held up), and later watches are
// 503.
func TestWatchEndsOnServerClose(t *testing.T) {
	mem := memtest.New(t)
	srv, hs := startServer(t, mem)
	raw := openRaw(t, hs.URL+"/v1/watch", "", 200)
	raw.expectSynced("1")
	ch, _ := goWatch(t, newClient(t, hs.URL), "")
	syncedKeys(t, ch)

	srv.Close()
	m := raw.next("the error event")
	if m.event != leasehttp.EndEvent || m.id != "" || !strings.Contains(m.data, `"code":"unavailable"`) || !strings.Contains(m.data, "shutting down") {
		t.Errorf("message %+v, want an error event without id, code unavailable, saying the server shuts down", m)
	}
	raw.ended("the end after the error event")
	if err := watchErr(t, ch, "the end of the watch"); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("the client's watch at Close: %v, want ErrUnavailable", err)
	}
	if status, body := call(t, "GET", hs.URL+"/v1/watch", "", ""); status != 503 {
		t.Errorf("a watch after Close: HTTP %d %s, want 503", status, body)
	}
}

// TestWatchOutlastsServerTimeouts: the http.Server's read and write
// timeouts bound a request from its start; a quiet watch stream lives on
// past both (each heartbeat moves the deadlines) and still delivers.
func TestWatchOutlastsServerTimeouts(t *testing.T) {
	// In a bubble, on pipes (pipeListener): the server's deadlines and
	// heartbeats run on the bubble's clock.
	synctest.Test(t, func(t *testing.T) {
		mem := memtest.New(t)
		srv, err := leasehttp.NewServer(mem, leasehttp.WithLogger(quiet), leasehttp.WithHeartbeat(30*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		hc := servePipes(t, srv, &http.Server{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}).client()

		st := openRawWith(t, hc, "http://127.0.0.1/v1/watch", "", 200)
		st.expectSynced("1")
		// Ten times both timeouts, with nothing to tell.
		time.Sleep(time.Second)
		mustAcquire(t, mem, "late")
		st.expect("2", "acquired", "late")
	})
}

// TestWatchStopsForAStuckClient: a client that stops reading holds up
// neither the backend nor other requests, and its stream is ended even
// though it keeps the connection open.
func TestWatchStopsForAStuckClient(t *testing.T) {
	mem := memtest.New(t)
	_, hs := startServer(t, mem, leasehttp.WithHeartbeat(50*time.Millisecond))
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stream is open", func() bool { return metric(t, hs.URL, "lease_watchers") == 1 })
	// Changes of large leases, far more than the connection's buffers
	// hold (about 45 MB of events), in bursts that the server writes out
	// long before the backend's buffer for it fills: the server is blocked
	// writing to the stuck client first, and only then does the backend
	// cut its watch off. The write must not block the server for good.
	owner := strings.Repeat("o", lease.MaxKeyLen)
	l, err := mem.Acquire(ctxFor(t), strings.Repeat("k", lease.MaxKeyLen), owner, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 40000 {
			if l, err = mem.Renew(context.Background(), l, time.Hour); err != nil {
				done <- err
				return
			}
			if i%256 == 255 {
				// real time: a pause between bursts, in which the server
				// writes each out to the real TCP connection.
				time.Sleep(2 * time.Millisecond)
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("renewals held up by a watcher that does not read")
	}
	if status, _ := call(t, "GET", hs.URL+"/v1/leases", "", ""); status != 200 {
		t.Errorf("a list beside the stuck stream: HTTP %d", status)
	}
	eventually(t, "the stuck stream is ended", func() bool { return metric(t, hs.URL, "lease_watchers") == 0 })
}

// TestWatchOfAStuckClientDoesNotHoldUpShutdown: a stream blocked writing
// to a client that reads nothing cannot see the server close; its write
// deadline, the heartbeat plus the write timeout (lease serve: 15 s + 30 s),
// held http.Server.Shutdown for all of lease serve's --shutdown-timeout
// (10 s measured, at every restart). Close cuts the stream's deadline short.
func TestWatchOfAStuckClientDoesNotHoldUpShutdown(t *testing.T) {
	// In a bubble, on pipes: a pipe takes nothing its reader does not
	// read, so the stream's first write blocks, as on full TCP buffers.
	synctest.Test(t, func(t *testing.T) {
		mem := memtest.New(t)
		srv := newServer(t, mem, leasehttp.WithHeartbeat(time.Hour))
		hs := &http.Server{WriteTimeout: time.Hour}
		ln := servePipes(t, srv, hs)
		conn, err := ln.dial(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("GET /v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the stream is blocked writing its start
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := hs.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v after %v; the stuck stream's deadline is 2 h out, want it cut at Close", err, time.Since(start))
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Shutdown took %v, want the stuck stream cut within %v of Close", took, 2*time.Second)
		}
	})
}

// TestWatchUnsupportedBackend: a backend that cannot watch is 501
// unsupported, which the client reports as errors.ErrUnsupported, not as
// a break to retry.
func TestWatchUnsupportedBackend(t *testing.T) {
	_, hs := startServer(t, backendOnly{memtest.New(t)})
	if status, body := call(t, "GET", hs.URL+"/v1/watch", "", ""); status != 501 || !strings.Contains(body, `"code":"unsupported"`) {
		t.Errorf("watch on a backend that cannot: HTTP %d %s, want 501 unsupported", status, body)
	}
	ch, _ := goWatch(t, newClient(t, hs.URL), "")
	if err := watchErr(t, ch, "a refused watch"); !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("the client's watch: %v, want errors.ErrUnsupported and not ErrUnavailable", err)
	}
}

// cannotWatchNow is a backend whose every watch breaks before it begins, as
// etcdstore's does on a replica cut from etcd.
type cannotWatchNow struct{ lease.Backend }

func (cannotWatchNow) Watch(context.Context, string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		yield(lease.Event{}, fmt.Errorf("%w: etcd did not answer", lease.ErrUnavailable))
	}
}

// TestWatchThatCannotBeginIs503: a watch the backend cannot begin is
// answered 503 unavailable, not 200 and a stream that ends at once, so
// that a client listing several replicas moves on from this one (a
// replica cut from etcd used to keep such a client's watches for good);
// the backend's words stay in the log.
func TestWatchThatCannotBeginIs503(t *testing.T) {
	_, bad := startServer(t, cannotWatchNow{memtest.New(t)})
	status, body := call(t, "GET", bad.URL+"/v1/watch", "", "")
	if status != 503 || !strings.Contains(body, `"code":"unavailable"`) || strings.Contains(body, "etcd") {
		t.Errorf("a watch the backend cannot begin: HTTP %d %s, want 503 unavailable without the backend's words", status, body)
	}
	mem := memtest.New(t)
	_, good := startServer(t, mem)
	mustAcquire(t, mem, "a")
	c := newClient(t, bad.URL+","+good.URL)
	for try := 1; ; try++ {
		ch, cancel := goWatch(t, c, "")
		it, ok := nextItem(t, ch, "the first event")
		cancel()
		if ok && it.err == nil {
			if it.ev.Kind != lease.Held || it.ev.Lease.Key != "a" {
				t.Fatalf("first event %+v, want a held (from the good server)", it.ev)
			}
			break
		}
		if try == 2 {
			t.Fatalf("watch %d through the list: %+v (open %v), want the good server's stream", try, it, ok)
		}
	}
}

// TestWatchEndsWhenCredentialsChange: a stream lives as long as its
// client wants, so it must not outlive the credential that let it in: a
// SetCredentials that drops or narrows it ends the stream, one that keeps
// it does not.
func TestWatchEndsWhenCredentialsChange(t *testing.T) {
	mem := memtest.New(t)
	srv, hs := startServer(t, mem, leasehttp.WithHeartbeat(20*time.Millisecond), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: "token-kept", Prefixes: []string{"*"}},
		{Token: "token-narrowed", Prefixes: []string{"*"}},
		{Token: "token-dropped", Prefixes: []string{"*"}},
	}))
	streams := map[string]<-chan watchItem{}
	for _, tok := range []string{"token-kept", "token-narrowed", "token-dropped"} {
		ch, _ := goWatch(t, newClient(t, hs.URL, leasehttp.WithAuthToken(tok)), "")
		syncedKeys(t, ch)
		streams[tok] = ch
	}
	if err := srv.SetCredentials([]leasehttp.Credential{
		{Token: "token-kept", Prefixes: []string{"*"}},
		{Token: "token-narrowed", Prefixes: []string{"jobs/"}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"token-narrowed", "token-dropped"} {
		if err := watchErr(t, streams[tok], "the end of a stream whose credential changed"); !errors.Is(err, lease.ErrUnavailable) ||
			!strings.Contains(err.Error(), "credentials changed") {
			t.Errorf("%s: %v, want ErrUnavailable saying the credentials changed", tok, err)
		}
	}
	mustAcquire(t, mem, "after")
	if it, ok := nextItem(t, streams["token-kept"], "the kept stream's event"); !ok || it.err != nil || it.ev.Lease.Key != "after" {
		t.Errorf("the stream of a credential kept: %+v (open %v), want the Acquired", it, ok)
	}
}

// TestWatchEndsAtOnceWhenCredentialsChange: the stream of a credential a
// SetCredentials (lease serve's SIGHUP reload) drops ends then, not at its
// next event or heartbeat: with lease serve's 15 s heartbeat a revoked
// token's stream stayed open up to 15 s (14 s measured).
func TestWatchEndsAtOnceWhenCredentialsChange(t *testing.T) {
	mem := memtest.New(t)
	srv, hs := startServer(t, mem, leasehttp.WithHeartbeat(time.Hour), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: "token-kept", Prefixes: []string{"*"}},
		{Token: "token-dropped", Prefixes: []string{"*"}},
	}))
	ch, _ := goWatch(t, newClient(t, hs.URL, leasehttp.WithAuthToken("token-dropped")), "")
	syncedKeys(t, ch)
	if err := srv.SetCredentials([]leasehttp.Credential{{Token: "token-kept", Prefixes: []string{"*"}}}); err != nil {
		t.Fatal(err)
	}
	if err := watchErr(t, ch, "the end of a stream whose credential was dropped, within the patience and not the hour's heartbeat"); !errors.Is(err, lease.ErrUnavailable) ||
		!strings.Contains(err.Error(), "credentials changed") {
		t.Errorf("%v, want ErrUnavailable saying the credentials changed", err)
	}
}

// TestWatchKeyQuery: ?key= is a watch of exactly one key, refused with
// prefix beside it, with a bad key, and for a key the credential does not
// cover.
func TestWatchKeyQuery(t *testing.T) {
	mem := memtest.New(t)
	_, hs := startServer(t, mem, leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: "tok-svc-0123456789abcdef", Prefixes: []string{"svc"}},
	}))
	for _, tc := range []struct {
		query  string
		status int
	}{
		{"?key=svc&prefix=svc", 400},
		{"?key=", 400},
		{"?key=svc&key=svc", 400},
		{"?key=other", 403},
	} {
		if status, body := call(t, "GET", hs.URL+"/v1/watch"+tc.query, "tok-svc-0123456789abcdef", ""); status != tc.status {
			t.Errorf("GET /v1/watch%s: HTTP %d %s, want %d", tc.query, status, body, tc.status)
		}
	}
	mustAcquire(t, mem, "svc2")
	mustAcquire(t, mem, "svc-cache/x")
	c := newClient(t, hs.URL, leasehttp.WithAuthToken("tok-svc-0123456789abcdef"))
	ch, _ := goWatch(t, keyWatcher{c}, "svc")
	if keys := syncedKeys(t, ch); len(keys) != 0 {
		t.Errorf("WatchKey(svc) state %q, want none: svc2 and svc-cache/x are other keys", keys)
	}
	mustAcquire(t, mem, "svc/slots/0")
	l := mustAcquire(t, mem, "svc")
	if it, ok := nextItem(t, ch, "svc's Acquired"); !ok || it.err != nil || it.ev.Kind != lease.Acquired || it.ev.Lease.Key != "svc" || it.ev.Lease.Token != l.Token {
		t.Fatalf("%+v (open %v), want the Acquired of svc alone", it, ok)
	}
}

// keyWatcher shows a KeyWatcher's WatchKey as a Watcher's Watch, for goWatch.
type keyWatcher struct{ lease.KeyWatcher }

func (k keyWatcher) Watch(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return k.WatchKey(ctx, key)
}

// TestWatchRefusesAnAcceptWithoutEventStream: a watch asked with an Accept
// that rules out text/event-stream (a client that wants the JSON of a
// list, say) is 406 with the error body: it got the stream, which never
// ends, so reading the answer to its end hung. An Accept that admits the
// stream, or none, gets it.
func TestWatchRefusesAnAcceptWithoutEventStream(t *testing.T) {
	h := newServer(t, memtest.New(t))
	for _, tc := range []struct {
		accept string
		status int
	}{
		{"application/json", http.StatusNotAcceptable},
		{"text/html, application/xhtml+xml", http.StatusNotAcceptable},
		{"text/event-stream;q=0, application/json", http.StatusNotAcceptable},
		{"*/*;q=0", http.StatusNotAcceptable},
		{"text/event-stream", http.StatusOK},
		{"TEXT/EVENT-STREAM", http.StatusOK},
		{"text/*", http.StatusOK},
		{"*/*", http.StatusOK},
		{"application/json, */*;q=0.1", http.StatusOK},
		{"text/event-stream; charset=utf-8", http.StatusOK},
		{"", http.StatusOK},
	} {
		// HEAD: what GET would answer, without the stream.
		req := httptest.NewRequest("HEAD", "/v1/watch?prefix=jobs/", nil)
		req.Host = loopbackHost
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		rec := serveRequest(h, req)
		if rec.Code != tc.status {
			// Not the GET then: a stream it answered would never end.
			t.Errorf("HEAD with Accept %q: HTTP %d, want %d", tc.accept, rec.Code, tc.status)
			continue
		}
		if tc.status == http.StatusOK {
			continue
		}
		req = httptest.NewRequest("GET", "/v1/watch?prefix=jobs/", nil)
		req.Host = loopbackHost
		req.Header.Set("Accept", tc.accept)
		rec = serveRequest(h, req)
		checkAnswer(t, "watch with Accept "+tc.accept, rec)
		if rec.Code != http.StatusNotAcceptable || !strings.Contains(rec.Body.String(), `"code":"invalid"`) {
			t.Errorf("GET with Accept %q: HTTP %d %s, want 406 invalid", tc.accept, rec.Code, rec.Body)
		}
	}
}

// TestWatchWithBodyRefused: a watch sent with a request body is 400, and
// takes no slot. A stream has no use for a body, and net/http reads what
// the handler left of one (to discard it) before the answer's first byte,
// so a body not sent whole left the stream unanswered, holding its slot
// and its backend watch (next test).
func TestWatchWithBodyRefused(t *testing.T) {
	_, hs := startServer(t, memtest.New(t), leasehttp.WithMaxWatchers(1))
	for _, tc := range []struct{ name, head, body string }{
		{"length", "Content-Length: 2\r\n", "{}"},
		{"chunked", "Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", hs.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /v1/watch?prefix=jobs/ HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"+tc.head+"\r\n"+tc.body); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			// No resp.Body.Close: it would read a stream to its end. The
			// body lives on c, which the deferred Close ends.
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("a watch with a body: HTTP %d %s, want 400", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			body, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(body), "body") {
				t.Errorf("the 400 says %s, want it to name the body", body)
			}
		})
	}
	// The refusals took no slot: the one watch allowed opens.
	st := openRaw(t, hs.URL+"/v1/watch?prefix=jobs/", "", http.StatusOK)
	st.expectSynced("1")
}

// TestWatchWithUnfinishedBodyDoesNotHoldUpShutdown: a watch whose body never
// arrives whole is answered 400 at once. It was not answered at all:
// net/http reads the rest of an unread body before the answer's head, so
// the stream's first flush waited for the body until the read deadline it
// had itself moved to the heartbeat plus the write timeout (2 h here, 45 s
// in lease serve), holding a watch slot all that time; Close cuts a
// stream's writes, not that read, so it held the server's Shutdown too.
func TestWatchWithUnfinishedBodyDoesNotHoldUpShutdown(t *testing.T) {
	// In a bubble, on pipes: the body that never comes blocks for good.
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, memtest.New(t), leasehttp.WithHeartbeat(time.Hour))
		hs := &http.Server{ReadTimeout: time.Hour, WriteTimeout: time.Hour}
		ln := servePipes(t, srv, hs)
		conn, err := ln.dial(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		answer := make(chan string, 1)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				answer <- err.Error()
				return
			}
			answer <- resp.Status
		}()
		if _, err := conn.Write([]byte("GET /v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{}")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case a := <-answer:
			if !strings.HasPrefix(a, "400 ") {
				t.Errorf("a watch with 2 of its 100 body bytes got %.80q, want 400", a)
			}
		default:
			t.Errorf("a watch with 2 of its 100 body bytes has no answer")
		}
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := hs.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v after %v, held by the stream waiting for its body", err, time.Since(start))
		}
	})
}
