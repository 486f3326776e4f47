package leasehttp

import (
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
)

// referenceSSE parses a whole event stream the plain way, straight from
// the HTML standard's wording: split into lines at CRLF, CR or LF, then
// process each line. sseReader, which reads byte by byte as the stream
// arrives, must agree with it.
func referenceSSE(stream string) []sseMessage {
	stream = strings.TrimPrefix(stream, "\ufeff")
	lines := regexp.MustCompile("\r\n|\r|\n").Split(stream, -1)
	lines = lines[:len(lines)-1] // what follows the last line end is unfinished
	var (
		out   []sseMessage
		event string
		data  string
	)
	for _, line := range lines {
		if line == "" {
			if data == "" {
				event = ""
				continue
			}
			if event == "" {
				event = "message"
			}
			out = append(out, sseMessage{event: event, data: strings.TrimSuffix(data, "\n")})
			event, data = "", ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, found := strings.Cut(line, ":")
		if found {
			value = strings.TrimPrefix(value, " ")
		}
		switch name {
		case "event":
			event = value
		case "data":
			data += value + "\n"
		}
	}
	return out
}

// readAll reads every message of stream through r's reader.
func readAllSSE(r io.Reader) ([]sseMessage, error) {
	sr := newSSEReader(r)
	var out []sseMessage
	for {
		m, err := sr.next()
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, stream string
		want         []sseMessage
	}{
		{"lf", "id: 1\nevent: held\ndata: {}\n\n", []sseMessage{{"held", "{}"}}},
		{"crlf", "id: 1\r\nevent: held\r\ndata: {}\r\n\r\n", []sseMessage{{"held", "{}"}}},
		{"cr", "event: held\rdata: {}\r\r", []sseMessage{{"held", "{}"}}},
		{"mixed", "event: a\r\ndata: 1\rdata: 2\n\r\nevent: b\ndata:3\n\n", []sseMessage{{"a", "1\n2"}, {"b", "3"}}},
		{"multi-line data", "data: {\"key\":\ndata: \"k\"}\n\n", []sseMessage{{"message", "{\"key\":\n\"k\"}"}}},
		{"comments", ": hello\n: ping\n\nevent: x\n: inside\ndata: y\n\n", []sseMessage{{"x", "y"}}},
		{"bom", "\ufeffevent: x\ndata: y\n\n", []sseMessage{{"x", "y"}}},
		{"no space", "event:x\ndata:  y\n\n", []sseMessage{{"x", " y"}}},
		{"field without colon", "data\n\n", []sseMessage{{"message", ""}}},
		{"no data, not dispatched", "event: x\nid: 3\n\ndata: y\n\n", []sseMessage{{"message", "y"}}},
		{"unknown fields", "retry: 10\nfoo: bar\nevent: x\ndata: y\n\n", []sseMessage{{"x", "y"}}},
		{"unfinished at the end", "event: x\ndata: y\n\nevent: z\ndata: w\n", []sseMessage{{"x", "y"}}},
		{"cr lf split across messages", "data: a\r\r\ndata: b\r\n\r\n", []sseMessage{{"message", "a"}, {"message", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if ref := referenceSSE(tc.stream); !equalMessages(ref, tc.want) {
				t.Fatalf("the reference reads %q, the test wants %q", ref, tc.want)
			}
			// Whole, and one byte per read: a CR at the end of a read
			// must not wait for the next byte, nor be read twice.
			for _, r := range []io.Reader{strings.NewReader(tc.stream), iotest.OneByteReader(strings.NewReader(tc.stream))} {
				got, err := readAllSSE(r)
				if !errors.Is(err, io.EOF) {
					t.Fatalf("ends with %v, want io.EOF", err)
				}
				if !equalMessages(got, tc.want) {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// TestSSEReaderDispatchesOnCR: a message whose last line ends with a lone
// CR is dispatched as soon as that CR arrives, before any next byte.
func TestSSEReaderDispatchesOnCR(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() { _, _ = pw.Write([]byte("event: x\rdata: y\r\r")) }() // then nothing
	m, err := newSSEReader(pr).next()
	if err != nil || m != (sseMessage{"x", "y"}) {
		t.Fatalf("got %q, %v; want the message at once", m, err)
	}
}

func TestSSEReaderBoundsLines(t *testing.T) {
	for _, stream := range []string{
		"data: " + strings.Repeat("x", maxSSELine) + "\n\n",
		strings.Repeat("data: "+strings.Repeat("x", 1000)+"\n", maxSSELine/1000+1) + "\n",
	} {
		if _, err := readAllSSE(strings.NewReader(stream)); !errors.Is(err, errSSELineTooLong) {
			t.Errorf("a %d-byte stream: %v, want errSSELineTooLong", len(stream), err)
		}
	}
}

func equalMessages(a, b []sseMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzSSEReader holds sseReader to the reference on any stream.
func FuzzSSEReader(f *testing.F) {
	f.Add("id: 1\r\nevent: held\r\ndata: {}\r\n\r\n")
	f.Add("\ufeff: c\rdata\r\rdata: a\ndata:b\r\n\n")
	f.Fuzz(func(t *testing.T, stream string) {
		if len(stream) > maxSSELine {
			return // the reference has no bound
		}
		got, err := readAllSSE(iotest.OneByteReader(strings.NewReader(stream)))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("ends with %v, want io.EOF", err)
		}
		if want := referenceSSE(stream); !equalMessages(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}
