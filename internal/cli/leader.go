package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/spf13/cobra"
)

func newLeaderCommand(a *app) *cobra.Command {
	var (
		rf       remoteFlags
		watch    bool
		noResume bool
	)
	cmd := &cobra.Command{
		Use:   "leader KEY [--watch]",
		Short: "Print the leader of the election KEY (with --watch, a line per change)",
		Long: `leader prints the leader of the election KEY (package election: the holder of
the lease on KEY): its value (the lease's owner), its term's fencing token and
when the term ends unless renewed, as

  key=KEY value=VALUE token=TOKEN expires_at=TIME

or with -o json {"key","value","token","expires_at"}. With no leader it prints
nothing and exits 5.

With --watch it prints the leader now, then one line per change — a new term,
or the end of one — until interrupted; renewals are not changes. A line with
token=0 and no value ({"key":KEY,"token":0}) says there is no leader. Tokens
of successive lines only rise. It follows the server's watch, or, where the
server's backend cannot watch, reads the leader again at the term's expiry
and, while there is none, every 5 to 500ms.

` + resumeHelp + `

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := lease.ValidateKey(key); err != nil {
				return err
			}
			if noResume && !watch {
				return usageError(errors.New("--no-resume applies to --watch only"))
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			if !watch {
				return a.printLeader(cmd.Context(), b, key, rf)
			}
			ctx, stop := a.untilSignal(cmd.Context())
			defer stop()
			return a.watchLeader(ctx, b, key, rf.json(), noResume)
		},
	}
	rf.add(cmd, true)
	cmd.Flags().BoolVar(&watch, "watch", false, "print a line per change of leader until interrupted")
	cmd.Flags().BoolVar(&noResume, "no-resume", false, "with --watch: exit 1 when the stream breaks instead of watching again")
	return cmd
}

// elector observes elections on b; its TTL is for campaigns, which the
// CLI does not run.
func elector(b lease.Backend) (*election.Elector, error) {
	c, err := lease.NewClient(b)
	if err != nil {
		return nil, err
	}
	return election.New(c, lease.MinTTL)
}

func (a *app) printLeader(ctx context.Context, b lease.Backend, key string, rf remoteFlags) error {
	e, err := elector(b)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	l, err := e.Leader(ctx, key)
	if errors.Is(err, election.ErrNoLeader) {
		return fmt.Errorf("%w: no leader of %q", lease.ErrNotFound, key)
	}
	if err != nil {
		return err
	}
	return writeLeader(a.stdout, l, rf.json())
}

// watchLeader prints key's leader and each change until ctx ends.
func (a *app) watchLeader(ctx context.Context, b lease.Backend, key string, asJSON, noResume bool) error {
	e, err := elector(b)
	if err != nil {
		return err
	}
	// Observe follows the watch across breaks, and prints a leader again
	// only if it is another.
	for l, err := range e.Observe(ctx, key, a.onBreak("leader --watch", noResume)) {
		if err != nil {
			return err
		}
		if err := writeLeader(a.stdout, l, asJSON); err != nil {
			return err
		}
	}
	return nil
}

// leaderJSON is a leader as lease leader -o json prints it; a zero token
// with no value is no leader.
type leaderJSON struct {
	Key       string `json:"key"`
	Value     string `json:"value,omitempty"`
	Token     uint64 `json:"token"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// writeLeader prints l as one JSON object or one line.
func writeLeader(w io.Writer, l election.Leader, asJSON bool) error {
	out := leaderJSON{Key: l.Key, Value: l.Value, Token: uint64(l.Token)}
	if l.Token != 0 {
		out.ExpiresAt = l.Expires.UTC().Format(expiresLayout)
	}
	if asJSON {
		return writeJSON(w, out)
	}
	fields := []string{"key=" + quoteIfNeeded(out.Key)}
	if l.Token != 0 {
		fields = append(fields, "value="+quoteIfNeeded(out.Value))
	}
	fields = append(fields, "token="+strconv.FormatUint(out.Token, 10))
	if l.Token != 0 {
		fields = append(fields, "expires_at="+out.ExpiresAt)
	}
	_, err := fmt.Fprintln(w, strings.Join(fields, " "))
	return err
}
