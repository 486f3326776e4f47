package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
)

// bumpReport is what a backend's Bump says, whichever backend.
type bumpReport struct {
	keys, leases int
	top, floor   lease.Token
}

func newBumpCommand(a *app) *cobra.Command {
	var (
		backend       string
		bump          uint64
		allowVolatile bool
	)
	cmd := &cobra.Command{
		Use:   "bump --backend postgres://…|redis://… [--bump N]",
		Short: "Raise every token of a restored PostgreSQL or Redis above any the old one could have issued",
		Long: `bump is lease restore for a PostgreSQL or Redis backend that was restored from a
backup (a dump, an RDB or AOF copy, a point-in-time recovery to an earlier
point): run it after the restore and before any lease serve or Store uses it.
It raises the token floor of the tables (pgstore) or the namespace (redisstore)
to the highest token they hold plus --bump (2^40 unless given, as for lease
restore), and ends every lease they hold
(their holders learn at their next renewal). Every key, known to the backup or
not, is then issued tokens above any token the old store could have issued
after the backup, unless one key was granted more than --bump times since.
Tokens stay at or below 2^53 (below it on Redis); bump refuses a bump that
would pass it. --backend is spelled as for lease serve. The embedded store is
restored by lease restore, which bumps it; etcd by etcdutl snapshot restore
--bump-revision.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bump == 0 {
				return usageError(errors.New("--bump must be at least 1"))
			}
			if backend == "" {
				return usageError(errors.New("--backend is required: the PostgreSQL or Redis to bump (the embedded store is bumped by lease restore)"))
			}
			rep, err := bumpBackend(cmd.Context(), backend, bump, allowVolatile)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "bumped %s: %d keys, highest token %d; every token from now on is above %d; %d leases ended\n",
				redact(backend), rep.keys, rep.top, rep.floor, rep.leases)
			return err
		},
	}
	cmd.Flags().StringVar(&backend, "backend", "", "the restored engine's `URL`, postgres://… or redis://…, as given to lease serve --backend")
	cmd.Flags().Uint64Var(&bump, "bump", boltstore.DefaultBump, "raise every key's tokens `N` above the highest restored: the grants of one key after the backup that the bump stays above")
	cmd.Flags().BoolVar(&allowVolatile, "allow-volatile", false, "bump a PostgreSQL or Redis whose persistence cannot keep tokens rising across a crash, as lease serve --allow-volatile serves it")
	return cmd
}

// bumpBackend opens the engine spec names and bumps it by n.
func bumpBackend(ctx context.Context, spec string, n uint64, allowVolatile bool) (bumpReport, error) {
	switch scheme, _, ok := strings.Cut(spec, "://"); {
	case !ok:
		return bumpReport{}, usageError(fmt.Errorf("--backend %q is not a URL (postgres://…, redis://…)", redact(spec)))
	case scheme == "etcd":
		return bumpReport{}, usageError(errors.New("--backend etcd://: etcd is bumped as it is restored, by etcdutl snapshot restore --bump-revision (docs/ETCD.md)"))
	case scheme != "postgres" && scheme != "postgresql" && scheme != "redis" && scheme != "rediss":
		return bumpReport{}, usageError(fmt.Errorf("--backend: lease bump knows postgres:// and redis://, not %q", scheme))
	}
	ob, err := openEngine(ctx, spec, allowVolatile, "bump")
	if err != nil {
		return bumpReport{}, err
	}
	defer ob.close()
	var rep bumpReport
	switch s := ob.Backend.(type) {
	case *pgstore.Store:
		r, err := s.Bump(ctx, n)
		rep = bumpReport{keys: r.Keys, leases: r.Leases, top: r.Top, floor: r.Floor}
		if err != nil {
			return bumpReport{}, fmt.Errorf("bump: --backend %s: %w", ob.desc, err)
		}
	case *redisstore.Store:
		r, err := s.Bump(ctx, n)
		rep = bumpReport{keys: r.Keys, leases: r.Leases, top: r.Top, floor: r.Floor}
		if err != nil {
			return bumpReport{}, fmt.Errorf("bump: --backend %s: %w", ob.desc, err)
		}
	default:
		return bumpReport{}, fmt.Errorf("bump: --backend %s: not a PostgreSQL or Redis store", ob.desc)
	}
	return rep, nil
}
