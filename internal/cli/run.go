package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/semaphore"
	"github.com/spf13/cobra"
)

// Environment variables `lease run` gives its command.
const (
	EnvKey   = "LEASE_KEY"
	EnvToken = "LEASE_TOKEN"
	EnvOwner = "LEASE_OWNER"
	// EnvSlot is the number of the slot lease run --slots holds, 0 to N-1.
	EnvSlot = "LEASE_SLOT"
)

// forwardedSignals are passed on to the command's process group rather than
// ending lease run: the command decides how to stop, and the lease is
// released after it has. The group gets them, as a terminal or a shell gives
// a job's signals to every process of the job: a shell that died of one while
// its child worked on would otherwise leave that child working on without
// the lease, released as the shell exited.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

func newRunCommand(a *app) *cobra.Command {
	var (
		rf remoteFlags
		o  runOptions
	)
	cmd := &cobra.Command{
		Use:   "run KEY [--slots N] [--ttl 30s] [--wait 0] [--grace 10s] [--owner NAME] -- CMD [ARGS...]",
		Short: "Hold a lease on KEY while CMD runs; stop CMD if the lease is lost",
		Long: `run acquires KEY, starts CMD (directly, without a shell) and renews the lease in
the background while CMD runs. CMD's environment has LEASE_KEY, LEASE_TOKEN (the
fencing token to pass to the protected resource) and LEASE_OWNER.

If the lease is lost (renewals fail until the safe deadline, 10% of the TTL
plus 20ms before the server expires it, or the server says it is gone), CMD and
the processes it started (CMD runs in a process group of its own) get SIGTERM
and, any of them still running --grace later, SIGKILL; lease run then exits
within --grace of the loss, even if the server does not answer. SIGINT, SIGTERM
and SIGHUP sent to lease run are passed on to CMD's process group, as a
terminal sends ^C to every process of a job. The lease is released when CMD
exits; processes it started and left running get SIGTERM first, and SIGKILL
--grace later, so that none works on without the lease.

--ttl is at least ` + minRunTTL.String() + `: that margin may take at most half of the TTL.
SIGTERM comes the margin before the lease expires; whatever CMD does after that
it does without the lease, while another holder may have it, and only the
fencing token in LEASE_TOKEN keeps its late writes out. So --grace may not
exceed --ttl unless --allow-grace-past-ttl is given.

With --wait 0 (the default) it tries once and gives up if KEY is held, which is
what a cron job that must not run twice wants; with --wait 5m it queues.
SIGINT, SIGTERM or SIGHUP while it acquires gives the wait up without running
CMD: it waits at most --timeout (a second signal ends that at once) for the
server's word that the wait has ended, says whether it came or the lease's
fate is unknown, and exits 75. After a signal passed on to CMD, it says how
CMD exited and that the lease was released.

With --slots N, KEY names a semaphore of N slots (package semaphore): lease run
holds one free slot, the lease KEY/slots/I, so that at most N commands run at
once under KEY. LEASE_KEY is then the slot's lease key, LEASE_TOKEN its token
(fence per slot) and LEASE_SLOT its number I, 0 to N-1. --wait 0 takes any
free slot or gives up; a --wait queues on the lease KEY/queue, first come,
first served, until a slot frees. Everything else is as without --slots.

Exit status: CMD's (128+N if a signal N ended it); 75 (try later) if the lease
could not be had (held, server unreachable or unavailable) or was lost before
CMD's exit was seen; 1 if the server refused the credentials (unauthorized,
forbidden) or answered as no lease server does, which retrying will not fix;
127 if CMD could not be started; 2 on a usage error.

` + remoteEnvHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 1 || len(args) < 2 {
				return argsError(cmd, errors.New("lease run takes KEY, then -- and the command to run"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.key, o.argv = args[0], args[1:]
			o.slotsSet = cmd.Flags().Changed("slots")
			if !cmd.Flags().Changed("grace") {
				// The default grace ends where the TTL does, for a short
				// TTL: the refusal of a longer grace is for one asked for.
				o.grace = min(o.grace, o.ttl)
			}
			return runUnder(cmd.Context(), a, &rf, o)
		},
	}
	rf.add(cmd, false)
	cmd.Flags().DurationVar(&o.ttl, "ttl", 30*time.Second, "lease time to live, "+minRunTTL.String()+" to "+lease.MaxTTL.String()+"; renewed about every ttl/3")
	addWaitFlag(cmd, &o.wait)
	cmd.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lease is lost; at most --ttl, which is the default when shorter")
	cmd.Flags().BoolVar(&o.allowGracePastTTL, "allow-grace-past-ttl", false, "allow a --grace longer than --ttl (CMD may then work long after its lease expired)")
	addOwnerFlag(cmd, &o.owner)
	cmd.Flags().IntVar(&o.slots, "slots", 0, "hold one of `N` slots of the semaphore KEY (1 to "+strconv.Itoa(semaphore.MaxSlots)+") instead of the lease KEY")
	return cmd
}

// runUnder is lease run (and lease campaign) once its flags are read:
// it holds the lease (or slot) while o.argv runs, and returns the exit
// status as an *ExitError.
func runUnder(ctx context.Context, a *app, rf *remoteFlags, o runOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	b, err := rf.backend(a)
	if err != nil {
		// A server URL or token that cannot be used: a retry
		// will not fix it, so not 75.
		return err
	}
	defer closeBackend(b)
	c, err := newRunClient(b, o.owner, a.clock)
	if err != nil {
		return err
	}
	var sem *semaphore.Semaphore
	if o.slots > 0 {
		sem, err = semaphore.New(c, o.key, o.slots, o.ttl)
		if err != nil {
			return err
		}
	}
	sigs := a.signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, forwardedSignals...)
		defer signal.Stop(ch)
		sigs = ch
	}
	clock := a.clock
	if clock == nil {
		clock = lease.SystemClock{}
	}
	r := &runner{
		client:  c,
		sem:     sem,
		clock:   clock,
		opts:    o,
		stdin:   a.stdin,
		stdout:  a.stdout,
		stderr:  a.stderr,
		env:     os.Environ(),
		signals: sigs,
		timeout: rf.timeout,
	}
	code := r.run(ctx)
	if code != ExitOK {
		return &ExitError{Code: code}
	}
	return nil
}

