// Package demo replays the seed's scenario — a paused worker, an expired
// lease, a late write — on memstore and a fence guard, with a virtual clock.
// Play records what happens; the record prints as a timeline (WriteTimeline)
// or draws as a picture (WriteSVG).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/vclock"
	"github.com/leasehq/lease/memstore"
)

// Options choose the variant of the scenario.
type Options struct {
	// Unfenced writes without a guard, showing the late write winning.
	Unfenced bool
	// Mode is the guard's rule when fenced.
	Mode fence.Mode
}

// State is the resource at the end of the run.
type State struct {
	Value     string
	LastToken lease.Token
}

// Kind is what a Step records.
type Kind int

// The kinds of Step.
const (
	// Acquired: Worker acquired the key, with Token, until Expires.
	Acquired Kind = iota + 1
	// Paused: Worker stopped running.
	Paused
	// Expired: the store reported the lease of Token expired.
	Expired
	// Woke: Worker runs again.
	Woke
	// Wrote: Worker wrote Value with Token; Accepted says whether the
	// resource took it, Highest is the highest token the guard had
	// accepted before (0 unfenced), Err the guard's rejection.
	Wrote
	// ReleaseRefused: the store refused Worker's release of Token (Err).
	ReleaseRefused
)

// Step is one thing that happened, at At on the virtual clock.
type Step struct {
	At       time.Duration // since the start
	Kind     Kind
	Worker   string // empty for Expired
	Token    lease.Token
	Expires  time.Duration // Acquired and Expired: the lease's expiry, since the start
	Value    string        // Wrote
	Accepted bool          // Wrote
	Highest  lease.Token   // Wrote
	Err      error         // Wrote when rejected, ReleaseRefused
}

// Record is one run of the scenario: its steps in order and the resource's
// final state. Every time, token and outcome in it is what the store and
// the guard answered.
type Record struct {
	Options Options
	Key     string
	TTL     time.Duration
	Steps   []Step
	Final   State
}

const (
	key = "job"
	ttl = 100 * time.Millisecond
	// storeWait bounds how long Play waits (on the real clock) for an event
	// the store reports synchronously on the virtual clock: only a broken
	// store makes it wait at all.
	storeWait = 10 * time.Second
)

// Play runs the scenario and records it.
func Play(opts Options) (*Record, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := vclock.New(start)
	store, err := memstore.New(memstore.WithClock(clock))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	since := func(t time.Time) time.Duration { return t.Sub(start) }
	rec := &Record{Options: opts, Key: key, TTL: ttl}
	add := func(s Step) {
		s.At = since(clock.Now())
		rec.Steps = append(rec.Steps, s)
	}

	// The store's own account of the key: the expiry in the picture is the
	// one it reports, when it reports it.
	wctx, cancel := context.WithTimeout(ctx, storeWait)
	defer cancel()
	next, stop := iter.Pull2(store.Watch(wctx, key))
	defer stop()
	event := func(want lease.EventKind) (lease.Event, error) {
		ev, err, ok := next()
		switch {
		case !ok:
			return lease.Event{}, fmt.Errorf("demo: the store's watch ended before %v", want)
		case err != nil:
			return lease.Event{}, fmt.Errorf("demo: watching the store: %w", err)
		case ev.Kind != want:
			return lease.Event{}, fmt.Errorf("demo: the store reported %v, want %v", ev.Kind, want)
		}
		return ev, nil
	}
	if _, err := event(lease.Synced); err != nil {
		return nil, err
	}

	// The protected resource: guarded, or a plain variable that takes any write.
	guarded := fence.NewResource(key, "initial", opts.Mode)
	plain := State{Value: "initial"}
	write := func(who string, token lease.Token, value string) error {
		s := Step{Kind: Wrote, Worker: who, Token: token, Value: value, Accepted: true}
		if opts.Unfenced {
			plain = State{Value: value, LastToken: token}
			add(s)
			return nil
		}
		_, s.Highest = guarded.Read()
		err := guarded.Write(token, value)
		var stale *fence.StaleTokenError
		switch {
		case err == nil:
		case errors.As(err, &stale):
			s.Accepted, s.Highest, s.Err = false, stale.Highest, err
		default:
			return err
		}
		add(s)
		return nil
	}
	acquire := func(who string) (lease.Lease, error) {
		l, err := store.Acquire(ctx, key, who, ttl)
		if err != nil {
			return lease.Lease{}, err
		}
		if _, err := event(lease.Acquired); err != nil {
			return lease.Lease{}, err
		}
		add(Step{Kind: Acquired, Worker: who, Token: l.Token, Expires: since(l.Expires)})
		return l, nil
	}

	a, err := acquire("worker-a")
	if err != nil {
		return nil, err
	}
	add(Step{Kind: Paused, Worker: "worker-a"})

	clock.Advance(ttl)
	ev, err := event(lease.Expired)
	if err != nil {
		return nil, err
	}
	add(Step{Kind: Expired, Token: ev.Lease.Token, Expires: since(ev.Lease.Expires)})

	clock.Advance(time.Millisecond)
	b, err := acquire("worker-b")
	if err != nil {
		return nil, err
	}

	clock.Advance(time.Millisecond)
	if err := write("worker-b", b.Token, "written-by-b"); err != nil {
		return nil, err
	}

	clock.Advance(48 * time.Millisecond)
	add(Step{Kind: Woke, Worker: "worker-a"})
	if err := write("worker-a", a.Token, "late-write-by-a"); err != nil {
		return nil, err
	}
	if err := store.Release(ctx, a); errors.Is(err, lease.ErrNotHeld) {
		add(Step{Kind: ReleaseRefused, Worker: "worker-a", Token: a.Token, Err: err})
	} else {
		return nil, fmt.Errorf("demo: release of the superseded lease: got %v, want ErrNotHeld", err)
	}

	rec.Final = plain
	if !opts.Unfenced {
		rec.Final.Value, rec.Final.LastToken = guarded.Read()
	}
	return rec, nil
}

