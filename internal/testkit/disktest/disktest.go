// Package disktest gives tests the disk faults they need to provoke for
// real: a small filesystem that fills up (SmallDisk) and bytes overwritten
// in place, as a damaged sector would leave them (Overwrite).
package disktest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// SmallDisk mounts a tmpfs of size bytes, mode 0700, on a new directory for
// as long as the test runs, and returns the directory and a function that
// resizes it (to free space, or to take it away). It skips the test in
// -short mode, when not root, and where mounting is not allowed.
func SmallDisk(t testing.TB, size int) (dir string, resize func(size int)) {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts a small tmpfs; skipped in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		// A process forked meanwhile by a parallel test holds the
		// mount's open files until it execs, and umount finds the mount
		// busy (seen once in a parallel run of boltstore's tests): try
		// again a few times before calling it a failure.
		var (
			out []byte
			err error
		)
		for range 20 {
			if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // real time: another process's open files on a real mount
		}
		t.Errorf("umount %s: %v: %s", dir, err, out)
		_ = exec.Command("umount", "-l", dir).Run() // detach it, not to leave it mounted
	})
	return dir, func(size int) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", size), dir).CombinedOutput(); err != nil {
			t.Fatalf("resizing the tmpfs: %v: %s", err, out)
		}
	}
}

// Overwrite writes the four bytes de ad be ef at offset off of the file at
// path, in place, as the damaged log had them.
func Overwrite(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
