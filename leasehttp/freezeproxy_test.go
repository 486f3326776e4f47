package leasehttp_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// freezeProxy forwards connections to an upstream until frozen: then it
// stops delivering bytes either way while keeping every connection open,
// as a hung peer or a blackholed network does. newFreezeProxy forwards
// loopback TCP; newPipeFreezeProxy pipes, for a synctest bubble.
type freezeProxy struct {
	ln       net.Listener
	upstream func() (net.Conn, error)

	mu       sync.Mutex
	frozen   chan struct{} // closed while thawed; open while frozen
	conns    []net.Conn
	stranded int // the connections accepted before strand: conns[:2*stranded]
	wg       sync.WaitGroup
}

func newFreezeProxy(t testing.TB, upstream string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startFreezeProxy(t, ln, func() (net.Conn, error) { return net.Dial("tcp", upstream) })
}

// newPipeFreezeProxy forwards the connections of its own pipeListener
// (its client) to pipes of upstream.
func newPipeFreezeProxy(t testing.TB, upstream *pipeListener) (*freezeProxy, *http.Client) {
	ln := newPipeListener()
	p := startFreezeProxy(t, ln, func() (net.Conn, error) { return upstream.dial(context.Background(), "", "") })
	return p, ln.client()
}

func startFreezeProxy(t testing.TB, ln net.Listener, upstream func() (net.Conn, error)) *freezeProxy {
	thawed := make(chan struct{})
	close(thawed)
	p := &freezeProxy{ln: ln, upstream: upstream, frozen: thawed}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's address as an http URL.
func (p *freezeProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *freezeProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := p.upstream()
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		i := len(p.conns) / 2
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(i, u, c) })
		p.wg.Go(func() { p.pipe(i, c, u) })
	}
}

// isStranded reports whether the i-th connection was open at strand.
func (p *freezeProxy) isStranded(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return i < p.stranded
}

// pipe copies src to dst, holding each chunk while the proxy is frozen;
// the i-th connection's.
func (p *freezeProxy) pipe(i int, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.isStranded(i) {
			if err != nil {
				return // the hang-up is not passed on either
			}
			continue // taken, as a peer's kernel buffers take it, and never delivered
		}
		if n > 0 {
			p.mu.Lock()
			gate := p.frozen
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			} else {
				dst.Close() // a pipe has no half-close: the hang-up is passed on whole
			}
			return
		}
	}
}

// freeze stops delivery until thaw; the connections stay open.
func (p *freezeProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = make(chan struct{})
}

// strand cuts the connections open now off for good without closing
// them, while new ones pass: what each side sends is taken (a peer's
// kernel acknowledges it) and never delivered, a hang-up included, as on
// a path that died under an established connection (a NAT or proxy that
// lost it, a client that moved networks) while a new connection takes
// another. Each side learns nothing until cutStranded.
func (p *freezeProxy) strand() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stranded = len(p.conns) / 2
}

// cutStranded closes the stranded connections, as the kernel does at last
// to a connection whose peer acknowledges nothing.
func (p *freezeProxy) cutStranded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns[:2*p.stranded] {
		c.Close()
	}
}

func (p *freezeProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.frozen:
	default:
		close(p.frozen)
	}
}

func (p *freezeProxy) close() {
	p.ln.Close()
	p.thaw()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
