package ui_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill cmd if the test process dies first.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
