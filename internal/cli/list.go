package cli

import (
	"context"

	"github.com/spf13/cobra"
)

func newListCommand(a *app) *cobra.Command {
	var (
		rf     remoteFlags
		prefix string
	)
	cmd := &cobra.Command{
		Use:   "list [--prefix P]",
		Short: "Print the current leases, one per line, ordered by key",
		Long: `list prints the current unexpired leases whose keys start with --prefix
(all of them by default), without their secret ids.

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			ctx, cancel := context.WithTimeout(cmd.Context(), rf.timeout)
			defer cancel()
			ls, err := b.List(ctx, prefix)
			if err != nil {
				return err
			}
			return writeLeases(a.stdout, ls, rf.json())
		},
	}
	rf.add(cmd, true)
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys that start with `PREFIX`")
	return cmd
}
