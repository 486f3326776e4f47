package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// shellArgv runs the test binary as a child of /bin/sh, not as its last
// command (so the shell cannot exec it in its own place): the command lease
// run starts is the shell, and the work is its child.
func shellArgv(t *testing.T) []string {
	return append([]string{"/bin/sh", "-c", `"$0" "$1"; exit 0`}, childArgv(t)...)
}

// TestRunLossStopsTheCommandsChildren: when the lease is lost, SIGTERM must
// reach the processes CMD started, not only CMD. A shell that dies of the
// SIGTERM would otherwise leave its child working without the lease.
func TestRunLossStopsTheCommandsChildren(t *testing.T) {
	g := &renewGate{Backend: memtest.New(t)}
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 0)
	// A grace past the TTL: the child, built with -race, sleeps a second
	// as it exits (GORACE atexit_sleep_ms), and must not be killed for it.
	args := append([]string{"run", "job", "--ttl", "1s", "--grace", "5s", "--allow-grace-past-ttl", "--"}, shellArgv(t)...)
	done := make(chan result, 1)
	go func() { done <- cli(t, g, nil, nil, args...) }()
	waitFile(t, file, "ready", 10*time.Second)
	g.fail()
	waitFile(t, file, "term ", 10*time.Second)
	if r := ended(t, done, "the command was stopped"); r.code != ExitTempFail {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, ExitTempFail, r.stderr)
	}
}

// TestRunLossKillsTheCommandsChildrenAfterGrace: a child of CMD that ignores
// SIGTERM must be killed --grace after the loss, like CMD itself.
func TestRunLossKillsTheCommandsChildrenAfterGrace(t *testing.T) {
	g := &renewGate{Backend: memtest.New(t)}
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "ignore-term", file, 0)
	args := append([]string{"run", "job", "--ttl", "300ms", "--grace", "200ms", "--"}, shellArgv(t)...)
	done := make(chan result, 1)
	go func() { done <- cli(t, g, nil, nil, args...) }()
	waitFile(t, file, "ready", 10*time.Second)
	g.fail()
	// The command's output is a pipe the grandchild holds open: lease run
	// ends only once every process that has it is gone.
	r := ended(t, done, "the child of the command that ignores SIGTERM was not killed")
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d (stderr %q)", r.code, ExitTempFail, r.stderr)
	}
	if !strings.Contains(r.stderr, "lost") {
		t.Errorf("stderr %q does not say the lease was lost", r.stderr)
	}
}

// TestRunBadTimeoutIsUsageError: lease run's help promises exit 2 on a usage
// error; a bad --timeout is one, not a failure to get the lease.
func TestRunBadTimeoutIsUsageError(t *testing.T) {
	b := memtest.New(t)
	for _, timeout := range []string{"0", "-1s"} {
		r := cli(t, b, nil, nil, "run", "job", "--timeout", timeout, "--", "/bin/true")
		if r.code != ExitUsage {
			t.Errorf("--timeout %s: exit %d, want %d (stderr %q)", timeout, r.code, ExitUsage, r.stderr)
		}
		oneErrorLine(t, r, "--timeout")
	}
}

// TestBinaryRunLossKillsTheCommandsChildren is the same as a process, whose
// command's output is a file it inherits: the shell dies of the SIGTERM at
// once, lease run sees its command exit, and must still kill the child that
// ignores SIGTERM when --grace runs out, rather than leave it working.
func TestBinaryRunLossKillsTheCommandsChildren(t *testing.T) {
	srv, _ := apiServer(t)
	file := filepath.Join(t.TempDir(), "child")
	args := append([]string{"run", "nightly", "--ttl", "1500ms", "--grace", "300ms", "--"}, shellArgv(t)...)
	p := startBinary(t, append(childVars("ignore-term", file, 0), EnvServer+"="+srv.URL), args...)
	waitFile(t, file, "ready", 20*time.Second)
	srv.CloseClientConnections()
	srv.Close() // renewals now fail to connect
	// p.wait returns once the output pipe is closed: by every process that
	// inherited it, the child of the shell included.
	if code := p.wait(t, 20*time.Second); code != ExitTempFail {
		t.Errorf("exit %d, want %d; stderr %q", code, ExitTempFail, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "SIGKILL") {
		t.Errorf("stderr %q does not say SIGKILL was sent", p.stderr.String())
	}
}

// TestBinaryRunForwardsSignalsToTheCommandsChildren: SIGTERM sent to lease
// run reaches the child of a shell CMD as well as the shell, as it would
// reach every process of the job without lease run. It used to reach the
// shell alone, which died of it; lease run then released the lease while
// the child worked on, so that `timeout 1h lease run …` or a kill of lease
// run let a second copy of the job start beside the first.
func TestBinaryRunForwardsSignalsToTheCommandsChildren(t *testing.T) {
	srv, g := apiServer(t)
	file := filepath.Join(t.TempDir(), "child")
	// The child's output goes elsewhere, so that lease run's exit is seen
	// when it happens, not when the child closes the pipe it inherited.
	cmd := append([]string{"/bin/sh", "-c", `"$0" "$1" >/dev/null 2>&1; exit 0`}, childArgv(t)...)
	p := startBinary(t, append(childVars("term", file, 0), EnvServer+"="+srv.URL), append([]string{"run", "nightly", "--grace", "5s", "--"}, cmd...)...)
	waitFile(t, file, "ready", 20*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d, the shell's death by SIGTERM; stderr %q", code, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	// lease run has exited, and so released the lease: the child must have
	// had the SIGTERM by then.
	if data, _ := os.ReadFile(file); !strings.Contains(string(data), "\nterm ") {
		t.Errorf("lease run exited, its lease released, while the child of its command never got SIGTERM (its notes: %q)", data)
	}
	if _, err := g.Backend.Get(t.Context(), "nightly"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get = %v; want the lease released", err)
	}
}

// TestBinaryRunStopsWhatTheCommandLeftRunning: a CMD that exits leaving a
// child running (a shell's background job) does not have its lease released
// under that child: the child gets SIGTERM first. lease run used to release
// at once, and the child worked on without the lease.
func TestBinaryRunStopsWhatTheCommandLeftRunning(t *testing.T) {
	srv, g := apiServer(t)
	file := filepath.Join(t.TempDir(), "child")
	// The shell exits once its background child has said it is ready.
	cmd := append([]string{"/bin/sh", "-c", `"$0" "$1" >/dev/null 2>&1 & while [ ! -s "$` + childFileEnv + `" ]; do sleep 0.01; done; exit 0`}, childArgv(t)...)
	p := startBinary(t, append(childVars("term", file, 0), EnvServer+"="+srv.URL), append([]string{"run", "nightly", "--grace", "5s", "--"}, cmd...)...)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Errorf("exit %d, want the command's 0; stderr %q", code, p.stderr.String())
	}
	if data, _ := os.ReadFile(file); !strings.Contains(string(data), "\nterm ") {
		t.Errorf("lease run exited, its lease released, with the child its command left running never sent SIGTERM (its notes: %q)", data)
	}
	if !strings.Contains(p.stderr.String(), "leaving processes it started running") {
		t.Errorf("stderr %q does not say what lease run stopped", p.stderr.String())
	}
	if _, err := g.Backend.Get(t.Context(), "nightly"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get = %v; want the lease released", err)
	}
}
