package boltstore

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and what is needed to read it back, not its
// times: the log overwrites allocated space, so that is one device flush.
// A sync interrupted by a signal (possible on NFS and FUSE) is retried, as
// os.File.Sync does.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