// Drift margin of lease run: it gives the lease up (and sends SIGTERM) when
// 90% of the TTL minus 20 ms has passed since the last successful renewal was
// sent, so that the command has a moment to stop before the server lets
// anyone else in. The root Client's default (1% + 2 ms) suits code that
// checks its context; a separate process needs longer to hear the news.
const (
	runDriftFraction = 0.1
	runDriftMin      = 20 * time.Millisecond
)

// runMargin is the drift margin lease run's Client gives a lease of ttl: the
// rule of lease.WithDriftMargin, fraction×TTL + minimum.
func runMargin(ttl time.Duration) time.Duration {
	return time.Duration(runDriftFraction*float64(ttl)) + runDriftMin
}

// minRunTTL is the shortest --ttl lease run accepts, in whole milliseconds:
// the Client refuses a TTL whose drift margin would take more than half of
// it (lease.WithDriftMargin), so the minimum follows from lease run's
// margin — runDriftMin/(0.5−runDriftFraction), 50ms — and is computed here by
// the Client's own integer test rather than written down, so that it moves
// with the margin.
var minRunTTL = func() time.Duration {
	for ttl := lease.MinTTL; ttl < lease.MaxTTL; ttl += time.Millisecond {
		if runMargin(ttl) <= ttl/2 {
			return ttl
		}
	}
	return lease.MaxTTL
}()

// newRunClient returns the Client lease run holds its lease through.
func newRunClient(b lease.Backend, owner string, clock lease.Clock) (*lease.Client, error) {
	opts := []lease.Option{lease.WithDriftMargin(runDriftFraction, runDriftMin)}
	if owner != "" {
		opts = append(opts, lease.WithOwner(owner))
	}
	if clock != nil {
		opts = append(opts, lease.WithClock(clock))
	}
	return lease.NewClient(b, opts...)
}

