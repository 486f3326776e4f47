package cli

import (
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/demo"
	"github.com/spf13/cobra"
)

func newDemoCommand() *cobra.Command {
	var opts demo.Options
	var strict bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replay the classic scenario: a paused worker's late write, rejected by a fencing guard",
		Long: `demo replays, in process and on a virtual clock, the scenario fencing tokens exist for:
worker-a acquires "job" (token 1) and pauses past its TTL, worker-b acquires it (token 2)
and writes, then worker-a wakes and writes late. The guard rejects the late write.
With --unfenced the same run has no guard, and worker-a's late write wins.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strict {
				opts.Mode = fence.Strict
			}
			_, err := demo.Run(cmd.OutOrStdout(), opts)
			return err
		},
	}
	cmd.Flags().BoolVar(&opts.Unfenced, "unfenced", false, "run without a guard, to see the late write win")
	cmd.Flags().BoolVar(&strict, "strict", false, "guard in Strict mode (each token writes once, the seed's rule) instead of AtLeast")
	return cmd
}
