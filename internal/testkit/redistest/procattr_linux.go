package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the server if the test binary
// dies without running its cleanups (a timeout panic, a SIGKILL), so that no
// redis-server is left behind. (The kernel sends it when the OS thread that
// started the child exits; Go ends threads only when a goroutine locked to
// one returns still locked, which the tests here never do.)
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
