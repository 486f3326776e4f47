package serverproc_test

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/serverproc"
)

func TestStartStop(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep(1), which every Debian has (coreutils): %v", err)
	}
	p, err := serverproc.Start(exec.Command(sleep, "60"), nil, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	pings := 0
	if err := p.WaitReady(10*time.Second, func() error {
		if pings++; pings < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || pings != 3 {
		t.Fatalf("WaitReady = %v after %d pings, want nil after 3", err, pings)
	}
	if err := p.Stop(syscall.SIGTERM, 10*time.Second, syscall.SIGKILL); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Stop")
	}
	// A server that ignores the polite signal is killed, and Stop says so.
	p, err = serverproc.Start(exec.Command("sh", "-c", `trap "" TERM; exec sleep 60`), nil, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the shell set its trap and exec
	if err := p.Stop(syscall.SIGTERM, 200*time.Millisecond, syscall.SIGKILL); err == nil || !strings.HasPrefix(err.Error(), "serverproc: ") {
		t.Fatalf("Stop of a server ignoring SIGTERM: %v, want an error saying it was killed", err)
	}
}

func TestWaitReadyNoticesExit(t *testing.T) {
	p, err := serverproc.Start(exec.Command("sh", "-c", "exit 3"), nil, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(10*time.Second, func() error { return errors.New("refused") })
	if err == nil || !strings.Contains(err.Error(), "exited during startup") {
		t.Fatalf("WaitReady on a server that exited: %v", err)
	}
}

func TestFreePort(t *testing.T) {
	port, err := serverproc.FreePort()
	if err != nil || port <= 0 || port > 65535 {
		t.Fatalf("FreePort = %d, %v", port, err)
	}
}
