package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

func newGetCommand(a *app) *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the current lease on KEY (without its secret id)",
		Long: `get prints the current unexpired lease on KEY: its holder, token and expiry.

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := lease.ValidateKey(key); err != nil {
				return err
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			ctx, cancel := context.WithTimeout(cmd.Context(), rf.timeout)
			defer cancel()
			l, err := b.Get(ctx, key)
			if errors.Is(err, lease.ErrNotFound) {
				return fmt.Errorf("%w: no lease on %q", lease.ErrNotFound, key)
			}
			if err != nil {
				return err
			}
			return writeLease(a.stdout, l, rf.json())
		},
	}
	rf.add(cmd, true)
	return cmd
}
