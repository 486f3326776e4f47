package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
)

// renewGate is a backend whose renewals can be made to fail, as if the
// server had become unreachable, and which remembers the last lease it
// granted or renewed: the server's view of when the lease expires.
type renewGate struct {
	lease.Backend
	mu      sync.Mutex
	failing bool
	last    lease.Lease
}

func (g *renewGate) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := g.Backend.Acquire(ctx, key, owner, ttl)
	if err == nil {
		g.mu.Lock()
		g.last = l
		g.mu.Unlock()
	}
	return l, err
}

func (g *renewGate) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	g.mu.Lock()
	failing := g.failing
	g.mu.Unlock()
	if failing {
		return lease.Lease{}, errors.New("renewGate: " + lease.ErrUnavailable.Error())
	}
	l, err := g.Backend.Renew(ctx, l, ttl)
	if err == nil {
		g.mu.Lock()
		g.last = l
		g.mu.Unlock()
	}
	return l, err
}

func (g *renewGate) fail() lease.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = true
	return g.last
}

// ended returns lease run's result from done, failing t (saying why, if it
// could not end) if it does not come within 20 s.
func ended(t *testing.T, done <-chan result, why string) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("lease run did not end (%s)", why)
		return result{}
	}
}

func runArgs(t *testing.T, flags ...string) []string {
	return append(append([]string{"run"}, flags...), append([]string{"--"}, childArgv(t)...)...)
}

func TestRunPassesLeaseAndExitStatus(t *testing.T) {
	b := memtest.New(t)
	childEnviron(t, "env", "", 7)
	r := cli(t, b, nil, nil, runArgs(t, "job", "--owner", "cron@host")...)
	if r.code != 7 {
		t.Fatalf("exit %d, want the command's 7 (stderr %q)", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "key=job token=") || !strings.HasSuffix(r.stdout, " owner=cron@host\n") {
		t.Errorf("command saw %q", r.stdout)
	}
	tok, err := strconv.ParseUint(strings.Fields(r.stdout)[1][len("token="):], 10, 64)
	if err != nil || tok == 0 {
		t.Errorf("LEASE_TOKEN in %q: %v", r.stdout, err)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing", r.stderr)
	}
	if _, err := b.Get(t.Context(), "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("after run, Get = %v; want the lease released", err)
	}
	// The next run gets a newer token.
	r2 := cli(t, b, nil, nil, runArgs(t, "job")...)
	tok2, _ := strconv.ParseUint(strings.Fields(r2.stdout)[1][len("token="):], 10, 64)
	if tok2 <= tok {
		t.Errorf("second run got token %d after %d", tok2, tok)
	}
}

func TestRunHeldBySomeoneElse(t *testing.T) {
	b := memtest.New(t)
	if _, err := b.Acquire(t.Context(), "job", "other-host-42", time.Minute); err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	r := cli(t, b, nil, nil, runArgs(t, "job")...)
	if r.code != ExitTempFail {
		t.Fatalf("exit %d, want %d", r.code, ExitTempFail)
	}
	if r.stdout != "" {
		t.Errorf("the command ran: %q", r.stdout)
	}
	oneErrorLine(t, r, `"other-host-42"`, `"job"`)

	r = cli(t, b, nil, nil, runArgs(t, "job", "--wait", "100ms")...)
	if r.code != ExitTempFail || r.stdout != "" {
		t.Fatalf("with --wait: exit %d stdout %q", r.code, r.stdout)
	}
	oneErrorLine(t, r, `"other-host-42"`)
}

func TestRunWaitsForTheKey(t *testing.T) {
	b := memtest.New(t)
	first, err := b.Acquire(t.Context(), "job", "other", 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	r := cli(t, b, nil, nil, runArgs(t, "job", "--wait", "10s")...)
	if r.code != ExitOK || !strings.HasPrefix(r.stdout, "key=job token=") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if tok, _ := strconv.ParseUint(strings.Fields(r.stdout)[1][len("token="):], 10, 64); tok <= uint64(first.Token) {
		t.Errorf("the command ran with token %d, not above the expired holder's %d", tok, first.Token)
	}
}

func TestRunCommandNotFound(t *testing.T) {
	b := memtest.New(t)
	r := cli(t, b, nil, nil, "run", "job", "--", filepath.Join(t.TempDir(), "no-such-command"))
	if r.code != ExitCannotRun {
		t.Fatalf("exit %d, want %d", r.code, ExitCannotRun)
	}
	oneErrorLine(t, r, "no-such-command")
	if _, err := b.Get(t.Context(), "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get = %v; want the lease released", err)
	}
}

// TestRunLossStopsCommandBeforeExpiry makes renewals fail while the command
// runs: the command must get SIGTERM before the lease expires on the
// backend, and run must exit 75 even though the command exited 0.
func TestRunLossStopsCommandBeforeExpiry(t *testing.T) {
	g := &renewGate{Backend: memtest.New(t)}
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 0)
	done := make(chan result, 1)
	// A grace past the TTL: the child, built with -race, sleeps a second
	// as it exits (GORACE atexit_sleep_ms), and must not be killed for it.
	go func() {
		done <- cli(t, g, nil, nil, runArgs(t, "job", "--ttl", "1s", "--grace", "5s", "--allow-grace-past-ttl")...)
	}()
	waitFile(t, file, "ready", 10*time.Second)
	last := g.fail()
	line := waitFile(t, file, "term ", 10*time.Second)
	ns, _ := strconv.ParseInt(strings.TrimPrefix(line, "term "), 10, 64)
	if got := time.Unix(0, ns); !got.Before(last.Expires) {
		t.Errorf("SIGTERM arrived at %v, not before the lease expired on the backend at %v", got, last.Expires)
	}
	r := <-done
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d", r.code, ExitTempFail)
	}
	oneErrorLine(t, r, "lost", "SIGTERM")
}

