package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
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
			// SIGINT or SIGTERM gives the wait up, and lets its end be told
			// to the server before the process exits (giveUp).
			sctx, stopSignals := a.untilSignal(ctx)
			stop := sync.OnceFunc(stopSignals)
			defer stop()
			l, err := acquireOnce(sctx, b, key, owner, ttl, wait)
			if sctx.Err() != nil && ctx.Err() == nil {
				stop() // a second signal ends the process at once
				return giveUp(b, key, ttl, rf.timeout, l, err)
			}
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

// giveUp ends an acquire interrupted by a signal, whose outcome was l and
// err: the Client ends the wait in the background (the server told, a lease
// granted as the wait ended given back: leasehttp.Client.AwaitGivenUp), and
// a lease l granted as the signal came is released here. Both are awaited
// for at most timeout (--timeout), so that a hung server cannot keep the
// process from exiting; past it, what became of such a grant is unknown.
func giveUp(b lease.Backend, key string, ttl, timeout time.Duration, l lease.Lease, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	unknown := fmt.Sprintf("the lease's fate is unknown (if it was granted as the wait ended, it is held until its TTL of %v runs out)", ttl)
	if err == nil {
		if rerr := b.Release(ctx, l); rerr != nil && !errors.Is(rerr, lease.ErrNotHeld) {
			return fmt.Errorf("interrupted: the wait for %q was granted (token %d) as it was given up, and giving it back failed: %v; it is held until its TTL of %v runs out", key, l.Token, rerr, ttl)
		}
		return fmt.Errorf("interrupted: the wait for %q was granted (token %d) as it was given up, and given back", key, l.Token)
	}
	g, ok := b.(interface{ AwaitGivenUp(context.Context) error })
	if !ok {
		return fmt.Errorf("interrupted: the wait for %q was given up: %w", key, err)
	}
	switch gerr := g.AwaitGivenUp(ctx); {
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: the wait for %q was given up, and the server did not confirm it within --timeout %v: %s", key, timeout, unknown)
	case gerr != nil:
		return fmt.Errorf("interrupted: the wait for %q was given up, and the server did not confirm it within --timeout %v: %s", key, timeout, unknown)
	case errors.Is(err, lease.ErrUnavailable):
		// Its answer came as it was given up, and says what went wrong
		// (a grant that could not be given back).
		return fmt.Errorf("interrupted: the wait for %q was given up: %w", key, err)
	}
	return fmt.Errorf("interrupted: the wait for %q was given up, and the server confirmed it: nothing is held for it", key)
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
