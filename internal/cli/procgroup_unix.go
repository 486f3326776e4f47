//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package cli

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

// procGroup is the process group lease run starts its command in, so that
// losing the lease stops every process the command started, not only the
// command: a shell that dies of SIGTERM would otherwise leave its children
// working without the lease.
type procGroup struct {
	pid int // the command's, and so its group's id
	tty int // the terminal handed to the group, or -1
}

// prepareGroup makes cmd start in a process group of its own. If lease run
// is in the foreground of a terminal on one of its standard streams, the
// group takes the foreground, so that the command still reads the terminal
// and gets ^C and ^Z from it directly, as it would without lease run.
func prepareGroup(cmd *exec.Cmd, streams ...any) *procGroup {
	pg := &procGroup{tty: -1}
	attr := &syscall.SysProcAttr{Setpgid: true}
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok {
			continue
		}
		fd := int(f.Fd())
		if fg, err := tcgetpgrp(fd); err == nil && fg == syscall.Getpgrp() {
			attr.Foreground, attr.Ctty = true, fd
			pg.tty = fd
			break
		}
	}
	cmd.SysProcAttr = attr
	return pg
}

// started records the started command.
func (pg *procGroup) started(p *os.Process) { pg.pid = p.Pid }

// signal sends sig to every process in the group.
func (pg *procGroup) signal(sig syscall.Signal) {
	if pg.pid > 0 {
		_ = syscall.Kill(-pg.pid, sig)
	}
}

// alive reports whether any process is left in the group.
func (pg *procGroup) alive() bool {
	if pg.pid <= 0 {
		return false
	}
	err := syscall.Kill(-pg.pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// restore takes the terminal back from the group once the command has
// exited (or failed to start: the child hands it the terminal before its
// exec fails), unless someone else has taken it since. lease run is then in
// the background, where changing the foreground raises SIGTTOU unless
// ignored.
func (pg *procGroup) restore() {
	if pg.tty < 0 {
		return
	}
	own := syscall.Getpgrp()
	fg, err := tcgetpgrp(pg.tty)
	if err != nil || fg == own || (pg.pid > 0 && fg != pg.pid) {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = tcsetpgrp(pg.tty, own)
}

func tcgetpgrp(fd int) (int, error) {
	var pgrp int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); e != 0 {
		return 0, e
	}
	return int(pgrp), nil
}

func tcsetpgrp(fd, pgrp int) error {
	p := int32(pgrp)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}
