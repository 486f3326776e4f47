// Package serverproc runs the throwaway database servers of the test
// harnesses (pgtest, mysqltest) as child processes: as a system user of the
// server's own when the tests run as root (PostgreSQL and MariaDB both
// refuse root), on a free loopback port, with a parent-death signal so that
// a server cannot outlive a test binary that crashes or is killed on
// timeout, and stopped with a signal and a grace period.
package serverproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RunAs returns the credentials of the system user name, to run a server
// with, when we are root; nil otherwise. hint, in the error, says how to get
// that user (installing the server's package makes it).
func RunAs(name, hint string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("serverproc: running as root needs a %s user to run the server as: %v; %s", name, err, hint)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("serverproc: %s user has uid %q gid %q", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// FreePort returns a loopback port that was free a moment ago. Another
// process may take it before the server binds it: callers try a few.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("serverproc: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Process is a server started by Start.
type Process struct {
	proc   *os.Process
	exited chan struct{}
	err    error // the exit, valid after exited is closed
}

// Start starts cmd as cred (nil: as we are) in a process group of its own,
// with deathSig sent to it if this test binary dies first.
func Start(cmd *exec.Cmd, cred *syscall.Credential, deathSig syscall.Signal) (*Process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: deathSig, Setpgid: true}
	p := &Process{exited: make(chan struct{})}
	started := make(chan error, 1)
	// The parent-death signal fires when the OS thread that forked the child
	// exits, not the process: fork from a locked thread that lives as long as
	// the server does.
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("serverproc: starting %s: %w", cmd.Path, err)
			runtime.UnlockOSThread()
			return
		}
		p.proc = cmd.Process
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
		// Returning while locked ends this thread, which is what we want.
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Exited is closed when the server has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the server exited, once Exited is closed.
func (p *Process) Err() error { return p.err }

// Signal sends sig to the server.
func (p *Process) Signal(sig os.Signal) error { return p.proc.Signal(sig) }

// Stop sends sig and waits for the server to exit; if it has not after
// grace, it sends hard and waits again, and says so.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration, hard syscall.Signal) error {
	_ = p.proc.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = p.proc.Signal(hard)
	<-p.exited
	return fmt.Errorf("serverproc: the server took more than %v to exit after %v", grace, sig)
}

// WaitReady calls ping every 10 ms until it succeeds, and fails if the
// server exits first or ping still fails after limit.
func (p *Process) WaitReady(limit time.Duration, ping func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := ping()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("serverproc: the server exited during startup: %v", p.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serverproc: the server is not ready after %v: %w", limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Tail is the end of a server's log, enough to say why a start failed.
func Tail(log []byte) string {
	const n = 2000
	if len(log) > n {
		return "…" + string(log[len(log)-n:])
	}
	return string(log)
}

// M wraps m so that Run calls stop after the tests (stopping a harness's
// shared server), and fails the run if stop fails.
func M(m interface{ Run() int }, stop func() error) interface{ Run() int } {
	return runner{m, stop}
}

type runner struct {
	m    interface{ Run() int }
	stop func() error
}

func (r runner) Run() int {
	code := r.m.Run()
	if err := r.stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// ErrMissing marks a start that failed for want of the server's binaries.
var ErrMissing = errors.New("server binaries not found")

// Server is what a harness keeps of its shared server.
type Server interface {
	// Process is the server's process.
	Process() *Process
	// LogPath is where the server writes its log.
	LogPath() string
	// Stop shuts the server down and removes its files.
	Stop() error
}

// Shared is the one server of a test binary, started on first use and
// stopped when the tests are done (M).
type Shared[S Server] struct {
	// Name is the harness, which messages start with ("pgtest").
	Name string
	// Start starts the server; an error matching ErrMissing says its
	// binaries are missing.
	Start func() (S, error)

	mu  sync.Mutex
	srv S
	up  bool
	err error // a failed start is not retried: every test would repeat it
}

// Get returns the server, started on first use. Missing binaries skip t
// under -short and fail it otherwise, as does any other failed start, and
// a server that has exited since.
func (s *Shared[S]) Get(t testing.TB) S {
	t.Helper()
	s.mu.Lock()
	if !s.up && s.err == nil {
		s.srv, s.err = s.Start()
		s.up = s.err == nil
	}
	srv, err := s.srv, s.err
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrMissing) && testing.Short() {
			t.Skipf("%s: %v", s.Name, err)
		}
		t.Fatalf("%s: %v", s.Name, err)
	}
	select {
	case <-srv.Process().Exited():
		t.Fatalf("%s: the throwaway server has exited: %v (log: %s)", s.Name, srv.Process().Err(), srv.LogPath())
	default:
	}
	return srv
}

// Stop stops the server if one was started; calling it again does nothing,
// and a later Get starts a new server.
func (s *Shared[S]) Stop() error {
	s.mu.Lock()
	srv, up := s.srv, s.up
	var none S
	s.srv, s.up, s.err = none, false, nil
	s.mu.Unlock()
	if !up {
		return nil
	}
	return srv.Stop()
}
