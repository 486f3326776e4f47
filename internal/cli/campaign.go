package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

// campaignForever is the wait of a lease campaign without --wait: longer
// than any process lives, and far from overflowing when a timeout is added.
const campaignForever = 100 * 365 * 24 * time.Hour

func newCampaignCommand(a *app) *cobra.Command {
	var (
		rf    remoteFlags
		o     runOptions
		value string
	)
	cmd := &cobra.Command{
		Use:   "campaign KEY --value V [--ttl 30s] [--wait 0] [--grace 10s] -- CMD [ARGS...]",
		Short: "Wait to be elected leader of KEY, announcing V, and run CMD while leading",
		Long: `campaign is leader election for shell users (package election): it waits in
line, first come, first served, until it is elected leader of KEY, announcing
--value V (what lease leader KEY shows others), then runs CMD for as long as the
term lasts, exactly as lease run does: CMD's environment has LEASE_KEY,
LEASE_TOKEN (the term's fencing token) and LEASE_OWNER (V); if the term is lost
CMD and its process group get SIGTERM and, --grace later, SIGKILL; SIGINT,
SIGTERM and SIGHUP are passed on to CMD's process group; and the term is
resigned when CMD exits (after processes it left running are stopped), so
the next candidate leads at once.

It leads one term and exits with CMD's status; to lead again after a loss, run
it again (a supervisor's restart is the requeue). --wait bounds the wait to be
elected; 0 (the default) waits until elected or interrupted.

Interrupted (SIGINT, SIGTERM, SIGHUP) while waiting to lead, it withdraws from
the line at once: it gives the wait up, waits at most --timeout for the
server's word that it has ended (a term granted as it ended is resigned), says
whether that word came or the term's fate is unknown, and exits 75 without
running CMD. Interrupted while leading, it passes the signal on to CMD's
process group as lease run does, resigns the term once CMD has exited, so the
next candidate leads at once, and says so.

Exit status as for lease run: CMD's (128+N if a signal N ended it); 75 if it
was not elected within --wait, was interrupted before it led, or lost the term
before CMD's exit was seen; 1 for credentials refused; 127 if CMD could not be
started; 2 on a usage error.

` + remoteEnvHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return usageError(errors.New("usage: lease campaign KEY --value V [flags] -- CMD [ARGS...]"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.key, o.argv = args[0], args[1:]
			if value == "" {
				return usageError(errors.New("--value is required: what others see as the leader (lease leader KEY)"))
			}
			if err := lease.ValidateOwner(value); err != nil {
				return usageError(fmt.Errorf("--value: %w", err))
			}
			o.owner, o.campaign = value, true
			if o.wait < 0 {
				return usageError(fmt.Errorf("--wait must not be negative, got %v", o.wait))
			}
			if o.wait == 0 {
				o.wait = campaignForever
			}
			if !cmd.Flags().Changed("grace") {
				o.grace = min(o.grace, o.ttl)
			}
			return runUnder(cmd.Context(), a, &rf, o)
		},
	}
	rf.add(cmd, false)
	cmd.Flags().StringVar(&value, "value", "", "the leader's `VALUE` others see (an address, a name); required")
	cmd.Flags().DurationVar(&o.ttl, "ttl", 30*time.Second, "term time to live, "+minRunTTL.String()+" to "+lease.MaxTTL.String()+"; renewed about every ttl/3")
	cmd.Flags().DurationVar(&o.wait, "wait", 0, "how long to wait to be elected (0: until elected)")
	cmd.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the term is lost; at most --ttl, which is the default when shorter")
	cmd.Flags().BoolVar(&o.allowGracePastTTL, "allow-grace-past-ttl", false, "allow a --grace longer than --ttl (CMD may then work long after its term ended)")
	return cmd
}
