package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns the master and the slave of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals (/dev/ptmx; in a container, mount devpts): %v", err)
	}
	ioctl := func(req uintptr, arg unsafe.Pointer) {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), req, uintptr(arg)); e != 0 {
			t.Fatalf("pseudo-terminal ioctl %#x: %v", req, e)
		}
	}
	var unlock int32
	ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	var n uint32
	ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("opening the pseudo-terminal's slave: %v", err)
	}
	return master, slave
}

// TestBinaryRunOnATerminal runs lease run from a shell on a terminal, as a
// person would: CMD, in a process group of its own, must still read the
// terminal, and the shell must have it back afterwards, also after a CMD
// that could not start.
func TestBinaryRunOnATerminal(t *testing.T) {
	bin := leaseBinary(t)
	srv, _ := apiServer(t)
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	master, slave := openPTY(t)
	defer master.Close()
	script := `"$0" run k -- "$1"; echo rc1=$?; read a; echo after1=$a
"$0" run k -- /bin/sh -c 'read x; echo got=$x; exit 3'; echo rc2=$?; read y; echo after2=$y`
	cmd := exec.Command("/bin/sh", "-c", script, bin, noexec)
	cmd.Env = append(os.Environ(), EnvServer+"="+srv.URL)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	out := &syncBuffer{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	if _, err := master.WriteString("one\ntwo\nthree\n"); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Fatalf("the shell on the terminal did not finish; it printed %q", out.String())
	}
	master.Close()
	<-copied
	got := out.String()
	for _, want := range []string{"rc1=127", "after1=one", "got=two", "rc2=3", "after2=three"} {
		if !strings.Contains(got, want) {
			t.Errorf("the terminal shows no %q: %q", want, got)
		}
	}
}
