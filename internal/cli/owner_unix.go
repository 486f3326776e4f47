//go:build unix

package cli

import (
	"os"
	"syscall"
)

// fileOwner returns the user that owns the file fi describes.
func fileOwner(fi os.FileInfo) (uid int, known bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
