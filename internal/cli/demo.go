package cli

import (
	"bytes"
	"fmt"
	"os"

	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/demo"
	"github.com/spf13/cobra"
)

func newDemoCommand() *cobra.Command {
	var opts demo.Options
	var strict bool
	var svg string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replay the classic scenario: a paused worker's late write, rejected by a fencing guard",
		Long: `demo replays, in process and on a virtual clock, the scenario fencing tokens exist for:
worker-a acquires "job" (token 1) and pauses past its TTL, worker-b acquires it (token 2)
and writes, then worker-a wakes and writes late. The guard rejects the late write.
With --unfenced the same run has no guard, and worker-a's late write wins.
With --svg FILE it also draws the run as a timeline picture in FILE
("-": the picture on standard output instead of the text).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strict {
				opts.Mode = fence.Strict
			}
			if cmd.Flags().Changed("svg") && svg == "" {
				return usageError(fmt.Errorf("--svg needs a file name (- for standard output)"))
			}
			rec, err := demo.Play(opts)
			if err != nil {
				return err
			}
			switch svg {
			case "":
				return rec.WriteTimeline(cmd.OutOrStdout())
			case "-":
				return rec.WriteSVG(cmd.OutOrStdout())
			}
			var pic bytes.Buffer
			if err := rec.WriteSVG(&pic); err != nil {
				return err
			}
			if err := os.WriteFile(svg, pic.Bytes(), 0o644); err != nil {
				return err
			}
			return rec.WriteTimeline(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&opts.Unfenced, "unfenced", false, "run without a guard, to see the late write win")
	cmd.Flags().BoolVar(&strict, "strict", false, "guard in Strict mode (each token writes once, the seed's rule) instead of AtLeast")
	cmd.Flags().StringVar(&svg, "svg", "", "also draw the run as an SVG timeline in `FILE` (- for standard output, instead of the text)")
	return cmd
}
