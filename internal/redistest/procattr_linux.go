package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the server if the test binary
// dies without running its cleanups (a timeout panic, a SIGKILL), so that no
// redis-server is left behind.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
