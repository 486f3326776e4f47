package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// newVersionCommand returns `lease version`, which prints what `lease
// --version` prints.
func newVersionCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print lease's version, the commit it was built from and the Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(a.stdout, versionText(debug.ReadBuildInfo()))
			return err
		},
	}
}

// versionText describes a build from its build information, as the go
// command recorded it: the main module's version ("(devel)" for a build
// without one; since Go 1.24, a pseudo-version for a build from a checkout),
// the VCS revision and whether the tree had changes, and the Go version.
// Nothing is written into the source, so it cannot go stale.
func versionText(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "lease (no build information) " + runtime.Version()
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	s := "lease " + version
	var revision, modified string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			revision = kv.Value
		case "vcs.modified":
			modified = kv.Value
		}
	}
	if revision != "" {
		s += " revision " + revision
		if modified == "true" {
			s += " (modified)"
		}
	}
	return s + " " + info.GoVersion
}
