package leasehttp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// maxSSELine bounds one line of an event stream, and the data of one
// message: a lease event is a few KiB at most.
const maxSSELine = 64 << 10

// sseMessage is one message of a text/event-stream.
type sseMessage struct {
	event string // "message" when the message names none
	data  string
}

// sseReader parses a text/event-stream as the HTML standard's event stream
// interpretation does: lines end with CRLF, LF or CR; a leading BOM is
// dropped; lines starting with ':' are comments; a blank line dispatches
// the message, unless it has no data line; "data" lines join with LF;
// "id" and "retry" serve reconnecting, which the Client leaves to its
// caller, and fields it does not know are ignored. A message cut off by
// the end of the stream is dropped.
type sseReader struct {
	r      *bufio.Reader
	line   []byte
	skipLF bool // the last line ended with CR: an LF next is part of it
	first  bool // no line read yet: it may start with a BOM
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReader(r), first: true}
}

var errSSELineTooLong = fmt.Errorf("a line or message of the event stream is longer than %d bytes", maxSSELine)

// readLine returns the next line without its end; the slice is valid
// until the next call. The end of the stream before a line's end is
// io.EOF, since an unfinished line belongs to an unfinished message.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return s.line, nil
		case '\r':
			// Ends the line now, rather than after peeking at a next byte
			// that may come only with the next heartbeat.
			s.skipLF = true
			return s.line, nil
		}
		if len(s.line) >= maxSSELine {
			return nil, errSSELineTooLong
		}
		s.line = append(s.line, b)
	}
}

var bom = []byte("\xef\xbb\xbf")

// next returns the next message that has data.
func (s *sseReader) next() (sseMessage, error) {
	var (
		event   string
		data    []byte
		hasData bool
	)
	for {
		line, err := s.readLine()
		if err != nil {
			return sseMessage{}, err
		}
		if s.first {
			s.first = false
			line = bytes.TrimPrefix(line, bom)
		}
		if len(line) == 0 {
			if !hasData {
				event = "" // a message without data is not dispatched
				continue
			}
			if event == "" {
				event = "message"
			}
			return sseMessage{event: event, data: string(data)}, nil
		}
		if line[0] == ':' {
			continue // a comment: heartbeats
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(name) {
		case "event":
			event = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			if len(data)+len(value) > maxSSELine {
				return sseMessage{}, errSSELineTooLong
			}
			data = append(data, value...)
			hasData = true
		}
	}
}
