package cli

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// limitListener keeps at most max connections open in total, and at most
// perAddr from one client address; 0 turns either limit off. When a
// connection arrives at a limit, it closes one that does nothing to make
// room: first the one waiting longest for its first request's headers, if
// for more than incompleteGrace (an incomplete connection: a client
// trickling its headers, or sending nothing, to hold the slot), then the
// one idle the longest (a keep-alive between requests, whose client simply
// dials again), then the one incomplete the longest. If none is
// incomplete or idle, a connection over the total limit waits until one
// closes, and clients after it wait in the kernel's backlog; one over its
// address's limit is closed at once, so that one address cannot hold the
// listener up either. So neither idle keep-alives nor slow or silent
// clients can take every slot and lock out the others, and one address
// cannot take more than its share; what holds a connection otherwise is
// bounded by the read, write and idle timeouts and the max wait.
//
// Closing an idle connection races a request the client may be sending on
// it, as the server's own idle timeout does; that happens only at a limit.
type limitListener struct {
	net.Listener
	max, perAddr int
	room         chan struct{} // a connection closed or became idle (capacity 1)
	done         chan struct{} // closed by Close
	closeOnce    sync.Once

	mu     sync.Mutex
	conns  map[*limitConn]struct{} // every open connection
	byAddr map[string]int          // open connections per client address
}

// incompleteGrace is how long a connection may wait for its first
// request's headers before it is closed ahead of idle ones. A client that
// has just connected is still in its TLS handshake, or its headers are one
// round trip away: closing it first would let new clients at the limit
// close each other while idle keep-alives sit.
const incompleteGrace = time.Second

// connPhase is where a connection is in its life, as far as making room
// goes.
type connPhase int

const (
	phaseIncomplete connPhase = iota // accepted, its first request's headers not all read
	phaseBusy                        // in a request, or taken over by a handler
	phaseIdle                        // between requests
)

func newLimitListener(l net.Listener, max, perAddr int) *limitListener {
	if max > 0 && perAddr >= max {
		perAddr = 0 // the total limit is the tighter: an address may wait for room like any other
	}
	return &limitListener{Listener: l, max: max, perAddr: perAddr,
		room: make(chan struct{}, 1), done: make(chan struct{}),
		conns: map[*limitConn]struct{}{}, byAddr: map[string]int{}}
}

// Accept waits for a connection, then for room for it. A connection over
// its address's limit, with nothing of that address to close, is closed
// and the next one accepted.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, err := l.admit(c)
		switch {
		case err != nil:
			_ = c.Close()
			return nil, err
		case lc == nil:
			_ = c.Close()
			continue
		}
		return lc, nil
	}
}

// admit makes room for c under both limits, closing other connections if
// it must, and returns it wrapped; nil if its address is at its limit with
// nothing to close.
func (l *limitListener) admit(c net.Conn) (*limitConn, error) {
	addr := clientAddr(c)
	for {
		l.mu.Lock()
		if l.perAddr > 0 && l.byAddr[addr] >= l.perAddr {
			victim := l.victimLocked(addr)
			l.mu.Unlock()
			if victim == nil {
				return nil, nil
			}
			_ = victim.Close() // frees its slot
			continue
		}
		if l.max == 0 || len(l.conns) < l.max {
			lc := &limitConn{Conn: c, l: l, addr: addr, phase: phaseIncomplete, since: time.Now()}
			l.conns[lc] = struct{}{}
			l.byAddr[addr]++
			l.mu.Unlock()
			return lc, nil
		}
		victim := l.victimLocked("")
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
			continue
		}
		select {
		case <-l.room:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
}

// victimLocked returns the connection to close to make room: the one
// incomplete the longest if for more than incompleteGrace, else the one
// idle the longest, else the one incomplete the longest; among addr's
// connections only, unless addr is empty. nil if none is incomplete or
// idle.
func (l *limitListener) victimLocked(addr string) *limitConn {
	slow := time.Now().Add(-incompleteGrace)
	rank := func(c *limitConn) int {
		switch {
		case c.phase == phaseIncomplete && c.since.Before(slow):
			return 0
		case c.phase == phaseIdle:
			return 1
		default:
			return 2
		}
	}
	var victim *limitConn
	for c := range l.conns {
		if addr != "" && c.addr != addr || c.phase == phaseBusy {
			continue
		}
		if victim == nil || rank(c) < rank(victim) || rank(c) == rank(victim) && c.since.Before(victim.since) {
			victim = c
		}
	}
	if victim != nil {
		victim.phase = phaseBusy // chosen: not chosen again while it closes
	}
	return victim
}

// connState is the http.Server's ConnState hook: it keeps each
// connection's phase.
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
	switch st {
	case http.StateNew:
		return // incomplete since it was accepted
	case http.StateIdle:
		lc.phase, lc.since = phaseIdle, time.Now()
		l.signalRoom()
	default: // active, hijacked, closed
		lc.phase = phaseBusy
	}
}

// signalRoom wakes an admit waiting for room.
func (l *limitListener) signalRoom() {
	select {
	case l.room <- struct{}{}:
	default:
	}
}

// Close stops Accept, including one waiting for room.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// clientAddr is the address a connection's limit is counted under: the
// client's IP address.
func clientAddr(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l         *limitListener
	addr      string
	closeOnce sync.Once

	// Guarded by l.mu.
	phase connPhase
	since time.Time // when it became incomplete or idle
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		if c.l.byAddr[c.addr]--; c.l.byAddr[c.addr] == 0 {
			delete(c.l.byAddr, c.addr)
		}
		c.l.signalRoom()
		c.l.mu.Unlock()
	})
	return err
}

// CloseWrite half-closes the connection, as net/http does before its
// final close so that the client reads the whole answer; without it
// net/http could not reach the TCP connection's.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
