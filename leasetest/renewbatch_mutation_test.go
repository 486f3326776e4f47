package leasetest_test

import (
	"context"
	"slices"

	"github.com/leasehq/lease"
)

var _ lease.BatchRenewer = (*wrapper)(nil)

// RenewBatch is honest unless a mutant's hook replaces it: the batch is
// checked whole, then each renewal made as Renew makes it.
func (w *wrapper) RenewBatch(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	if w.h.renewBatch != nil {
		return w.h.renewBatch(ctx, renewals)
	}
	if err := lease.ValidateRenewals(renewals); err != nil {
		return nil, err
	}
	return w.renewEach(ctx, renewals), nil
}

func (w *wrapper) renewEach(ctx context.Context, renewals []lease.Renewal) []lease.RenewResult {
	out := make([]lease.RenewResult, len(renewals))
	for i, r := range renewals {
		l, err := w.renew(ctx, r.Lease, r.TTL)
		out[i] = lease.RenewResult{Lease: l, Err: err}
	}
	return out
}

func init() { mutants = append(mutants, renewBatchMutants...) }

// alteredAnswers makes w's RenewBatch check the batch and renew each
// renewal honestly, then alter the answers before giving them.
func alteredAnswers(w *wrapper, alter func(renewals []lease.Renewal, out []lease.RenewResult)) {
	w.h.renewBatch = func(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
		if err := lease.ValidateRenewals(renewals); err != nil {
			return nil, err
		}
		out := w.renewEach(ctx, renewals)
		alter(renewals, out)
		return out, nil
	}
}

var renewBatchMutants = []mutant{
	{name: "BatchRenewsReleased", breaks: "a batch answers a released lease as renewed",
		caughtBy: []string{"RenewBatch/EachAsRenew"},
		install: func(w *wrapper) {
			alteredAnswers(w, func(renewals []lease.Renewal, out []lease.RenewResult) {
				for i := range out {
					if out[i].Err != nil {
						out[i] = lease.RenewResult{Lease: renewals[i].Lease}
					}
				}
			})
		}},
	{name: "BatchIgnoresID", breaks: "a batch renews a lease named by its token without its secret ID (I4)",
		caughtBy: []string{"RenewBatch/EachAsRenew"},
		install: func(w *wrapper) {
			w.h.renewBatch = func(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
				if err := lease.ValidateRenewals(renewals); err != nil {
					return nil, err
				}
				renewals = slices.Clone(renewals)
				for i, r := range renewals {
					if cur, ok := w.lastOf(r.Lease.Key); ok && cur.Token == r.Lease.Token {
						renewals[i].Lease.ID = cur.ID
					}
				}
				return w.renewEach(ctx, renewals), nil
			}
		}},
	{name: "BatchRenewsCurrentHolder", breaks: "a batch renews whatever lease holds the key now, not the one named",
		caughtBy: []string{"RenewBatch/EachAsRenew"},
		install: func(w *wrapper) {
			w.h.renewBatch = func(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
				if err := lease.ValidateRenewals(renewals); err != nil {
					return nil, err
				}
				renewals = slices.Clone(renewals)
				for i, r := range renewals {
					if cur, ok := w.lastOf(r.Lease.Key); ok {
						renewals[i].Lease = cur
					}
				}
				return w.renewEach(ctx, renewals), nil
			}
		}},
	{name: "BatchOutOfOrder", breaks: "a batch's answers are not in the order of its renewals",
		caughtBy: []string{"RenewBatch/EachAsRenew"},
		install: func(w *wrapper) {
			alteredAnswers(w, func(_ []lease.Renewal, out []lease.RenewResult) { slices.Reverse(out) })
		}},
	{name: "BatchRefusesRepeatedKey", breaks: "a batch refuses the second renewal of a key it names twice (a batch keyed by key)",
		caughtBy: []string{"RenewBatch/FullMixedBatch"},
		install: func(w *wrapper) {
			alteredAnswers(w, func(renewals []lease.Renewal, out []lease.RenewResult) {
				seen := map[string]bool{}
				for i, r := range renewals {
					if seen[r.Lease.Key] {
						out[i] = lease.RenewResult{Err: lease.ErrNotHeld}
					}
					seen[r.Lease.Key] = true
				}
			})
		}},
	{name: "BatchFailsWhole", breaks: "one refused renewal fails the whole batch",
		caughtBy: []string{"RenewBatch/FullMixedBatch"},
		install: func(w *wrapper) {
			alteredAnswers(w, func(_ []lease.Renewal, out []lease.RenewResult) {
				for _, r := range out {
					if r.Err != nil {
						for i := range out {
							out[i] = lease.RenewResult{Err: r.Err}
						}
						break
					}
				}
			})
		}},
	{name: "BatchPartlyRenewsMalformed", breaks: "a malformed batch renews the renewals before the malformed one",
		caughtBy: []string{"RenewBatch/MalformedRefusedWhole"},
		install: func(w *wrapper) {
			w.h.renewBatch = func(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error) {
				for i, r := range renewals {
					if err := lease.ValidateRenewals([]lease.Renewal{r}); err != nil {
						return nil, err
					}
					if i == lease.MaxRenewBatch {
						return nil, lease.ValidateRenewals(renewals)
					}
					if _, err := w.renew(ctx, r.Lease, r.TTL); err != nil {
						return nil, err
					}
				}
				return lease.RenewAll(ctx, w.s, renewals)
			}
		}},
}
