package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

func newAcquireCommand(a *app) *cobra.Command {
	var (
		rf    remoteFlags
		ttl   time.Duration
		wait  time.Duration
		owner string
	)
	cmd := &cobra.Command{
		Use:   "acquire KEY",
		Short: "Acquire a lease on KEY and print it (with the id and token that renew and release need)",
		Long: `acquire asks the server for a lease on KEY and prints it, including its secret id
and its fencing token. Nothing renews it: use renew before the TTL runs out, or
use lease run to hold a lease for as long as a command runs.

With --wait 0 (the default) it tries once; with --wait 5s it queues behind the
current holder for up to 5s.

` + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := checkKeyTTL(key, ttl); err != nil {
				return err
			}
			if wait < 0 {
				return usageError(fmt.Errorf("--wait must not be negative, got %v", wait))
			}
			if owner == "" {
				owner = lease.DefaultOwner()
			}
			if err := lease.ValidateOwner(owner); err != nil {
				return err
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			ctx, cancel := context.WithTimeout(cmd.Context(), onTop(rf.timeout, wait))
			defer cancel()
			l, err := acquireOnce(ctx, b, key, owner, ttl, wait)
			if err != nil {
				return err
			}
			return writeLease(a.stdout, l, rf.json())
		},
	}
	rf.add(cmd, true)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "time to live, "+lease.MinTTL.String()+" to "+lease.MaxTTL.String())
	addWaitFlag(cmd, &wait)
	addOwnerFlag(cmd, &owner)
	return cmd
}

// onTop is --timeout counted on top of --wait, at most the longest
// time.Duration: two long ones (a wait meant as "for ever") would otherwise
// add up past it to a negative timeout, which ends the wait before it began.
func onTop(timeout, wait time.Duration) time.Duration {
	if wait > math.MaxInt64-timeout {
		return math.MaxInt64
	}
	return timeout + wait
}

// acquireOnce acquires key, waiting up to wait in the server's queue. A wait
// that ends without the lease is reported as ErrHeld naming the holder.
func acquireOnce(ctx context.Context, b lease.Backend, key, owner string, ttl, wait time.Duration) (lease.Lease, error) {
	if wait == 0 {
		l, err := b.Acquire(ctx, key, owner, ttl)
		return l, heldMessage(err)
	}
	wa, ok := b.(lease.WaitAcquirer)
	if !ok {
		return lease.Lease{}, fmt.Errorf("this server cannot queue acquisitions; use --wait 0")
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	l, err := wa.AcquireWait(wctx, key, owner, ttl)
	if err == nil {
		return l, nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		// Our wait ran out: say who is in the way. A server that cannot
		// be asked is that failure, not a key held: a wait whose every
		// request was refused until --wait ran out had reached no server
		// at all, and reporting it held (exit 3, 75 for run) hid that.
		err = lease.StillHeld(ctx, b, key, err)
	}
	return lease.Lease{}, heldMessage(err)
}

// heldMessage rewrites a *lease.HeldError as the CLI's sentence about the
// holder, keeping it matchable as ErrHeld.
func heldMessage(err error) error {
	var he *lease.HeldError
	if errors.As(err, &he) {
		return &holderError{he}
	}
	return err
}

// holderError says who holds the key, without the sentinel's own words.
type holderError struct{ he *lease.HeldError }

func (e *holderError) Error() string { return describeHolder(e.he) }
func (e *holderError) Unwrap() error { return e.he }

// checkKeyTTL validates what every acquiring command is given before it
// talks to anyone.
func checkKeyTTL(key string, ttl time.Duration) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	return lease.ValidateTTL(ttl)
}
