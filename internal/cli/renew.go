package cli

import (
	"context"
	"time"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

func newRenewCommand(a *app) *cobra.Command {
	var (
		rf  remoteFlags
		lf  leaseFlags
		ttl time.Duration
	)
	cmd := &cobra.Command{
		Use:   "renew KEY --id ID --token TOKEN",
		Short: "Extend a lease acquired with acquire; its token stays the same",
		Long: `renew extends the lease on KEY, named by the id and token acquire printed, to
expire --ttl from now on the server's clock. It fails if the lease expired,
was released or was superseded.

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := lf.lease(args[0])
			if err != nil {
				return err
			}
			if err := lease.ValidateTTL(ttl); err != nil {
				return err
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			ctx, cancel := context.WithTimeout(cmd.Context(), rf.timeout)
			defer cancel()
			renewed, err := b.Renew(ctx, l, ttl)
			if err != nil {
				return err
			}
			return writeLease(a.stdout, renewed, rf.json())
		},
	}
	rf.add(cmd, true)
	lf.add(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "new time to live from now, "+lease.MinTTL.String()+" to "+lease.MaxTTL.String())
	return cmd
}
