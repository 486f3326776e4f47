package redisfence_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/fence/redisfence"
	"github.com/leasehq/lease/internal/testkit/redistest"
)

// replyLoser is a loopback proxy to a Redis server that loses the reply to
// the first EVALSHA it forwards: the server has run the script, and the
// client's connection is closed before the answer reaches it, as a network
// failure after the request would. go-redis then sends the same command
// again on a new connection (its retries, MaxRetries 3 by default).
type replyLoser struct {
	ln     net.Listener
	target string
	lost   atomic.Bool // the one reply has been lost
	wg     sync.WaitGroup
}

func newReplyLoser(t *testing.T, target string) *replyLoser {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyLoser{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *replyLoser) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		var evalSent atomic.Bool // an EVALSHA went to the server on this connection
		p.wg.Go(func() {
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
					if !p.lost.Load() && bytes.Contains(bytes.ToUpper(buf[:n]), []byte("EVALSHA")) {
						evalSent.Store(true)
					}
				}
				if err != nil {
					return
				}
			}
		})
		p.wg.Go(func() {
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if evalSent.Load() && p.lost.CompareAndSwap(false, true) {
						return // the script's answer, lost: close the client's side
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if !errors.Is(err, io.EOF) {
						_ = c.Close()
					}
					return
				}
			}
		})
	}
}

// TestSetWhoseReplyWasLost: a Set whose first answer is lost, and which
// the client therefore sends again, reports the write it made. Before, the
// repeat was judged as a new write: in Strict mode it was refused as stale
// (token 1, highest 1) although the value had been stored by the first.
func TestSetWhoseReplyWasLost(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newReplyLoser(t, srv.Addr)
			c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String()})
			defer c.Close()
			ctx := ctxFor(t)
			g, err := redisfence.New(ctx, c, redisfence.WithMode(mode), redisfence.WithPrefix(fresh()+":"))
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Set(ctx, "r", 1, "one"); err != nil {
				t.Errorf("Set token 1, its first answer lost: %v, want it written", err)
			}
			if !p.lost.Load() {
				t.Fatal("the proxy lost no answer: the test tested nothing")
			}
			if v, tok, err := g.Get(ctx, "r"); err != nil || v != "one" || tok != 1 {
				t.Fatalf("Get = %q, %d, %v; want one, 1", v, tok, err)
			}
			// Another call with the same token is a new write, judged by
			// the mode as before.
			err = g.Set(ctx, "r", 1, "one")
			if mode == fence.Strict && !errors.Is(err, lease.ErrStaleToken) {
				t.Errorf("a second Set with token 1 (%v): %v, want ErrStaleToken", mode, err)
			}
			if mode == fence.AtLeast && err != nil {
				t.Errorf("a second Set with token 1 (%v): %v, want it written", mode, err)
			}
		})
	}
}
