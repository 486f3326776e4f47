//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal does nothing where the kernel offers no parent-death
// signal; cleanups still stop the server.
func setParentDeathSignal(*exec.Cmd) {}
