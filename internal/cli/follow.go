package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leasehq/lease"
)

// Pauses between attempts to resume a broken stream (lease watch, lease
// leader --watch): doubling from the first to the last, and back to the
// first once a stream delivers again.
const (
	resumeMin = 100 * time.Millisecond
	resumeMax = 5 * time.Second
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

// follow runs one stream after another until ctx ends, and then returns
// nil. stream follows one stream and returns the error that ended it, and
// whether it delivered anything before. A break (an error matching
// lease.ErrUnavailable: the connection lost, the server restarting) is said
// on stderr and followed by a new stream after a pause, unless noResume is
// set; then, as for any other error (a refused credential, a backend that
// cannot watch), follow returns it.
func (a *app) follow(ctx context.Context, what string, noResume bool, stream func(context.Context) (bool, error)) error {
	pause := resumeMin
	for {
		delivered, err := stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			// Streams end without an error only when ctx does.
			err = errors.New(what + ": the stream ended")
		}
		if noResume || !errors.Is(err, lease.ErrUnavailable) {
			return err
		}
		if delivered {
			pause = resumeMin
		}
		a.logf("%s: %s; resuming in %s (the new stream starts from the current state)", what, oneLine(err), formatDuration(pause))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, resumeMax)
	}
}

// logf prints one line on stderr, as errors are printed.
func (a *app) logf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "lease: "+format+"\n", args...)
}
