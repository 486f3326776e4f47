//go:build !unix

package boltstore

import (
	"io/fs"
	"os"
)

// oNoFollow is 0 where the system has no O_NOFOLLOW; Open's Lstat and
// the check of the opened file still refuse a link.
const oNoFollow = 0

func ownerOf(fs.FileInfo) (int, bool)    { return 0, false }
func linksOf(fs.FileInfo) (uint64, bool) { return 0, false }
func holdLock(*os.File) func()           { return func() {} }
