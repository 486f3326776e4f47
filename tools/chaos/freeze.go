package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehq/lease"
)

// freezer stands for a process pause below the worker's own goroutine: while
// frozen, every call the worker's lease.Client makes to its backend — the
// Hold's background renewals included — waits, as it would if the whole
// process were stopped by a GC pause or SIGSTOP. Without it, a paused worker
// goroutine would keep its lease alive through renewals and the pause would
// test nothing.
type freezer struct {
	mu   sync.Mutex
	open chan struct{} // closed while not frozen
}

func newFreezer() *freezer {
	f := &freezer{open: make(chan struct{})}
	close(f.open)
	return f
}

// freeze stops calls until thaw.
func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
		f.open = make(chan struct{})
	default: // already frozen
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
	default:
		close(f.open)
	}
}

// wait blocks while frozen, or until ctx ends.
func (f *freezer) wait(ctx context.Context) error {
	f.mu.Lock()
	open := f.open
	f.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// pauseUntilSuperseded freezes f until, on every key of keys, a write with
// a token above the paused worker's own there (tokens[i] for keys[i]) has
// been accepted, its answer recorded in rec, and the key's register (regs[i])
// holds such a token — a newer holder has written, so the worker's next
// write is stale — or until limit passes or ctx ends; then it thaws f. It
// reports whether the tokens were superseded. A pause of a fixed length
// proves nothing on its own: on a loaded machine, or an engine that keeps a
// lease longer than the run believes, it ends before anybody else has taken
// the key, and the paused worker's write is not late at all. The newer
// write's answer must be in the history, not only its effect at the guard:
// a late write invoked before that answer overlaps it, and the checker may
// then order the two either way, so a late write the guard wrongly took
// could pass. The registers are read through their guards, on servers the
// faults do not touch, every poll.
func (f *freezer) pauseUntilSuperseded(ctx context.Context, rec *Recorder, keys []string, regs []Register, tokens []lease.Token, limit, poll time.Duration) (bool, error) {
	f.freeze()
	defer f.thaw()
	deadline := time.Now().Add(limit)
	for {
		superseded := true
		for i, reg := range regs {
			if !rec.AcceptedAbove(keys[i], tokens[i]) {
				superseded = false
				break
			}
			rctx, cancel := context.WithTimeout(context.Background(), guardLimit)
			_, tok, err := reg.Read(rctx)
			cancel()
			if err != nil {
				return false, fmt.Errorf("chaos: register read during a pause failed: %w", err)
			}
			if tok <= tokens[i] {
				superseded = false
				break
			}
		}
		if superseded {
			return true, nil
		}
		left := time.Until(deadline)
		if left <= 0 || !sleep(ctx, min(poll, left)) {
			return false, nil
		}
	}
}

// slowClock runs at a tenth of the real rate from start: a Client on it
// judges its safe deadline ten times as late as it should
// (Config.SlowClocks), so that, at a 200 ms TTL, it still believes in a
// lease some 2 s after its last renewal — long after a newer holder has
// written, however loaded the machine. (At half the rate, a pause that
// began late in a hold sometimes outlasted even the doubled deadline, and
// the control found nothing.)
type slowClock struct{ start time.Time }

const slowness = 10

func (c slowClock) Now() time.Time { return c.start.Add(time.Since(c.start) / slowness) }

func (c slowClock) AfterFunc(d time.Duration, f func()) lease.Timer {
	return time.AfterFunc(slowness*d, f)
}

// frozenBackend passes every call through f.
type frozenBackend struct {
	b lease.Backend
	f *freezer
}

func (x frozenBackend) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := x.f.wait(ctx); err != nil {
		return lease.Lease{}, err
	}
	return x.b.Acquire(ctx, key, owner, ttl)
}

func (x frozenBackend) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if err := x.f.wait(ctx); err != nil {
		return lease.Lease{}, err
	}
	return x.b.Renew(ctx, l, ttl)
}

func (x frozenBackend) Release(ctx context.Context, l lease.Lease) error {
	if err := x.f.wait(ctx); err != nil {
		return err
	}
	return x.b.Release(ctx, l)
}

func (x frozenBackend) Get(ctx context.Context, key string) (lease.Lease, error) {
	if err := x.f.wait(ctx); err != nil {
		return lease.Lease{}, err
	}
	return x.b.Get(ctx, key)
}

func (x frozenBackend) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	if err := x.f.wait(ctx); err != nil {
		return lease.ListPage{}, err
	}
	return x.b.List(ctx, prefix, page)
}

type frozenWaiter struct{ frozenBackend }

func (x frozenWaiter) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if err := x.f.wait(ctx); err != nil {
		return lease.Lease{}, err
	}
	return x.b.(lease.WaitAcquirer).AcquireWait(ctx, key, owner, ttl)
}

type frozenNotifier struct{ frozenBackend }

func (x frozenNotifier) WaitChange(ctx context.Context, key string) error {
	if err := x.f.wait(ctx); err != nil {
		return err
	}
	return x.b.(lease.Notifier).WaitChange(ctx, key)
}

type frozenBoth struct{ frozenBackend }

func (x frozenBoth) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	return frozenWaiter(x).AcquireWait(ctx, key, owner, ttl)
}

func (x frozenBoth) WaitChange(ctx context.Context, key string) error {
	return frozenNotifier(x).WaitChange(ctx, key)
}

// freezable wraps b, keeping the optional interfaces b has, so that
// lease.Client chooses the same way of waiting as it would for b itself.
func freezable(b lease.Backend, f *freezer) lease.Backend {
	base := frozenBackend{b: b, f: f}
	_, wa := b.(lease.WaitAcquirer)
	_, n := b.(lease.Notifier)
	switch {
	case wa && n:
		return frozenBoth{base}
	case wa:
		return frozenWaiter{base}
	case n:
		return frozenNotifier{base}
	}
	return base
}
