package crashtest

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/serverproc"
)

// BuildLease builds cmd/lease into a temporary directory of t and returns
// the binary's path.
func BuildLease(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build lease: %v (put /usr/local/go/bin on PATH)", err)
	}
	bin := filepath.Join(t.TempDir(), "lease")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/leasehq/lease/cmd/lease")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build lease: %v\n%s", err, out)
	}
	return bin
}

// ErrExited is matched by StartServe's error when the server exited before
// it was ready: its Serve is returned beside it, to be asked how and why.
var ErrExited = errors.New("crashtest: lease serve exited before it was ready")

// Serve is one `lease serve` child process, started by StartServe on a
// loopback port of its choosing, in a process group of its own that the
// parent-death signal kills with this test binary.
type Serve struct {
	// URL is http://host:port once the server listens.
	URL string

	proc *serverproc.Process
	out  *lineLog
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// StartServe starts `bin serve` on dataDir with flags and waits up to
// within for it to answer /readyz with 200. If it exits first, it returns
// the Serve and an error matching ErrExited; on any other error it has
// killed the server.
func StartServe(bin, dataDir string, within time.Duration, flags ...string) (*Serve, error) {
	start := time.Now()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir}, flags...)...)
	s := &Serve{out: &lineLog{addr: make(chan string, 1)}}
	cmd.Stderr = s.out
	p, err := serverproc.Start(cmd, nil, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	s.proc = p
	select {
	case a := <-s.out.addr:
		s.URL = "http://" + a
	case <-p.Exited():
		return s, ErrExited
	case <-time.After(within):
		s.Kill()
		return nil, fmt.Errorf("crashtest: lease serve not listening %v after start:\n%s", within, s.Log())
	}
	if err := p.WaitReady(within-time.Since(start), s.ready); err != nil {
		select {
		case <-p.Exited():
			return s, ErrExited
		default:
		}
		s.Kill()
		return nil, fmt.Errorf("crashtest: lease serve not ready within %v: %v\n%s", within, err, s.Log())
	}
	return s, nil
}

// ready asks /readyz once.
func (s *Serve) ready() error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(s.URL + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: status %d", resp.StatusCode)
	}
	return nil
}

// Exited is closed once the server has exited and its stderr is read.
func (s *Serve) Exited() <-chan struct{} { return s.proc.Exited() }

// ExitCode is the server's exit status once Exited is closed, -1 if a
// signal ended it.
func (s *Serve) ExitCode() int {
	var ee *exec.ExitError
	if err := s.proc.Err(); errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		return -1
	}
	return 0
}

// Kill sends SIGKILL and waits for the server to be gone.
func (s *Serve) Kill() {
	_ = s.proc.Signal(syscall.SIGKILL)
	<-s.proc.Exited()
}

// Stop asks for a graceful shutdown (SIGINT) and checks that the server
// ends by itself within grace, with status 0.
func (s *Serve) Stop(grace time.Duration) error {
	if err := s.proc.Stop(syscall.SIGINT, grace, syscall.SIGKILL); err != nil {
		return fmt.Errorf("%v:\n%s", err, s.Log())
	}
	if code := s.ExitCode(); code != 0 {
		return fmt.Errorf("crashtest: lease serve exited %d after SIGINT:\n%s", code, s.Log())
	}
	return nil
}

// Log is what the server has written to stderr so far.
func (s *Serve) Log() string { return strings.Join(s.Lines(), "\n") }

// Lines are the lines the server has written to stderr so far.
func (s *Serve) Lines() []string {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	lines := append([]string(nil), s.out.lines...)
	if s.out.part != "" {
		lines = append(lines, s.out.part)
	}
	return lines
}

// lineLog keeps a process's stderr as lines and hands on the address of
// the first "listening" line.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	part  string // a line not ended yet
	addr  chan string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rest := l.part + string(p)
	for {
		line, after, ok := strings.Cut(rest, "\n")
		if !ok {
			break
		}
		l.lines = append(l.lines, line)
		if m := listeningRE.FindStringSubmatch(line); m != nil {
			select {
			case l.addr <- m[1]:
			default:
			}
		}
		rest = after
	}
	l.part = rest
	return len(p), nil
}
