package cli

import (
	"errors"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

// leaseFlags name an existing lease for renew and release: its secret id and
// its token, as acquire printed them.
type leaseFlags struct {
	id    string
	token uint64
}

func (f *leaseFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.id, "id", "", "the lease's secret `ID` (32 hex digits, from acquire)")
	cmd.Flags().Uint64Var(&f.token, "token", 0, "the lease's fencing `TOKEN` (from acquire)")
}

// lease returns the lease the flags name on key, checked as the server would.
func (f *leaseFlags) lease(key string) (lease.Lease, error) {
	if f.id == "" {
		return lease.Lease{}, usageError(errors.New("--id is required"))
	}
	if f.token == 0 {
		return lease.Lease{}, usageError(errors.New("--token is required"))
	}
	id, err := lease.ParseID(f.id)
	if err != nil {
		return lease.Lease{}, err
	}
	l := lease.Lease{Key: key, Token: lease.Token(f.token), ID: id}
	if err := lease.ValidateLease(l); err != nil {
		return lease.Lease{}, err
	}
	return l, nil
}
