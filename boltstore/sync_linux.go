package boltstore

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and what is needed to read it back, not its
// times: the log overwrites allocated space, so that is one device flush.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
