package benchutil

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and what is needed to read it back, as
// boltstore's log does; interrupted by a signal, it is retried.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
