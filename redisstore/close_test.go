package redisstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/redisstore"
)

// silentProxy forwards TCP connections to a server until silence, from
// when on it drops every byte both ways without closing a connection, as a
// link whose packets are lost does (no FIN, no RST): a call in flight then
// waits for a reply that never comes.
type silentProxy struct {
	t      testing.TB
	l      net.Listener
	target string

	mu      sync.Mutex
	silent  bool
	sent    []byte // what clients sent through before
	dropped []byte // what clients sent while silent
	replies int    // bytes servers sent while silent
	conns   []net.Conn
	wg      sync.WaitGroup
}

func newSilentProxy(t testing.TB, target string) *silentProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{t: t, l: l, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *silentProxy) Addr() string { return p.l.Addr().String() }

func (p *silentProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c, true) })
		p.wg.Go(func() { p.pipe(c, s, false) })
	}
}

// pipe copies from src to dst until either closes, dropping what it reads
// while the proxy is silent (and keeping what a client sent then).
func (p *silentProxy) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			silent := p.silent
			switch {
			case silent && fromClient:
				p.dropped = append(p.dropped, buf[:n]...)
			case silent:
				p.replies += n
			case fromClient:
				p.sent = append(p.sent, buf[:n]...)
			}
			p.mu.Unlock()
			if !silent {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// silence makes every link through the proxy silent, from now on.
func (p *silentProxy) silence() {
	p.mu.Lock()
	p.silent = true
	p.mu.Unlock()
}

// sentCount returns how many times clients sent s through the proxy
// before it went silent.
func (p *silentProxy) sentCount(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Count(bytes.ToUpper(p.sent), []byte(s))
}

// droppedAny reports whether the proxy has dropped anything since it went
// silent: a request, or the reply to one sent before.
func (p *silentProxy) droppedAny() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dropped) > 0 || p.replies > 0
}

func (p *silentProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestCloseOnSilentLink: Close returns at once when the link to the server
// goes silent (packets dropped, the connection left open) while a re-check
// of the persistence settings is in flight, whether the Store made its
// client (Open) or was given one (New), and leaves no goroutine behind
// (TestMain's goleak). Before, Close cancelled the check's context, which
// go-redis does not watch while it reads a reply, and waited for the check
// until the client's read timeout: 30 s here, 5 s by default.
func TestCloseOnSilentLink(t *testing.T) {
	srv := redistest.Start(t)
	// A read timeout far above the bound: a Close that waits for the
	// stuck CONFIG GET cannot pass by luck.
	const readTimeout = 30 * time.Second
	// settings is how many CONFIG GETs a check sends (durable.go).
	const settings = 5
	type storeFunc = func(t *testing.T, addr string) *redisstore.Store
	var cases []struct {
		name  string
		store storeFunc
		early bool // silent before a re-check has made its connection
	}
	for _, c := range []struct {
		name  string
		store storeFunc
	}{
		{"Open", func(t *testing.T, addr string) *redisstore.Store {
			s, err := redisstore.Open(ctxFor(t), "redis://"+addr+"/0?read_timeout="+readTimeout.String(),
				redisstore.WithNamespace(testNamespace()), redisstore.RecheckEvery(recheckEvery))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"New", func(t *testing.T, addr string) *redisstore.Store {
			c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(c, redisstore.WithNamespace(testNamespace()), redisstore.RecheckEvery(recheckEvery))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		for _, early := range []bool{false, true} {
			name := c.name
			if early {
				name += ", silent from the start"
			}
			cases = append(cases, struct {
				name  string
				store storeFunc
				early bool
			}{name, c.store, early})
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newSilentProxy(t, srv.Addr)
			s := tc.store(t, p.Addr())
			t.Cleanup(func() { _ = s.Close() })
			if !tc.early {
				// A re-check has run (New's check sent one CONFIG GET a
				// setting, so did it): its connection is up.
				poll.Until(t, 10*time.Second, func() error {
					if n := p.sentCount("CONFIG"); n < 2*settings {
						return fmt.Errorf("%d CONFIG GETs sent, want New's and a re-check's, %d", n, 2*settings)
					}
					return nil
				})
			}
			p.silence()
			// A re-check is stuck in the silence: its CONFIG GET (or the
			// HELLO of the connection it is setting up) was dropped, or
			// the reply to one sent just before.
			poll.Until(t, 10*time.Second, func() error {
				if !p.droppedAny() {
					return errors.New("nothing dropped since the link went silent")
				}
				return nil
			})
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- s.Close() }()
			const bound = time.Second
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
				t.Logf("Close took %v", time.Since(start))
			case <-time.After(bound):
				err := <-done // for goleak: the old code returns after readTimeout
				t.Fatalf("Close on a silent link took %v (err %v), want under %v", time.Since(start).Round(time.Millisecond), err, bound)
			}
		})
	}
}
