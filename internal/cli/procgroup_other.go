//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package cli

import (
	"os"
	"os/exec"
	"syscall"
)

// procGroup stands for the command alone where lease run cannot give it a
// process group of its own: only the command itself is signalled.
type procGroup struct{ p *os.Process }

func prepareGroup(*exec.Cmd, ...any) *procGroup { return &procGroup{} }

func (pg *procGroup) started(p *os.Process) { pg.p = p }

func (pg *procGroup) signal(sig syscall.Signal) {
	if pg.p != nil {
		if sig == syscall.SIGKILL {
			_ = pg.p.Kill()
			return
		}
		_ = pg.p.Signal(sig)
	}
}

func (pg *procGroup) alive() bool { return false }

func (pg *procGroup) restore() {}