// runOptions are lease run's arguments.
type runOptions struct {
	key               string
	ttl, wait, grace  time.Duration
	allowGracePastTTL bool
	owner             string
	slots             int // 0: a lease, not a semaphore's slot
	slotsSet          bool
	argv              []string
	campaign          bool // lease campaign: the lease is a term of leadership, and is told as one
}

func (o runOptions) check() error {
	if err := lease.ValidateKey(o.key); err != nil {
		return err
	}
	if o.ttl < minRunTTL {
		return usageError(fmt.Errorf("--ttl %v is too short for lease run: the minimum is %v (it gives a lease up %.0f%% of its TTL + %v before it expires, and that margin may take at most half of the TTL)",
			o.ttl, minRunTTL, 100*runDriftFraction, runDriftMin))
	}
	if err := lease.ValidateTTL(o.ttl); err != nil {
		return err
	}
	if o.owner != "" {
		if err := lease.ValidateOwner(o.owner); err != nil {
			return err
		}
	}
	if o.wait < 0 {
		return usageError(fmt.Errorf("--wait must not be negative, got %v", o.wait))
	}
	if o.slotsSet && (o.slots < 1 || o.slots > semaphore.MaxSlots) {
		return usageError(fmt.Errorf("--slots must be 1 to %d, got %d", semaphore.MaxSlots, o.slots))
	}
	if o.grace < 0 {
		return usageError(fmt.Errorf("--grace must not be negative, got %v", o.grace))
	}
	if o.grace > o.ttl && !o.allowGracePastTTL {
		return usageError(fmt.Errorf("--grace %v is longer than --ttl %v: after a loss, a CMD that ignores SIGTERM could work on for most of --grace after the lease expired, while another holder has it; shorten --grace, or pass --allow-grace-past-ttl if the resource rejects late writes by their fencing token",
			o.grace, o.ttl))
	}
	if len(o.argv) == 0 || o.argv[0] == "" {
		return usageError(errors.New("no command given after --"))
	}
	return nil
}

// runner holds a lease while a command runs. It reports through its exit
// status and one line per event on stderr.
type runner struct {
	client         *lease.Client
	sem            *semaphore.Semaphore // lease run --slots: hold one of its slots
	clock          lease.Clock          // the client's
	opts           runOptions
	stdin          io.Reader
	stdout, stderr io.Writer
	env            []string         // the command's environment, before LEASE_*
	signals        <-chan os.Signal // to be forwarded to the command
	timeout        time.Duration    // for each call to the server outside the wait
}

