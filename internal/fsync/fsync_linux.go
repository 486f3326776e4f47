// Package fsync flushes files as boltstore's log needs, for boltstore and
// for the benchmark floors that must do what it does.
package fsync

import (
	"os"
	"syscall"
)

// Data flushes f's data and what is needed to read it back, not its times
// (fdatasync): for a file that overwrites allocated space, one device
// flush. A sync interrupted by a signal (possible on NFS and FUSE) is
// retried, as os.File.Sync does.
func Data(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
