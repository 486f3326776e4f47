package boltstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The store writes its two files, zeroes parts of the log and sets both to
// mode 0600. Done through a symbolic link, a second hard link or a file put
// there by someone else, each of those would be done to a file the store
// does not own, and a directory others may write to lets them remove the
// files, and with them every token ever issued (I1). So Open refuses all of
// that before it writes, truncates or chmods anything, and opens with
// O_NOFOLLOW and checks the opened file again, as it may be swapped between
// the check and the open.

// checkDir refuses the directory of the store at path if it is not one,
// or, unless shared is allowed, if another user could remove or rename the
// files in it: one writable by group or others (unless sticky, where only
// a file's owner may do that), or owned by a user other than this
// process's or root.
func checkDir(path string, shared bool) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return unavailablef(err, "boltstore: cannot open %s", path)
	}
	if !fi.IsDir() {
		return unavailablef(nil, "boltstore: cannot open %s: %s is not a directory", path, dir)
	}
	if shared {
		return nil
	}
	const fix = "; make it private (chmod 700), or accept the risk with AllowSharedDir (lease serve --allow-shared-data-dir)"
	if m := fi.Mode(); m.Perm()&0o022 != 0 && m&fs.ModeSticky == 0 {
		return unavailablef(nil, "boltstore: cannot open %s: the directory %s is writable by other users (mode %v): they could remove or replace the store's files, and with them every token it issued%s", path, dir, m.Perm(), fix)
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() && uid != 0 {
		return unavailablef(nil, "boltstore: cannot open %s: the directory %s belongs to uid %d, not to this process's user (uid %d) or root: its owner could remove or replace the store's files%s", path, dir, uid, os.Geteuid(), fix)
	}
	return nil
}

// checkOwnInfo refuses fi, of the file at path, unless it is a regular
// file (not a symbolic link) of this process's user with one name.
func checkOwnInfo(path string, fi fs.FileInfo) error {
	m := fi.Mode()
	switch {
	case m&fs.ModeSymlink != 0:
		return unavailablef(nil, "boltstore: %s is a symbolic link: the store opens only a regular file of its own (replace the link with the file)", path)
	case !m.IsRegular():
		kind := "a special file"
		switch t := m.Type(); {
		case t&fs.ModeDir != 0:
			kind = "a directory"
		case t&fs.ModeNamedPipe != 0:
			kind = "a FIFO"
		case t&fs.ModeSocket != 0:
			kind = "a socket"
		case t&fs.ModeDevice != 0:
			kind = "a device"
		}
		return unavailablef(nil, "boltstore: cannot open %s: it is %s, not a regular file", path, kind)
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return unavailablef(nil, "boltstore: %s belongs to uid %d, not to this process's user (uid %d): the store opens only its own files (run as its owner, or chown it)", path, uid, os.Geteuid())
	}
	if n, ok := linksOf(fi); ok && n > 1 {
		return unavailablef(nil, "boltstore: %s has %d names (hard links): the store writes only a file of its own with one name (copy it instead, or remove the other names)", path, n)
	}
	return nil
}

// openOwnFile opens path for reading and writing, creating it with mode
// 0600 if nothing is there, and reports whether it did. A file already
// there must pass checkOwnInfo before it is opened and, opened, still be
// that file.
func openOwnFile(path string) (f *os.File, created bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, false, unavailablef(err, "boltstore: cannot create %s", path)
	}
	before, err := os.Lstat(path)
	if err != nil {
		return nil, false, unavailablef(err, "boltstore: cannot open %s", path)
	}
	if err := checkOwnInfo(path, before); err != nil {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|oNoFollow, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, false, unavailablef(nil, "boltstore: %s is a symbolic link: the store opens only a regular file of its own (replace the link with the file)", path)
	}
	if err != nil {
		return nil, false, unavailablef(err, "boltstore: cannot open %s", path)
	}
	after, err := f.Stat()
	if err == nil {
		err = checkOwnInfo(path, after)
	}
	if err == nil && !os.SameFile(before, after) {
		err = unavailablef(nil, "boltstore: %s was replaced while it was being opened", path)
	}
	if err != nil {
		_ = f.Close()
		return nil, false, err
	}
	return f, false, nil
}

// makePrivate sets f, the store's own file at path, to mode 0600 if it is
// not: both files hold every lease's secret ID, and a file copied or
// restored may be readable by others. Through the open file, not the name.
func makePrivate(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return unavailablef(err, "boltstore: cannot read the mode of %s", path)
	}
	if fi.Mode().Perm() == 0o600 {
		return nil
	}
	if err := f.Chmod(0o600); err != nil {
		return unavailablef(err, "boltstore: cannot make %s private (mode 0600)", path)
	}
	return nil
}