// Run plays the scenario, writing the timeline to w, and returns the final
// state of the resource.
func Run(w io.Writer, opts Options) (State, error) {
	rec, err := Play(opts)
	if err != nil {
		return State{}, err
	}
	return rec.Final, rec.WriteTimeline(w)
}

// Title is the record's one-line description.
func (r *Record) Title() string {
	if r.Options.Unfenced {
		return "lease demo (unfenced): a paused worker, an expired lease, a late write, and no guard"
	}
	return fmt.Sprintf("lease demo: a paused worker, an expired lease, a late write, and a guard (mode %s)", r.Options.Mode)
}

// Conclusion says how the run ended, in one sentence.
func (r *Record) Conclusion() string {
	if r.Options.Unfenced {
		return "worker-a's late write overwrote worker-b's: the bug fencing tokens prevent (run without --unfenced)."
	}
	return "the guard rejected the late write: worker-b's result stands."
}

// Describe is the timeline's line for s, without its time.
func (r *Record) Describe(s Step) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("t=%dms", d.Milliseconds()) }
	switch s.Kind {
	case Acquired:
		return fmt.Sprintf("%s acquires %q for %v -> token %d, expires %s", s.Worker, r.Key, r.TTL, s.Token, ms(s.Expires))
	case Paused:
		return fmt.Sprintf("%s pauses (a long GC, swap, a stalled network) before it writes", s.Worker)
	case Expired:
		return fmt.Sprintf("the lease on %q expires; worker-a, paused, cannot know", r.Key)
	case Woke:
		return fmt.Sprintf("%s wakes up, still believing it holds %q", s.Worker, r.Key)
	case Wrote:
		switch {
		case r.Options.Unfenced:
			return fmt.Sprintf("%s writes %q with token %d -> accepted (no guard checks the token)", s.Worker, s.Value, s.Token)
		case s.Accepted:
			return fmt.Sprintf("%s writes %q with token %d -> accepted (highest accepted was %d)", s.Worker, s.Value, s.Token, s.Highest)
		}
		return fmt.Sprintf("%s writes %q with token %d -> REJECTED: %v", s.Worker, s.Value, s.Token, s.Err)
	case ReleaseRefused:
		return fmt.Sprintf("%s releases its lease -> refused: %v (the successor is untouched)", s.Worker, s.Err)
	}
	return fmt.Sprintf("step of kind %d", s.Kind)
}

// WriteTimeline prints the record as text, one line per step.
func (r *Record) WriteTimeline(w io.Writer) error {
	p := &printer{w: w}
	p.printf("%s\n\n", r.Title())
	for _, s := range r.Steps {
		p.printf("%-8s  %s\n", fmt.Sprintf("t=%dms", s.At.Milliseconds()), r.Describe(s))
	}
	p.printf("\nfinal state: value=%s lastToken=%d\n%s\n", r.Final.Value, r.Final.LastToken, r.Conclusion())
	return p.err
}

// printer keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
