package cli

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// These tests talk to `lease serve` (NewServer and Run on port 0) over raw
// sockets, as slow, idle and misdirected clients do. Their bounds are
// generous: they check that a connection is cut or answered at all, not
// how quickly.

// patience bounds every wait for the server to act.
const patience = 10 * time.Second

// dialServe opens a raw connection to s, closed when the test ends.
func dialServe(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), patience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// send writes raw bytes to c.
func send(t *testing.T, c net.Conn, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
}

// readAnswer reads one HTTP answer from r, waiting up to d.
func readAnswer(c net.Conn, r *bufio.Reader, d time.Duration) (*http.Response, string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// waitClosed waits up to patience for the server to close c, reading and
// dropping whatever it still sends.
func waitClosed(t *testing.T, c net.Conn, r io.Reader, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open for %v", what, patience)
	}
}

// healthz is a keep-alive request that needs no body.
const healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

// TestServeCutsTrickledBody: a client sending its body a byte at a time is
// answered 408 and cut off at the read timeout, not held open while it
// trickles on.
func TestServeCutsTrickledBody(t *testing.T) {
	cfg := serveConfig(t, io.Discard)
	cfg.ReadTimeout = 200 * time.Millisecond
	s := startServe(t, cfg)
	c := dialServe(t, s)
	send(t, c, "POST /v1/leases/k/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Content-Length: 10000\r\n\r\n{")
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return // cut off
				}
			}
		}
	}()
	defer func() { close(stop); <-trickled }()

	r := bufio.NewReader(c)
	resp, body, err := readAnswer(c, r, patience)
	if err != nil {
		t.Fatalf("no answer to the trickled body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, `"code":"invalid"`) {
		t.Errorf("HTTP %d %s, want 408 with code invalid", resp.StatusCode, body)
	}
	waitClosed(t, c, r, "after the 408")
}

// TestServeAnswers401BeforeBody: an unauthenticated request is refused when
// its headers arrive, without waiting for a body that may never come.
func TestServeAnswers401BeforeBody(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ops-token *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig(t, io.Discard)
	cfg.AuthTokensFile = tokens
	cfg.ReadTimeout = time.Hour // so that only the 401 can end the request
	s := startServe(t, cfg)
	for _, auth := range []string{"", "Authorization: Bearer wrong\r\n"} {
		c := dialServe(t, s)
		send(t, c, "POST /v1/leases/k/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
			auth+"Content-Length: 100\r\n\r\n{")
		r := bufio.NewReader(c)
		resp, body, err := readAnswer(c, r, patience)
		if err != nil {
			t.Fatalf("%q: no answer while the body is incomplete: %v", auth, err)
		}
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthorized"`) {
			t.Errorf("%q: HTTP %d %s, want 401 unauthorized", auth, resp.StatusCode, body)
		}
		waitClosed(t, c, r, "after the 401")
	}
}

// TestServeClosesIdleConnections: a keep-alive connection is closed after
// the idle timeout.
func TestServeClosesIdleConnections(t *testing.T) {
	cfg := serveConfig(t, io.Discard)
	cfg.IdleTimeout = 200 * time.Millisecond
	s := startServe(t, cfg)
	c := dialServe(t, s)
	send(t, c, healthz)
	r := bufio.NewReader(c)
	if resp, body, err := readAnswer(c, r, patience); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v %s", err, resp, body)
	}
	waitClosed(t, c, r, "idle")
}

// TestServeMaxConnectionsBoundsIdle: past --max-connections, a new client is
// served by closing an idle connection, so idle keep-alives hold at most the
// limit, and every client is served.
func TestServeMaxConnectionsBoundsIdle(t *testing.T) {
	const max, clients = 4, 20
	cfg := serveConfig(t, io.Discard)
	cfg.MaxConnections = max
	s := startServe(t, cfg)
	conns := make([]net.Conn, clients)
	readers := make([]*bufio.Reader, clients)
	for i := range conns {
		conns[i] = dialServe(t, s)
		readers[i] = bufio.NewReader(conns[i])
		send(t, conns[i], healthz)
		if resp, body, err := readAnswer(conns[i], readers[i], patience); err != nil || resp.StatusCode != 200 {
			t.Fatalf("client %d of %d: %v %s; want it served", i+1, clients, err, body)
		}
	}
	// A connection is closed to make room before the new one is served, so
	// now exactly max are open: they answer again, the others are closed.
	served := 0
	for i, c := range conns {
		_, _ = io.WriteString(c, healthz) // fails or not, depending on how the close went
		resp, _, err := readAnswer(c, readers[i], patience)
		var ne net.Error
		switch {
		case err == nil && resp.StatusCode == 200:
			served++
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("client %d: neither served nor closed within %v", i+1, patience)
		}
	}
	if served != max {
		t.Errorf("%d of %d idle connections still served, want the limit, %d", served, clients, max)
	}
}

