package cli

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// limitListener keeps at most a fixed number of connections open, and one
// more accepted that waits for room. When a connection arrives at the limit
// it closes the connection idle the longest (a keep-alive between
// requests, whose client simply dials again) to make room; if none is
// idle, the new one waits until a connection closes, and clients after it
// wait in the kernel's backlog. So idle keep-alives cannot take every file
// descriptor, nor lock out new clients; what holds a connection otherwise
// is bounded by the read, write and idle timeouts and the max wait.
//
// Closing an idle connection races a request the client may be sending on
// it, as the server's own idle timeout does; that happens only at the limit.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one element per open connection
	idled     chan struct{} // a connection became idle (capacity 1)
	done      chan struct{} // closed by Close
	closeOnce sync.Once

	mu   sync.Mutex
	idle map[*limitConn]time.Time // connections between requests, and since when
}

func newLimitListener(l net.Listener, max int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, max), idled: make(chan struct{}, 1),
		done: make(chan struct{}), idle: map[*limitConn]time.Time{}}
}

// Accept waits for a connection, then for room for it.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := l.reserve(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &limitConn{Conn: c, l: l}, nil
}

// reserve takes a slot for a new connection, closing idle connections to
// free one.
func (l *limitListener) reserve() error {
	for {
		select {
		case l.slots <- struct{}{}:
			return nil
		default:
		}
		if c := l.takeOldestIdle(); c != nil {
			_ = c.Close() // frees its slot
			continue
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.idled:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// takeOldestIdle removes the connection idle the longest from the idle set
// and returns it, or nil if none is idle.
func (l *limitListener) takeOldestIdle() *limitConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest *limitConn
	var since time.Time
	for c, t := range l.idle {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	delete(l.idle, oldest)
	return oldest
}

// connState is the http.Server's ConnState hook: it keeps the idle set.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st != http.StateIdle {
		delete(l.idle, lc)
		return
	}
	l.idle[lc] = time.Now()
	select {
	case l.idled <- struct{}{}:
	default:
	}
}

// Close stops Accept, including one waiting for room.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l         *limitListener
	closeOnce sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
