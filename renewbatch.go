package lease

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// MaxRenewBatch is the most renewals one RenewBatch call takes.
const MaxRenewBatch = 256

// Renewal asks for Lease to be renewed for TTL, as Backend.Renew does.
type Renewal struct {
	Lease Lease
	TTL   time.Duration
}

// RenewResult is one renewal's outcome: the renewed lease, or Err, which
// matches ErrNotHeld when the lease is no longer current.
type RenewResult struct {
	Lease Lease
	Err   error
}

// BatchRenewer is implemented by backends that renew many leases in one
// step (one commit, one request), so that a client holding thousands of
// leases keeps them alive at a fraction of the cost of one Renew each.
// RenewAll uses it where a backend has it.
type BatchRenewer interface {
	// RenewBatch renews each of renewals as Renew would, and answers them
	// in their order. Each renewal stands alone: one that is no longer
	// held fails with ErrNotHeld and the others are renewed. The error is
	// the batch's as a whole, and then nothing is answered: ErrInvalid for
	// a batch that ValidateRenewals refuses, in which case nothing is
	// renewed; ctx's end or ErrUnavailable, after which any of the
	// renewals may or may not have been made (renewing again is harmless);
	// or another refusal of the whole batch, which may be for the sake of
	// one of its renewals (leasehttp: a key outside the credential's
	// prefixes), after which none was made. A Client asks a batch refused
	// so (an error other than ErrUnavailable) again one renewal each, so
	// that the refusal costs only the holds it is about.
	RenewBatch(ctx context.Context, renewals []Renewal) ([]RenewResult, error)
}

// ValidateRenewals reports whether renewals is a batch RenewBatch takes:
// 1 to MaxRenewBatch renewals, each a well-formed lease (ValidateLease) and
// a valid TTL. The error matches ErrInvalid.
func ValidateRenewals(renewals []Renewal) error {
	if len(renewals) == 0 || len(renewals) > MaxRenewBatch {
		return invalidf("a batch holds 1 to %d renewals, got %d", MaxRenewBatch, len(renewals))
	}
	for i, r := range renewals {
		if err := ValidateLease(r.Lease); err != nil {
			return invalidf("renewal %d: %v", i, trimInvalid(err))
		}
		if err := ValidateTTL(r.TTL); err != nil {
			return invalidf("renewal %d: %v", i, trimInvalid(err))
		}
	}
	return nil
}

// renewAllParallel is how many Renew calls RenewAll has in flight on a
// backend without RenewBatch: a batch of MaxRenewBatch costs 4 round trips
// of the backend, not 256, and a backend that commits concurrent calls
// together (etcdstore's group commit, up to 64 operations a Txn) gets
// them all at once.
const renewAllParallel = 64

// RenewAll renews renewals on b: in one RenewBatch call where b is a
// BatchRenewer, else by one Renew each, up to 64 at a time. Its answer is
// RenewBatch's, in the renewals' order.
func RenewAll(ctx context.Context, b Backend, renewals []Renewal) ([]RenewResult, error) {
	if br, ok := b.(BatchRenewer); ok {
		return br.RenewBatch(ctx, renewals)
	}
	if err := ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	out := make([]RenewResult, len(renewals))
	errs := make([]error, len(renewals)) // failures of the backend, not of a renewal
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(renewAllParallel, len(renewals)) {
		wg.Go(func() {
			for i := range next {
				l, err := b.Renew(ctx, renewals[i].Lease, renewals[i].TTL)
				if err != nil && !errors.Is(err, ErrNotHeld) {
					errs[i] = err
					continue
				}
				out[i] = RenewResult{Lease: l, Err: err}
			}
		})
	}
	for i := range renewals {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// trimInvalid is err's message without the ErrInvalid prefix, to be wrapped
// again.
func trimInvalid(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
}
