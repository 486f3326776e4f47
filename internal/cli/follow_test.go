package cli

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// streaming is a command running in process whose output is read as it
// comes: lease watch, lease leader --watch.
type streaming struct {
	stdout, stderr *syncBuffer
	sigs           chan os.Signal
	done           chan int
}

// cliStream starts the lease command in process against b (nil: dialling
// the server its flags name over HTTP), with a signal channel of its own.
func cliStream(t *testing.T, b lease.Backend, args ...string) *streaming {
	t.Helper()
	s := &streaming{stdout: &syncBuffer{}, stderr: &syncBuffer{}, sigs: make(chan os.Signal, 1), done: make(chan int, 1)}
	a := &app{
		stdin:   strings.NewReader(""),
		stdout:  s.stdout,
		stderr:  s.stderr,
		getenv:  func(string) string { return "" },
		dial:    dialHTTP,
		signals: s.sigs,
	}
	if b != nil {
		a.dial = func(string, string, time.Duration) (lease.Backend, error) { return shared(b), nil }
	}
	go func() { s.done <- execute(newRoot(a), args, s.stderr) }()
	t.Cleanup(func() {
		select {
		case s.sigs <- os.Interrupt:
		default:
		}
		<-s.done
	})
	return s
}

// lines waits until stdout has n lines and returns them, failing t after
// patience or if the command ends first.
func (s *streaming) lines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		var out []string
		if text := s.stdout.String(); text != "" {
			out = strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		}
		if len(out) >= n {
			return out
		}
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("the command ended (exit %d) with %d lines of the %d awaited: %q; stderr %q", code, len(out), n, out, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines of the %d awaited after %v: %q; stderr %q", len(out), n, patience, out, s.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// interrupt sends SIGINT and returns the exit status.
func (s *streaming) interrupt(t *testing.T) int {
	t.Helper()
	s.sigs <- os.Interrupt
	return s.exit(t)
}

// exit waits for the command to end and returns its exit status.
func (s *streaming) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-s.done:
		s.done <- code // for the cleanup
		return code
	case <-time.After(patience):
		t.Fatalf("the command did not end within %v; stderr %q", patience, s.stderr.String())
		return -1
	}
}

// localBackends are the in-process backends the streaming commands are
// tested on, as `lease serve` would serve them.
var localBackends = []struct {
	name string
	open func(t *testing.T) lease.Backend
}{
	{"memstore", func(t *testing.T) lease.Backend { return memtest.New(t) }},
	{"boltstore", func(t *testing.T) lease.Backend {
		s, err := boltstore.Open(t.TempDir() + "/lease.db")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return boltOpen{s}
	}},
}

// boltOpen is a boltstore that the commands cannot close: several of them
// share it, as they would share a server.
type boltOpen struct{ *boltstore.Store }

func (boltOpen) Close() error { return nil }

// backendOnly hides every optional ability of a backend (wait, notify,
// watch).
type backendOnly struct{ lease.Backend }
