package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
	"github.com/spf13/cobra"
)

const resumeHelp = `When the stream breaks (the connection is lost, the server restarts, or nothing,
not even a heartbeat, arrives for two of the server's heartbeats: a hung server
or a dead link), a line on stderr says so and the command watches again, after
a pause of 50-100ms that doubles, up to 2.5-5s, while it keeps failing; the new
stream starts from the current state, since what happened meanwhile is not
known. With --no-resume it exits 1 instead. SIGINT or SIGTERM ends it with status 0.`

func newWatchCommand(a *app) *cobra.Command {
	var (
		rf       remoteFlags
		noResume bool
	)
	cmd := &cobra.Command{
		Use:   "watch [PREFIX]",
		Short: "Print every change to the leases under PREFIX, one line each, until interrupted",
		Long: `watch prints the leases held under PREFIX (every key if it is empty), one
"held" line each, then one "synced" line, then one line per change as it
happens: acquired, renewed, released, expired. Each line is event=KIND followed
by the lease as get prints it; -o json prints {"event":KIND,"lease":{…}} (no
"lease" for synced). No line shows a lease's secret id.

` + resumeHelp + `

Every backend lease serve runs can watch (the embedded store, PostgreSQL,
Redis, etcd); a server whose backend cannot (a lease.Backend of your own
behind leasehttp) refuses: exit 1, with a message that says so.

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: checkArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := lease.ValidatePrefix(prefix); err != nil {
				return err
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			w, ok := b.(lease.Watcher)
			if !ok {
				return fmt.Errorf("watch: %w: this backend cannot watch (lease list --prefix shows the current leases)", errors.ErrUnsupported)
			}
			ctx, stop := a.untilSignal(cmd.Context())
			defer stop()
			for ev, err := range lease.Follow(ctx, w, prefix, a.onBreak("watch", noResume)) {
				if err != nil {
					return err
				}
				if ev.Kind == lease.Resync {
					continue // said on stderr; the new stream's lines follow
				}
				if err := writeEvent(a.stdout, ev, rf.json()); err != nil {
					return err
				}
			}
			return nil
		},
	}
	rf.add(cmd, true)
	cmd.Flags().BoolVar(&noResume, "no-resume", false, "exit 1 when the stream breaks instead of watching again")
	return cmd
}

// eventJSON is one event of lease watch -o json: the event as the HTTP
// API's stream names it, and its lease as get -o json prints it.
type eventJSON struct {
	Event string               `json:"event"`
	Lease *leasehttp.LeaseJSON `json:"lease,omitempty"`
}

// writeEvent prints ev as one JSON object or one line.
func writeEvent(w io.Writer, ev lease.Event, asJSON bool) error {
	if asJSON {
		out := eventJSON{Event: ev.Kind.String()}
		if ev.Kind != lease.Synced {
			l := toJSON(ev.Lease)
			out.Lease = &l
		}
		return writeJSON(w, out)
	}
	line := "event=" + ev.Kind.String()
	if ev.Kind != lease.Synced {
		line += " " + textLine(ev.Lease)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}
