package leasehttp

import (
	"io"
	"net"
	"net/http"
	"time"
)

// lingerTime bounds how long closeAfterAnswer reads what a client still
// sends after its answer; it is net/http's own delay for the same purpose.
const lingerTime = 500 * time.Millisecond

// lingerMaxBytes bounds what closeAfterAnswer reads and drops.
const lingerMaxBytes = 256 << 10

// closeAfterAnswer ends the connection of a request answered before its
// body was read (an error answer, Connection: close). Closing at once
// while the client still sends its body leaves bytes unread, so the kernel
// answers them with a reset, and a reset can destroy the answer in the
// client's buffers before it reads it: the client sees a bare close where
// a 408 or 413 was sent. So the answer is sent, the connection half-closed
// (the client reads the answer and its end), and what still arrives is
// read and dropped for up to lingerTime before the close.
//
// It takes the connection over from net/http (http.Hijacker); where that is
// not possible (HTTP/2, a ResponseRecorder) net/http closes it as before.
func closeAfterAnswer(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		return
	}
	go linger(conn)
}

// linger half-closes c, drops what the client still sends for up to
// lingerTime, and closes it.
func linger(c net.Conn) {
	defer c.Close()
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, lingerMaxBytes))
}
