// Package deploy_test checks the operators' kit in deploy/ against the code:
// the alert rules with promtool, every metric the rules and the dashboard
// name against a real server's /metrics, the dashboard's shape, and the
// systemd unit against the real command line and systemd-analyze.
package deploy_test

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The lease binary, built once for the tests that run it.
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func leaseBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping a test that builds and runs the lease binary")
	}
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = errors.New("the go command is needed to build lease (put /usr/local/go/bin on PATH): " + err.Error())
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "lease-deploy-test-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "lease")
		out, err := exec.Command(goBin, "build", "-o", buildBin, "github.com/leasehq/lease/cmd/lease").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build lease: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// tool finds a program the kit is checked with, failing the test with an
// install hint when it is missing (skipping only under -short).
func tool(t *testing.T, name, hint string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping a test that runs %s", name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): %s", name, err, hint)
	}
	return path
}

// server is a running `lease serve`, its log lines readable as they come.
type server struct {
	cmd       *exec.Cmd
	listening string        // the log line saying where it listens
	changed   chan struct{} // a line came, or the log ended
	done      chan struct{} // the process exited

	mu    sync.Mutex
	lines []string
	ended bool
	next  int // the first line waitLine has not looked at
}

// startServe runs the lease binary with args and returns once it logs that
// it listens, with the address it got.
func startServe(t *testing.T, args ...string) (*server, string) {
	t.Helper()
	s := &server{cmd: exec.Command(leaseBinary(t), args...), changed: make(chan struct{}, 1), done: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
			s.notify()
		}
		_, _ = io.Copy(io.Discard, stderr)
		s.mu.Lock()
		s.ended = true
		s.mu.Unlock()
		s.notify()
		_ = s.cmd.Wait() // after reading to the end: Wait closes the pipe
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	s.listening = s.waitLine(t, "msg=listening", 30*time.Second)
	m := regexp.MustCompile(`addr=(\S+)`).FindStringSubmatch(s.listening)
	if m == nil {
		t.Fatalf("no addr= in %q", s.listening)
	}
	return s, m[1]
}

func (s *server) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// waitLine returns the next log line containing want, failing after within.
func (s *server) waitLine(t *testing.T, want string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		s.mu.Lock()
		for ; s.next < len(s.lines); s.next++ {
			if line := s.lines[s.next]; strings.Contains(line, want) {
				s.next++
				s.mu.Unlock()
				return line
			}
		}
		ended := s.ended
		s.mu.Unlock()
		if ended {
			t.Fatalf("lease serve ended before logging %q; its log:\n%s", want, s.logText())
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("lease serve did not log %q within %v; its log:\n%s", want, within, s.logText())
		}
	}
}

func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}
