package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehq/lease"
)

// untilSignal returns ctx, cancelled when SIGINT or SIGTERM arrives (on
// a.signals in tests): the way to end a command that streams. The func
// stops listening.
func (a *app) untilSignal(ctx context.Context) (context.Context, func()) {
	sigs := a.signals
	stopNotify := func() {}
	if sigs == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		sigs, stopNotify = ch, func() { signal.Stop(ch) }
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		cancel()
		stopNotify()
	}
}

// onBreak is how lease watch and lease leader --watch meet a break of
// their stream (lease.ErrUnavailable: the connection lost, the server
// restarting, a silent stream), which lease.Follow watches again after a
// pause: it says so on stderr, or, with noResume, ends the command with the
// break's error.
func (a *app) onBreak(what string, noResume bool) lease.FollowOption {
	return lease.FollowOnBreak(func(err error, pause time.Duration) error {
		if noResume {
			return err
		}
		a.logf("%s: %s; resuming in %s (the new stream starts from the current state)", what, oneLine(err), formatDuration(pause))
		return nil
	})
}

// logf prints one line on stderr, as errors are printed.
func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "lease: "+format+"\n", args...)
}
