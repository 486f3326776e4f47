// Package cli is the lease command: one cobra command tree, with I/O passed
// in so that tests run it in process.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// ExitError carries a specific exit status out of a command.
type ExitError struct {
	Code int
	Err  error // may be nil: nothing more to print
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// NewRootCommand returns the lease command tree writing to stdout and stderr.
func NewRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "lease",
		Short:         "Leases with fencing tokens, and the guards that make resources reject late writes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newDemoCommand())
	return root
}

// Main runs the lease command with args and returns its exit status. Errors
// print as one line on stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(stderr, "lease:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "lease:", err)
	return 1
}
