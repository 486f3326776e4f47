//go:build !linux

// Package fsync flushes files as boltstore's log needs, for boltstore and
// for the benchmark floors that must do what it does.
package fsync

import "os"

// Data flushes f: fdatasync where the system has it (Linux), else fsync.
func Data(f *os.File) error { return f.Sync() }
