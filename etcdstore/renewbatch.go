package etcdstore

import (
	"context"

	"github.com/leasehq/lease"
)

var _ lease.BatchRenewer = (*Store)(nil)

// RenewBatch implements lease.BatchRenewer in etcd's natural form: the
// renewals run side by side (lease.RenewAll's 64 at a time), so that the
// Store's group commit sends their reads as one Txn and their writes as
// another (one Raft entry for up to 64 renewals), with their keep-alives
// in flight together between the two. Each is made as Renew makes it: one
// that is no longer held fails alone with ErrNotHeld; any other failure
// fails the batch, some of whose renewals may have been made.
func (s *Store) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	return lease.RenewAll(ctx, renewOnly{s}, renewals)
}

// renewOnly is the Store without its RenewBatch, for lease.RenewAll.
type renewOnly struct{ lease.Backend }