func TestRunLossKillsAfterGrace(t *testing.T) {
	b := memtest.New(t)
	g := &renewGate{Backend: b}
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "ignore-term", file, 0)
	done := make(chan result, 1)
	go func() { done <- cli(t, g, nil, nil, runArgs(t, "job", "--ttl", "300ms", "--grace", "200ms")...) }()
	waitFile(t, file, "ready", 10*time.Second)
	// Released behind the runner's back: the next renewal hears ErrNotHeld.
	last := g.fail()
	g.mu.Lock()
	g.failing = false
	g.mu.Unlock()
	if err := b.Release(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	r := ended(t, done, "the command that ignores SIGTERM was not killed")
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d", r.code, ExitTempFail)
	}
	if !strings.Contains(r.stderr, "SIGKILL") || strings.Count(r.stderr, "\n") != 2 {
		t.Errorf("stderr %q, want the loss and the SIGKILL, one line each", r.stderr)
	}
}

func TestRunForwardsSignals(t *testing.T) {
	b := memtest.New(t)
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 9)
	sigs := make(chan os.Signal, 1)
	done := make(chan result, 1)
	go func() { done <- cli(t, b, nil, sigs, runArgs(t, "job")...) }()
	waitFile(t, file, "ready", 10*time.Second)
	sigs <- syscall.SIGTERM
	r := <-done
	if r.code != 9 {
		t.Errorf("exit %d, want the command's 9 after it handled the forwarded SIGTERM (stderr %q)", r.code, r.stderr)
	}
	if _, err := b.Get(t.Context(), "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get = %v; want the lease released", err)
	}
}

func TestRunSignalWhileWaitingGivesUp(t *testing.T) {
	b := memtest.New(t)
	if _, err := b.Acquire(t.Context(), "job", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGINT
	r := cli(t, b, nil, sigs, runArgs(t, "job", "--wait", "1m")...)
	if r.code != ExitTempFail || r.stdout != "" {
		t.Fatalf("exit %d stdout %q", r.code, r.stdout)
	}
	oneErrorLine(t, r, "interrupt")
}

func TestExitStatusOfSignalledCommand(t *testing.T) {
	b := memtest.New(t)
	r := cli(t, b, nil, nil, "run", "job", "--", "/bin/sh", "-c", "kill -TERM $$")
	if r.code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d", r.code, 128+int(syscall.SIGTERM))
	}
}

// TestRunCommandExitingAfterTheDeadlineIsALoss: CMD exits, with status 0,
// after the lease's safe deadline has passed but before the timer that
// ends the Hold has run. CMD did not finish under the lease, so lease run
// exits 75, not 0, and says why — whichever of the two events it sees
// first.
func TestRunCommandExitingAfterTheDeadlineIsALoss(t *testing.T) {
	b := memtest.New(t)
	clk := fakeclock.New(time.Now())
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "wait-go", file, 0)
	done := make(chan result, 1)
	go func() { done <- cliOnClock(t, b, clk, nil, nil, runArgs(t, "job", "--ttl", "1m")...) }()
	waitFile(t, file, "ready", 10*time.Second)
	clk.Jump(time.Hour) // the process wakes from a pause, before its timers have run
	if err := os.WriteFile(file+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := ended(t, done, "its command had exited")
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d: the command ended after the lease's deadline", r.code, ExitTempFail)
	}
	oneErrorLine(t, r, "lost", "exited meanwhile")
}
