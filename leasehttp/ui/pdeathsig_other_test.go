//go:build !linux

package ui_test

import "os/exec"

// dieWithTest does nothing where there is no parent-death signal: the
// test's cleanup stops the server.
func dieWithTest(*exec.Cmd) {}
