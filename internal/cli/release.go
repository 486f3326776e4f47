package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func newReleaseCommand(a *app) *cobra.Command {
	var (
		rf remoteFlags
		lf leaseFlags
	)
	cmd := &cobra.Command{
		Use:   "release KEY --id ID --token TOKEN",
		Short: "End a lease acquired with acquire, so that the next contender gets it at once",
		Long: `release ends the lease on KEY named by the id and token acquire printed. It
fails, changing nothing, if that lease is no longer the current one.

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := lf.lease(args[0])
			if err != nil {
				return err
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			ctx, cancel := context.WithTimeout(cmd.Context(), rf.timeout)
			defer cancel()
			if err := b.Release(ctx, l); err != nil {
				return err
			}
			if rf.json() {
				return writeJSON(a.stdout, struct{}{}) // the API's answer: {}
			}
			_, err = fmt.Fprintf(a.stdout, "released key=%s token=%d\n", quoteIfNeeded(l.Key), l.Token)
			return err
		},
	}
	rf.add(cmd, true)
	lf.add(cmd)
	return cmd
}
