package cli

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// TestRunExitStatusTellsConfigurationFromTryLater: 75 (EX_TEMPFAIL) tells
// a cron wrapper to try again later, which fixes a held key or a server
// that is down, but never refused credentials or a URL that leads to
// something other than a lease server: those exit 1, and the command does
// not run either way.
func TestRunExitStatusTellsConfigurationFromTryLater(t *testing.T) {
	api, err := leasehttp.NewServer(memtest.New(t), leasehttp.WithLogger(slog.New(slog.DiscardHandler)),
		leasehttp.WithCredentials([]leasehttp.Credential{{Token: "jobs-token", Prefixes: []string{"jobs/"}}}))
	if err != nil {
		t.Fatal(err)
	}
	withAuth := httptest.NewServer(api)
	t.Cleanup(func() {
		_ = api.Close()
		withAuth.Close()
	})
	// A URL that reaches a web server, not a lease server, and a proxy
	// whose lease server is down.
	notLease := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notLease.Close)
	badGateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "502 bad gateway", http.StatusBadGateway)
	}))
	t.Cleanup(badGateway.Close)

	for _, tc := range []struct {
		name, server, token, key string
		want                     int
	}{
		{"no token", withAuth.URL, "", "jobs/nightly", ExitFailure},
		{"unknown token", withAuth.URL, "wrong-token", "jobs/nightly", ExitFailure},
		{"key outside the token's prefixes", withAuth.URL, "jobs-token", "other/nightly", ExitFailure},
		{"not a lease server", notLease.URL, "", "jobs/nightly", ExitFailure},
		{"lease server behind the proxy down", badGateway.URL, "", "jobs/nightly", ExitTempFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "child")
			childEnviron(t, "term", file, 0)
			r := cliHTTP(t, map[string]string{EnvServer: tc.server, EnvAuthToken: tc.token}, nil,
				runArgs(t, tc.key, "--timeout", "5s")...)
			if r.code != tc.want {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, tc.want, r.stderr)
			}
			oneErrorLine(t, r, "not running")
			if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the command ran without the lease (%v)", err)
			}
		})
	}
	// And the key held, the test of a cron job that must not run twice.
	c := httpClient(t, withAuth.URL, leasehttp.WithAuthToken("jobs-token"))
	if _, err := c.Acquire(t.Context(), "jobs/held", "other-host", time.Minute); err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	r := cliHTTP(t, map[string]string{EnvServer: withAuth.URL, EnvAuthToken: "jobs-token"}, nil, runArgs(t, "jobs/held")...)
	if r.code != ExitTempFail || r.stdout != "" {
		t.Errorf("held: exit %d stdout %q, want %d and no command", r.code, r.stdout, ExitTempFail)
	}
}

// stallingProxy forwards TCP connections to a server until stall is
// called, and from then on is a server that has stopped answering (stopped
// with SIGSTOP, or its host hung): requests on open connections and new
// connections are taken and never answered.
type stallingProxy struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu      sync.Mutex
	stalled bool
	conns   []net.Conn
}

func newStallingProxy(t *testing.T, upstream string) *stallingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallingProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *stallingProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

func (p *stallingProxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// keep records c to be closed at the end of the test.
func (p *stallingProxy) keep(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *stallingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.keep(c)
		if p.isStalled() {
			continue // taken, never answered
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.keep(up)
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst until src ends, and drops what it reads once the
// proxy has stalled; a connection that ends then is not passed on either.
func (p *stallingProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isStalled() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.isStalled() {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *stallingProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestRunExitsWithinGraceWhenTheServerHangs: when the server stops
// answering, the lease is lost, CMD gets SIGTERM and exits, and lease run
// must exit within --grace of the loss. Its final release is bounded by
// what is left of the lease (and of the grace period), not by --timeout,
// which is set to a minute here: a release waiting on a hung server for
// --timeout, or for the HTTP client's own 10 s per request, would keep a
// cron slot (and the next run) waiting for nothing, since the lease expires
// meanwhile anyway.
func TestRunExitsWithinGraceWhenTheServerHangs(t *testing.T) {
	srv := startServe(t, serveConfig(t, io.Discard))
	proxy := newStallingProxy(t, srv.Addr())
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 0)
	// Grace and TTL of a few seconds: a child built with -race sleeps a
	// second as it exits (GORACE atexit_sleep_ms).
	const grace = 3 * time.Second
	done := make(chan result, 1)
	go func() {
		done <- cliHTTP(t, map[string]string{EnvServer: proxy.URL()}, nil,
			runArgs(t, "nightly", "--ttl", "3s", "--grace", grace.String(), "--timeout", "1m")...)
	}()
	waitFile(t, file, "ready", 20*time.Second)
	proxy.stall()
	waitFile(t, file, "term ", 20*time.Second)
	// The bound is the documented one, with slack for a loaded machine:
	// lease run exits within --grace of the loss.
	const slack = 5 * time.Second
	var r result
	select {
	case r = <-done:
	case <-time.After(grace + slack):
		t.Errorf("lease run still running %v after the loss (--grace %v)", grace+slack, grace)
		r = <-done
	}
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, ExitTempFail, r.stderr)
	}
	if !strings.Contains(r.stderr, "lost") {
		t.Errorf("stderr %q does not say the lease was lost", r.stderr)
	}
}