// lockedWriter serialises the writes of the command's output copier and of
// the runner's own messages when they share a writer that is not a file.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// shareable returns w, made safe for two writers at once unless it is a
// file (which the command then inherits directly, terminal and all).
func shareable(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

func (r *runner) logf(format string, args ...any) {
	name := "run"
	if r.opts.campaign {
		name = "campaign"
	}
	fmt.Fprintf(r.stderr, "lease: "+name+": "+format+"\n", args...)
}

// waiting, released and releasing are what r's messages call its wait and
// its release: lease campaign waits to lead, and resigns a term.
func (r *runner) waiting() string {
	if r.opts.campaign {
		return "waiting to lead"
	}
	return "acquiring"
}

func (r *runner) released() string {
	if r.opts.campaign {
		return "resigned the term of"
	}
	return "released"
}

func (r *runner) releasing() string {
	if r.opts.campaign {
		return "resigning the term of"
	}
	return "releasing"
}

// run acquires the lease, runs the command under it and releases it, and
// returns the exit status lease run should have.
func (r *runner) run(ctx context.Context) int {
	r.stderr = shareable(r.stderr)
	h, slot, code := r.acquire(ctx)
	if h == nil {
		return code
	}
	var (
		// lostAt is when the loss was acted on (zero: never); the release
		// that follows a loss must not keep lease run past the grace period.
		lostAt time.Time
		// signalled is the last signal passed on to CMD, and status CMD's
		// exit status: after a signal, what became of the lease is said,
		// as lease acquire says it when interrupted.
		signalled os.Signal
		status    int
	)
	defer func() {
		err := r.release(h, lostAt)
		switch {
		case err != nil && !errors.Is(err, lease.ErrLost): // lost was said already
			r.logf("%s %q (token %d): %s", r.releasing(), h.Key(), h.Token(), oneLine(err))
		case err == nil && signalled != nil && lostAt.IsZero():
			r.logf("%v passed on to %s, which exited (status %d); %s %q (token %d)",
				signalled, r.opts.argv[0], status, r.released(), h.Key(), h.Token())
		}
	}()

	cmd := exec.Command(r.opts.argv[0], r.opts.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.stdin, r.stdout, r.stderr
	cmd.Env = append(append([]string(nil), r.env...),
		EnvKey+"="+h.Key(),
		EnvToken+"="+strconv.FormatUint(uint64(h.Token()), 10),
		EnvOwner+"="+r.client.Owner(),
	)
	if r.sem != nil {
		cmd.Env = append(cmd.Env, EnvSlot+"="+strconv.Itoa(slot))
	}
	if h.Err() != nil {
		lostAt = time.Now()
		r.logf("lost %q (token %d) before %s could start: %v", h.Key(), h.Token(), r.opts.argv[0], h.Err())
		return ExitTempFail
	}
	pg := prepareGroup(cmd, r.stdin, r.stdout, r.stderr)
	if err := cmd.Start(); err != nil {
		pg.restore()
		r.logf("cannot start %s: %v", r.opts.argv[0], err)
		return ExitCannotRun
	}
	pg.started(cmd.Process)
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pg.restore()
		exited <- err
	}()

	var (
		done  = h.Done()
		grace <-chan time.Time
	)
	for {
		select {
		case err := <-exited:
			if lostAt.IsZero() && h.Err() != nil {
				// The safe deadline passed while CMD ran, and the timer
				// that ends the Hold has not run yet (this process was
				// paused, say), or it ran just as CMD exited: either way
				// CMD did not finish under the lease, so its status is
				// not the answer, whichever event select picked first.
				lostAt = time.Now()
				r.logf("%v; %s exited meanwhile (status %d, not passed on)", h.Err(), r.opts.argv[0], exitStatus(err))
				if pg.alive() {
					pg.signal(syscall.SIGTERM)
					t := time.NewTimer(r.opts.grace)
					defer t.Stop()
					grace = t.C
				}
			}
			if !lostAt.IsZero() {
				r.stopGroup(pg, grace)
				return ExitTempFail
			}
			if pg.alive() {
				// CMD left processes running (a shell's background job, or
				// a child it did not wait for): they are stopped before
				// the release, lest they work on without the lease while
				// the next holder starts.
				r.logf("%s exited (status %d) leaving processes it started running; sending them SIGTERM (SIGKILL in %s) before releasing %q",
					r.opts.argv[0], exitStatus(err), formatDuration(r.opts.grace), h.Key())
				pg.signal(syscall.SIGTERM)
				t := time.NewTimer(r.opts.grace)
				defer t.Stop()
				r.stopGroup(pg, t.C)
			}
			status = exitStatus(err)
			return status
		case <-done:
			done = nil
			lostAt = time.Now()
			r.logf("%v; sending SIGTERM to %s (SIGKILL in %s)", h.Err(), r.opts.argv[0], formatDuration(r.opts.grace))
			// To the whole group: whatever CMD started works under the
			// lease too.
			pg.signal(syscall.SIGTERM)
			t := time.NewTimer(r.opts.grace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			grace = nil
			r.logf("%s still running %s after SIGTERM; sending SIGKILL", r.opts.argv[0], formatDuration(r.opts.grace))
			pg.signal(syscall.SIGKILL)
		case sig := <-r.signals:
			signalled = sig
			if s, ok := sig.(syscall.Signal); ok {
				pg.signal(s)
			} else {
				_ = cmd.Process.Signal(sig)
			}
		}
	}
}

// stopGroup waits, after a loss, for the processes CMD left behind in its
// group to end, and kills them when the grace period (still pending on
// grace, or over if nil) runs out: none of them may go on working without
// the lease.
func (r *runner) stopGroup(pg *procGroup, grace <-chan time.Time) {
	if !pg.alive() {
		return
	}
	if grace == nil {
		pg.signal(syscall.SIGKILL)
		return
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for pg.alive() {
		select {
		case <-grace:
			r.logf("processes started by %s still running %s after SIGTERM; sending SIGKILL", r.opts.argv[0], formatDuration(r.opts.grace))
			pg.signal(syscall.SIGKILL)
			return
		case <-tick.C:
		}
	}
}

// acquire gets the lease (or the slot, and its number), or returns nil and
// the exit status.
func (r *runner) acquire(ctx context.Context) (*lease.Hold, int, int) {
	key, ttl := r.opts.key, r.opts.ttl
	actx, cancel := context.WithTimeout(ctx, onTop(r.timeout, r.opts.wait))
	defer cancel()
	// A signal while we wait or try means: give up, nothing has started.
	var (
		stop        = make(chan struct{})
		gone        = make(chan struct{})
		interrupted os.Signal
	)
	go func() {
		defer close(gone)
		select {
		case interrupted = <-r.signals:
			cancel()
		case <-stop:
		}
	}()
	var (
		h    *lease.Hold
		slot int
		err  error
	)
	switch {
	case r.sem != nil:
		h, slot, err = r.takeSlot(actx)
	case r.opts.wait == 0:
		h, err = r.client.TryAcquire(actx, key, ttl)
	default:
		wctx, wcancel := context.WithTimeout(actx, r.opts.wait)
		h, err = r.client.Acquire(wctx, key, ttl)
		if err != nil && wctx.Err() != nil && actx.Err() == nil {
			err = lease.StillHeld(actx, r.client.Backend(), key, err)
		}
		wcancel()
	}
	close(stop)
	<-gone
	if interrupted != nil {
		r.gaveUp(interrupted, h)
		return nil, 0, ExitTempFail
	}
	if err == nil {
		return h, slot, ExitOK
	}
	if errors.Is(err, lease.ErrInvalid) {
		r.logf("%v", err)
		return nil, 0, ExitUsage
	}
	r.logf("not running %s: %s", r.opts.argv[0], oneLine(heldMessage(err)))
	return nil, 0, acquireFailed(err)
}

// gaveUp says, in one line, what became of the wait (lease campaign's
// candidacy) that the signal sig gave up, as lease acquire says it: h, a
// lease granted as the signal came, is given back; otherwise it waits, for
// at most --timeout or until a second signal, for the server's word that
// the wait has ended (a lease granted as it ended given back:
// leasehttp.Client.AwaitGivenUp), which closing the Client would cut short,
// and says whether it came.
func (r *runner) gaveUp(sig os.Signal, h *lease.Hold) {
	what := fmt.Sprintf("%v while %s %q: not running %s", sig, r.waiting(), r.opts.key, r.opts.argv[0])
	if h != nil {
		if err := r.release(h, time.Time{}); err != nil && !errors.Is(err, lease.ErrLost) {
			r.logf("%s; it was granted (token %d) as the wait was given up, and giving it back failed: %s; it is held until its TTL of %v runs out",
				what, h.Token(), oneLine(err), r.opts.ttl)
			return
		}
		r.logf("%s; it was granted (token %d) as the wait was given up, and given back", what, h.Token())
		return
	}
	g, ok := r.client.Backend().(interface{ AwaitGivenUp(context.Context) error })
	if !ok {
		r.logf("%s; the wait was given up", what)
		return
	}
	// A second signal ends the wait for the server's word at once, as it
	// ends lease acquire's.
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	var (
		again    os.Signal
		watching = make(chan struct{})
	)
	go func() {
		defer close(watching)
		select {
		case again = <-r.signals:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := g.AwaitGivenUp(ctx)
	late := ctx.Err() != nil
	cancel()
	<-watching
	unknown := fmt.Sprintf("the lease's fate is unknown (if it was granted as the wait ended, it is held until its TTL of %v runs out)", r.opts.ttl)
	switch {
	case err == nil:
		r.logf("%s; the wait was given up, and the server confirmed it: nothing is held", what)
	case again != nil:
		r.logf("%s; the wait was given up, and a second signal (%v) ended the wait for the server's word: %s", what, again, unknown)
	case late:
		r.logf("%s; the wait was given up, and the server did not confirm it within --timeout %v: %s", what, r.timeout, unknown)
	default:
		// The Client's own requests to give the wait up went unanswered
		// (they are bounded by its timeout, not --timeout).
		r.logf("%s; the wait was given up, and the server did not confirm it: %s", what, unknown)
	}
}

// takeSlot takes a free slot of r.sem, trying once with --wait 0 and
// otherwise queueing for up to --wait.
func (r *runner) takeSlot(ctx context.Context) (*lease.Hold, int, error) {
	var (
		s   *semaphore.Slot
		err error
	)
	if r.opts.wait == 0 {
		s, err = r.sem.TryAcquire(ctx)
	} else {
		wctx, cancel := context.WithTimeout(ctx, r.opts.wait)
		s, err = r.sem.Acquire(wctx)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: all %d slots of %q stayed held for --wait %v", lease.ErrHeld, r.opts.slots, r.opts.key, r.opts.wait)
			// Unless the server cannot be asked (as for a lease: stillHeld).
			if _, gerr := r.client.Backend().Get(ctx, r.opts.key+"/slots/0"); gerr != nil && !errors.Is(gerr, lease.ErrNotFound) {
				err = fmt.Errorf("the wait for a slot of %q ran out without an answer: %w", r.opts.key, gerr)
			}
		}
		cancel()
	}
	if err != nil {
		return nil, 0, err
	}
	return s.Hold, s.Number(), nil
}

// acquireFailed is lease run's exit status when it could not get the lease
// for a reason other than a usage error. 75 (EX_TEMPFAIL) tells a cron
// wrapper to try again later, so it is kept for what may pass by itself: the
// key held, the server unreachable or unable to answer (ErrUnavailable), no
// answer within --timeout. Anything else — credentials refused (401, 403),
// an answer no lease server gives (a proxy's 404 page, a server of another
// kind at that URL) — is a configuration error that a retry will not fix: 1.
func acquireFailed(err error) int {
	switch {
	case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ExitTempFail
	}
	return ExitFailure
}

// release gives the lease back after the command has exited, and returns
// what Release returned (ErrLost for a loss, which was said already); its
// caller says a failure, which does not change the exit status: the work is
// done, and the lease expires on its own.
//
// The release is bounded by --timeout and by the lease's remaining TTL: once
// the lease has expired on the server a release frees nothing. After a loss
// (lostAt not zero) the lease is gone or about to expire, the release is a
// courtesy to the next holder, and it is also cut off at the end of the grace
// period that began at lostAt, so that lease run exits within --grace of the
// loss even when the server has stopped answering.
func (r *runner) release(h *lease.Hold, lostAt time.Time) error {
	limit := min(r.timeout, r.untilExpiry(h))
	if !lostAt.IsZero() {
		limit = min(limit, time.Until(lostAt.Add(r.opts.grace)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(limit, 0))
	defer cancel()
	return h.Release(ctx)
}

// untilExpiry is how long h's lease has left on the server, as far as the
// client can tell: its safe deadline is the send time of the last successful
// renewal + TTL − drift margin, so the lease lasts until deadline + margin
// (judged by the TTL the server granted, as the Hold judges it).
func (r *runner) untilExpiry(h *lease.Hold) time.Duration {
	ttl := r.opts.ttl
	if g := h.Lease().TTL; g > 0 && g < ttl {
		ttl = g
	}
	return h.Deadline().Add(runMargin(ttl)).Sub(r.clock.Now())
}

// exitStatus turns the command's end into lease run's exit status: its exit
// code, or 128+N if signal N ended it.
func exitStatus(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return ExitFailure
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
