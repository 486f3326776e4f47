//go:build unix

package boltstore

import (
	"io/fs"
	"os"
	"syscall"
)

// oNoFollow makes opening a symbolic link fail (ELOOP).
const oNoFollow = syscall.O_NOFOLLOW

// ownerOf returns the uid that owns fi's file.
func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// linksOf returns how many names fi's file has.
func linksOf(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}

// holdLock keeps f's open file description, and with it the flock bbolt
// takes through f, until release is called, even after f is closed: a file
// that Open created and must remove after a failure is removed under the
// lock, so that no other process waiting for that lock goes on to use a
// file that no longer has a name.
func holdLock(f *os.File) (release func()) {
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		return func() {}
	}
	return func() { _ = syscall.Close(fd) }
}