// TestServeMaxConnectionsKeepsBusy: connections in the middle of a request
// are not closed to make room; a client past the limit waits until one
// ends.
func TestServeMaxConnectionsKeepsBusy(t *testing.T) {
	const max = 3
	cfg := serveConfig(t, io.Discard)
	cfg.MaxConnections = max
	s := startServe(t, cfg)
	busy := make([]net.Conn, max)
	for i := range busy {
		busy[i] = dialServe(t, s)
		// Headers and part of the body: the request is in progress.
		send(t, busy[i], "POST /v1/leases/k/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
			"Content-Length: 100\r\n\r\n{")
	}
	extra := dialServe(t, s) // the kernel accepts it; the server does not yet
	send(t, extra, healthz)
	r := bufio.NewReader(extra)
	// A correct server never answers here; 300 ms is only how long the
	// test looks.
	if resp, body, err := readAnswer(extra, r, 300*time.Millisecond); err == nil {
		t.Fatalf("a connection past the limit was served (HTTP %d %s) while %d requests were in progress", resp.StatusCode, body, max)
	}
	_ = busy[0].Close()
	if resp, body, err := readAnswer(extra, r, patience); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a busy connection closed: %v %s; want the waiting client served", err, body)
	}
}

// TestServeWaitOutlastsTimeouts: an acquire waiting for a held key is not
// cut by the read or write timeout; its wait_ms is added to both. Both
// waits here end on the server's clock well after both timeouts.
func TestServeWaitOutlastsTimeouts(t *testing.T) {
	cfg := serveConfig(t, io.Discard)
	cfg.ReadTimeout, cfg.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	s := startServe(t, cfg)
	base := "http://" + s.Addr()
	holder := httpClient(t, base)
	if _, err := holder.Acquire(t.Context(), "held", "holder", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Acquire(t.Context(), "expiring", "holder", 800*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	type waiter struct {
		key, waitMS string
		status      int
		owner       string
		c           net.Conn
	}
	waiters := []*waiter{
		{key: "held", waitMS: "800", status: http.StatusConflict, owner: "holder"}, // the wait runs out: held, naming the holder
		{key: "expiring", waitMS: "20000", status: http.StatusOK, owner: "waiter"}, // the holder's lease expires: granted
	}
	for _, w := range waiters { // both wait at once
		w.c = dialServe(t, s)
		body := `{"owner":"waiter","ttl_ms":60000,"wait_ms":` + w.waitMS + `}`
		send(t, w.c, "POST /v1/leases/"+w.key+"/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
			"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	}
	for _, w := range waiters {
		resp, answer, err := readAnswer(w.c, bufio.NewReader(w.c), patience)
		if err != nil {
			t.Fatalf("%s: the wait was cut: %v", w.key, err)
		}
		if resp.StatusCode != w.status || !strings.Contains(answer, `"owner":"`+w.owner+`"`) {
			t.Errorf("%s: HTTP %d %s, want %d naming owner %s", w.key, resp.StatusCode, answer, w.status, w.owner)
		}
	}
}

// TestServeRefusesMisdirectedHost: without credentials, lease serve answers
// /v1 only for loopback Hosts, the host of --addr and --allowed-hosts; a
// request under another name (a web page after DNS rebinding) is 403 and
// takes no lease.
func TestServeRefusesMisdirectedHost(t *testing.T) {
	cfg := serveConfig(t, io.Discard)
	cfg.AllowedHosts = []string{"lease.internal"}
	s := startServe(t, cfg)
	_, port, _ := net.SplitHostPort(s.Addr())
	for _, tc := range []struct {
		host   string
		status int
	}{
		{"attacker.example:7420", http.StatusForbidden},
		{"attacker.example:" + port, http.StatusForbidden},
		{"localhost:" + port, http.StatusOK},
		{"127.0.0.1:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"lease.internal:" + port, http.StatusOK},
	} {
		c := dialServe(t, s)
		key := "k" + strings.NewReplacer(":", "-", "[", "", "]", "").Replace(tc.host)
		body := `{"owner":"page","ttl_ms":60000}`
		send(t, c, "POST /v1/leases/"+key+"/acquire HTTP/1.1\r\nHost: "+tc.host+"\r\nContent-Type: application/json\r\n"+
			"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		resp, answer, err := readAnswer(c, bufio.NewReader(c), patience)
		if err != nil {
			t.Fatalf("Host %s: %v", tc.host, err)
		}
		if resp.StatusCode != tc.status {
			t.Errorf("Host %s: HTTP %d %s, want %d", tc.host, resp.StatusCode, answer, tc.status)
		}
		if tc.status == http.StatusForbidden && !strings.Contains(answer, `"code":"forbidden"`) {
			t.Errorf("Host %s: %s, want code forbidden", tc.host, answer)
		}
	}
	// The refused requests took nothing.
	ls, err := httpClient(t, "http://"+s.Addr()).List(t.Context(), "kattacker", lease.Page{})
	if err != nil || len(ls.Leases) != 0 {
		t.Errorf("leases taken under a foreign Host: %v, %v", ls, err)
	}
}
