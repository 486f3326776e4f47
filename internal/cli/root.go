// Package cli is the lease command: one cobra command tree, with I/O passed
// in so that tests run it in process.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

// Exit statuses of the lease command. Scripts can tell "someone else has it"
// from "something is broken" without parsing messages.
const (
	// ExitOK means the command did what it was asked.
	ExitOK = 0
	// ExitFailure means anything not covered below: the server could not be
	// reached, refused the credentials, or answered with an error. lease run
	// too exits 1 when the credentials are refused or the server answers as
	// no lease server does: trying again later (75) would not help.
	ExitFailure = 1
	// ExitUsage means the command line or an argument was wrong (unknown
	// flag, missing key, TTL out of range): ErrInvalid.
	ExitUsage = 2
	// ExitHeld means acquire found the key held by someone else: ErrHeld.
	ExitHeld = 3
	// ExitNotHeld means renew or release named a lease that is no longer
	// the current one on its key: ErrNotHeld.
	ExitNotHeld = 4
	// ExitNotFound means get found no unexpired lease on the key, or
	// leader no leader of the election: ErrNotFound.
	ExitNotFound = 5
	// ExitTempFail is what `lease run` returns when the lease could not be
	// had for a reason that may pass (held, server unreachable or
	// unavailable) or was lost while the command ran (EX_TEMPFAIL from
	// sysexits.h: try again later).
	ExitTempFail = 75
	// ExitCannotRun is what `lease run` returns when the command could not
	// be started (not found, not executable), as shells and env(1) do.
	ExitCannotRun = 127
)

const exitCodesHelp = `Exit status: 0 done, 1 error (server unreachable, unauthorized, ...),
2 usage or invalid argument, 3 key held by someone else, 4 lease no longer
held, 5 no lease on the key (leader: no leader). lease run exits with its
command's status, or 75 if the lease could not be had (held, server
unreachable) or was lost, or 127 if the command could not start.`

// ExitError carries a specific exit status out of a command.
type ExitError struct {
	Code int
	Err  error // may be nil: nothing more to print
	// Usage is the command's usage line, printed after Err when the
	// arguments were wrong; empty otherwise.
	Usage string
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// usageError marks an error as the caller's mistake on the command line.
func usageError(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// app is what every command shares: its I/O and how it reaches a server.
// Tests replace getenv and dial to run commands in process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	dial           dialFunc
	signals        <-chan os.Signal // for lease run, watch and leader --watch; nil: the process's own
	clock          lease.Clock      // for lease run's Client; nil: the real clock
}

// NewRootCommand returns the lease command tree writing to stdout and stderr.
func NewRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	return newRoot(&app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, dial: dialHTTP})
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "lease",
		Short:         "Leases with fencing tokens, and the guards that make resources reject late writes",
		Long:          "lease is a lease (distributed lock) service that issues fencing tokens.\n\n" + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	// --version prints what `lease version` does. The flag is defined here
	// rather than by cobra so that it takes no -v, which reads as verbose.
	root.Version = versionText(debug.ReadBuildInfo())
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print the version, as lease version does")
	root.AddCommand(
		newDemoCommand(),
		newServeCommand(a),
		newAcquireCommand(a),
		newRenewCommand(a),
		newReleaseCommand(a),
		newGetCommand(a),
		newListCommand(a),
		newWatchCommand(a),
		newLeaderCommand(a),
		newRunCommand(a),
		newCampaignCommand(a),
		newBackupCommand(a),
		newRestoreCommand(a),
		newBumpCommand(a),
		newVersionCommand(a),
	)
	return root
}

// argsError is a usage error about cmd's arguments, printed with cmd's
// usage line.
func argsError(cmd *cobra.Command, err error) error {
	return &ExitError{Code: ExitUsage, Err: err, Usage: cmd.UseLine()}
}

// checkArgs makes a failure of check a usage error printed with the
// command's usage line.
func checkArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return argsError(cmd, err)
		}
		return nil
	}
}

// exactArgs is cobra.ExactArgs whose failure is a usage error.
func exactArgs(n int) cobra.PositionalArgs { return checkArgs(cobra.ExactArgs(n)) }

// noArgs is cobra.NoArgs whose failure is a usage error.
var noArgs = checkArgs(cobra.NoArgs)

// Main runs the lease command with args and returns its exit status. Errors
// print as one line on stderr.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdin, stdout, stderr)
	return execute(root, args, stderr)
}

func execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	var ee *ExitError
	if errors.As(err, &ee) && ee.Err == nil {
		return code // the command has said all there is to say
	}
	fmt.Fprintln(stderr, "lease:", oneLine(err))
	if ee != nil && ee.Usage != "" {
		fmt.Fprintln(stderr, "usage:", ee.Usage)
	}
	return code
}

// exitCode maps an error to the documented exit status.
func exitCode(err error) int {
	var ee *ExitError
	switch {
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, lease.ErrInvalid):
		return ExitUsage
	case errors.Is(err, lease.ErrHeld):
		return ExitHeld
	case errors.Is(err, lease.ErrNotHeld):
		return ExitNotHeld
	case errors.Is(err, lease.ErrNotFound):
		return ExitNotFound
	case strings.HasPrefix(err.Error(), "unknown command"):
		return ExitUsage // cobra's own, not a flag error
	}
	return ExitFailure
}

// oneLine renders err as a single line without a repeated "lease: " prefix,
// since the root package's errors already start with it.
func oneLine(err error) string {
	msg := strings.TrimPrefix(err.Error(), "lease: ")
	return strings.Join(strings.Fields(msg), " ")
}
