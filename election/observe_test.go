package election_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/memstore"
)

// silentAfterSync is a backend whose watch goes silent after its current
// state, without breaking: a frozen link, a hung server. It offers Watch
// alone (not WatchKey, which would bypass it).
type silentAfterSync struct {
	lease.Backend
	w lease.Watcher
}

func (s silentAfterSync) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		for ev, err := range s.w.Watch(ctx, prefix) {
			if !yield(ev, err) {
				return
			}
			if ev.Kind == lease.Synced {
				<-ctx.Done()
				return
			}
		}
	}
}

// observeUnrenewed, in a synctest bubble, acquires "svc" for a on store for
// a second, never renewed, and observes it through b until the returned
// cancel: it returns a's lease and the reports, the first one (a) taken.
func observeUnrenewed(t *testing.T, store lease.Backend, b lease.Backend) (lease.Lease, <-chan election.Leader, context.CancelFunc) {
	t.Helper()
	e := newElector(t, b, time.Second)
	l, err := store.Acquire(t.Context(), "svc", "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	seen, stop := reports(t, e, "svc")
	synctest.Wait()
	if ld := <-seen; ld.Value != "a" || ld.Token != l.Token {
		t.Fatalf("first report %+v, want a", ld)
	}
	return l, seen, stop
}

// reports observes key through e in the background (in a synctest bubble)
// and sends each report it makes on the returned channel; stop ends the
// Observe and waits for its end.
func reports(t *testing.T, e *election.Elector, key string) (<-chan election.Leader, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	seen := make(chan election.Leader, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ld, err := range e.Observe(ctx, key) {
			if err != nil {
				t.Errorf("Observe: %v", err)
				return
			}
			select {
			case seen <- ld:
			case <-ctx.Done():
				return
			}
		}
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return seen, stop
}

// TestObserveNeverReportsALeaderPastExpires: a leader whose Expires passes
// with no renewal seen is no longer reported, whether or not the backend's
// watch tells its expiry (here it tells nothing more at all): Observe
// reports "no leader known" at Expires, on the Elector's clock (fake time).
func TestObserveNeverReportsALeaderPastExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		l, seen, cancel := observeUnrenewed(t, store, silentAfterSync{store, store})
		time.Sleep(time.Until(l.Expires) - time.Millisecond)
		synctest.Wait()
		select {
		case ld := <-seen:
			t.Fatalf("reported %+v before a's Expires", ld)
		default:
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		select {
		case ld := <-seen:
			if ld.Token != 0 || ld.Key != "svc" {
				t.Fatalf("at a's Expires: %+v, want no leader known", ld)
			}
		default:
			t.Fatal("a is still reported as leader at its Expires, with no renewal seen")
		}
		cancel()
		synctest.Wait()
	})
}

// TestObserveFollowsExactlyItsKey: Observe("svc") is not told of
// svc-cache/x, svc2 or a semaphore named svc, and thousands of their
// changes, more than a watch buffers, do not break it while its reader
// is away.
func TestObserveFollowsExactlyItsKey(t *testing.T) {
	ctx := ctxFor(t)
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	e := newElector(t, store, time.Minute)
	next, stop := iter.Pull2(e.Observe(ctx, "svc"))
	defer stop()
	if ld, err, ok := next(); !ok || err != nil || ld.Token != 0 {
		t.Fatalf("first report %+v, %v (open %v), want no leader", ld, err, ok)
	}
	var others []lease.Lease
	for _, k := range []string{"svc-cache/x", "svc2", "svc/slots/0", "svc/queue"} {
		l, err := store.Acquire(ctx, k, "other", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, l)
	}
	for i := range 2000 { // the reader is away meanwhile
		o := &others[i%len(others)]
		if *o, err = store.Renew(ctx, *o, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	term, err := e.Campaign(ctx, "svc", "leader")
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(ctx)
	if ld, err, ok := next(); !ok || err != nil || ld.Value != "leader" || ld.Token != term.Token() {
		t.Fatalf("after other keys' changes: %+v, %v (open %v); want svc's leader and nothing else", ld, err, ok)
	}
}

// failRelease refuses every release, as an unreachable backend would.
type failRelease struct{ lease.Backend }

func (failRelease) Release(context.Context, lease.Lease) error { return lease.ErrUnavailable }

// TestResignContract: Resign returns nil whenever the lease is known freed
// or gone — after a loss only the client saw (the backend still held it:
// Resign frees it), after the backend's expiry — and an error only when it
// cannot tell (the backend failed).
func TestResignContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		const ttl = time.Second
		a, err := newElector(t, failRenew{store}, ttl).Campaign(ctx, "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		<-a.Done() // its safe deadline, before the backend's expiry
		if !errors.Is(a.Err(), lease.ErrLost) {
			t.Fatalf("a's term ended with %v, want ErrLost", a.Err())
		}
		if _, err := store.Get(ctx, "svc"); err != nil {
			t.Fatalf("the backend no longer holds a's lease at a's safe deadline: %v", err)
		}
		if err := a.Resign(ctx); err != nil {
			t.Errorf("Resign after a loss only the client saw: %v, want nil", err)
		}
		if l, err := store.Get(ctx, "svc"); !errors.Is(err, lease.ErrNotFound) {
			t.Errorf("after Resign the backend holds %+v (%v), want the lease freed", l, err)
		}
		if err := a.Resign(ctx); err != nil {
			t.Errorf("Resign again: %v, want nil", err)
		}

		b, err := newElector(t, failRenew{store}, ttl).Campaign(ctx, "svc", "b")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl) // past the backend's expiry too
		if err := b.Resign(ctx); err != nil {
			t.Errorf("Resign after the backend's expiry: %v, want nil", err)
		}

		c, err := newElector(t, failRelease{store}, ttl).Campaign(ctx, "svc", "c")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Resign(ctx); !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("Resign through a backend that cannot release: %v, want ErrUnavailable", err)
		}
		d, err := newElector(t, failRelease{failRenew{store}}, ttl).Campaign(ctx, "other", "d")
		if err != nil {
			t.Fatal(err)
		}
		<-d.Done()
		if err := d.Resign(ctx); !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("Resign of a lost term through a backend that cannot release: %v, want ErrUnavailable", err)
		}
	})
}

// TestLeadEndsWithItsContext: a term won with Lead ends when Lead's ctx
// does, and its lease is freed at once: the same candidate, restarted, is
// elected again without waiting out the TTL. Campaign's ctx bounds only
// the wait.
func TestLeadEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		e := newElector(t, store, time.Hour)
		ctx, cancel := context.WithCancel(t.Context())
		term, err := e.Lead(ctx, "svc", "node-1")
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		synctest.Wait()
		if !errors.Is(term.Err(), lease.ErrReleased) {
			t.Fatalf("the term after Lead's ctx ended: %v, want ErrReleased", term.Err())
		}
		if _, err := store.Get(t.Context(), "svc"); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("after Lead's ctx ended the lease is still held (%v)", err)
		}
		actx, acancel := context.WithTimeout(t.Context(), time.Millisecond)
		again, err := e.Campaign(actx, "svc", "node-1")
		acancel()
		if err != nil {
			t.Fatalf("the restarted candidate: %v, want elected at once", err)
		}
		defer again.Resign(t.Context())

		wctx, wcancel := context.WithTimeout(t.Context(), time.Second)
		held, err := e.Campaign(wctx, "svc2", "node-1")
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := held.Err(); err != nil {
			t.Fatalf("a Campaign whose ctx ended after it won: %v, want the term still held", err)
		}
		_ = held.Resign(t.Context())
	})
}

// TestLeadWhoseContextEndedAsItWon: a Lead whose ctx has ended by the time
// it wins (a shutdown as the key came free; memstore grants a free key to
// an ended ctx) resigns the term at once, without racing Lead's own
// bookkeeping (run with -race).
func TestLeadWhoseContextEndedAsItWon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		e := newElector(t, store, time.Hour)
		for i := range 20 {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			term, err := e.Lead(ctx, "svc", "node-1")
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			synctest.Wait()
			if !errors.Is(term.Err(), lease.ErrReleased) {
				t.Fatalf("round %d: the term after Lead's ctx ended: %v, want ErrReleased", i, term.Err())
			}
			if _, err := store.Get(t.Context(), "svc"); !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("round %d: after Lead's ctx ended the lease is still held (%v)", i, err)
			}
		}
	})
}

// gatedRelease is a backend whose releases wait for gate (a slow link).
type gatedRelease struct {
	lease.Backend
	gate chan struct{}
}

func (b gatedRelease) Release(ctx context.Context, l lease.Lease) error {
	select {
	case <-b.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Backend.Release(ctx, l)
}

// TestResignAfterLeadsContextEnded: a process shutting down ends Lead's
// ctx and resigns the term itself too (a deferred Resign). Resign returns
// nil only once the lease is released — not while the resignation that
// Lead started is still on its way to the backend, after which the
// process may exit and leave the lease to its TTL.
func TestResignAfterLeadsContextEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		b := gatedRelease{store, make(chan struct{})}
		e := newElector(t, b, time.Hour)
		ctx, cancel := context.WithCancel(t.Context())
		term, err := e.Lead(ctx, "svc", "node-1")
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		synctest.Wait() // Lead's resignation waits at the gate
		type result struct {
			err     error
			holding error // the store's Get when Resign returned
		}
		done := make(chan result, 1)
		go func() {
			err := term.Resign(context.Background())
			_, held := store.Get(context.Background(), "svc")
			done <- result{err, held}
		}()
		synctest.Wait()
		select {
		case r := <-done:
			close(b.gate) // let Lead's resignation end before the bubble does
			synctest.Wait()
			t.Fatalf("Resign returned (%v) while Lead's release still waited on its way; the store's Get then: %v", r.err, r.holding)
		default:
		}
		close(b.gate)
		synctest.Wait()
		select {
		case r := <-done:
			if r.err != nil || !errors.Is(r.holding, lease.ErrNotFound) {
				t.Fatalf("Resign = %v, Get after it = %v; want nil and ErrNotFound", r.err, r.holding)
			}
		default:
			t.Fatal("Resign still waits after the release went through")
		}
	})
}

// cutOnCue is a backend whose watch breaks (lease.ErrUnavailable) when the
// test sends on cut, as a restarting server's stream does. It offers Watch
// alone (not WatchKey, which would bypass it).
type cutOnCue struct {
	lease.Backend
	w   lease.Watcher
	cut chan struct{}
}

func (c cutOnCue) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cut := make(chan struct{})
		go func() {
			select {
			case <-c.cut:
				close(cut)
				cancel()
			case <-wctx.Done():
			}
		}()
		for ev, err := range c.w.Watch(wctx, prefix) {
			if !yield(ev, err) {
				return
			}
		}
		select {
		case <-cut:
			yield(lease.Event{}, fmt.Errorf("%w: cutOnCue: the watch breaks", lease.ErrUnavailable))
		default:
		}
	}
}

// TestObserveResumesAfterABreak: a watch that breaks is watched again, and
// Observe goes on: a leader that changed while no watch was open is
// reported from the new watch's picture, one that did not is not reported
// twice, and the changes after it are reported as before.
func TestObserveResumesAfterABreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		b := cutOnCue{Backend: store, w: store, cut: make(chan struct{})}
		e := newElector(t, b, time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		la, err := store.Acquire(ctx, "svc", "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan election.Leader, 10)
		breaks := 0
		go func() {
			defer close(seen)
			for ld, err := range e.Observe(ctx, "svc", lease.FollowOnBreak(func(error, time.Duration) error {
				breaks++
				return nil
			})) {
				if err != nil {
					t.Errorf("Observe: %v", err)
					return
				}
				seen <- ld
			}
		}()
		report := func(what string) election.Leader {
			t.Helper()
			synctest.Wait()
			select {
			case ld := <-seen:
				return ld
			default:
				t.Fatalf("no report %s", what)
				return election.Leader{}
			}
		}
		if ld := report("at the start"); ld.Value != "a" {
			t.Fatalf("first report %+v, want a", ld)
		}
		// The watch breaks; a hands over to b while no watch is open.
		b.cut <- struct{}{}
		synctest.Wait()
		if err := store.Release(ctx, la); err != nil {
			t.Fatal(err)
		}
		lb, err := store.Acquire(ctx, "svc", "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // past any pause before the next watch
		if ld := report("after the break"); ld.Value != "b" || ld.Token != lb.Token {
			t.Fatalf("after the break: %+v, want b", ld)
		}
		// A break with no change meanwhile tells nothing new.
		b.cut <- struct{}{}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case ld := <-seen:
			t.Fatalf("after a break with b still leader: %+v, want no report", ld)
		default:
		}
		// b resigns while no watch is open: the new picture has no leader.
		b.cut <- struct{}{}
		synctest.Wait()
		if err := store.Release(ctx, lb); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if ld := report("after b's release"); ld.Token != 0 || ld.Key != "svc" {
			t.Fatalf("after b's release: %+v, want no leader", ld)
		}
		// And the watch goes on.
		lc, err := store.Acquire(ctx, "svc", "c", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ld := report("after c's election"); ld.Token != lc.Token {
			t.Fatalf("after c's election: %+v, want c", ld)
		}
		if breaks != 3 {
			t.Errorf("FollowOnBreak heard %d breaks, want 3", breaks)
		}
		cancel()
		for range seen {
		}
	})
}

// breakThenStall is a backend whose first watch breaks right after its
// Synced, and whose later watches tell the state and then nothing, not even
// Synced: a new picture that never completes (a server that hangs after a
// restart).
type breakThenStall struct {
	lease.Backend
	w       lease.Watcher
	watches *int
}

func (b breakThenStall) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		*b.watches++
		first := *b.watches == 1
		for ev, err := range b.w.Watch(ctx, prefix) {
			if ev.Kind == lease.Synced && !first {
				<-ctx.Done()
				return
			}
			if !yield(ev, err) {
				return
			}
			if ev.Kind == lease.Synced {
				yield(lease.Event{}, fmt.Errorf("%w: breakThenStall: the watch breaks", lease.ErrUnavailable))
				return
			}
		}
	}
}

// TestObserveLeaderExpiresDuringAResync: while a new watch's picture comes
// in after a break, the leader last reported is still never reported past
// its Expires.
func TestObserveLeaderExpiresDuringAResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		var watches int
		l, seen, cancel := observeUnrenewed(t, store, breakThenStall{store, store, &watches})
		time.Sleep(time.Until(l.Expires))
		synctest.Wait()
		if watches < 2 {
			t.Fatalf("%d watches by a's Expires, want the second one stalled", watches)
		}
		select {
		case ld := <-seen:
			if ld.Token != 0 {
				t.Fatalf("at a's Expires: %+v, want no leader known", ld)
			}
		default:
			t.Fatal("a is still reported as leader at its Expires, during a new picture")
		}
		cancel()
		synctest.Wait()
	})
}

// readFault is a backend that cannot watch (nor notify), whose reads can
// be made to fail as an unreachable server's do (lease.ErrUnavailable), or
// to hang as a silent link's do, until their context ends.
type readFault struct {
	lease.Backend // the interface alone: no Watch, no WaitChange
	mode          atomic.Int32
}

const (
	readsAnswer = iota
	readsFail
	readsHang
)

func (b *readFault) Get(ctx context.Context, key string) (lease.Lease, error) {
	switch b.mode.Load() {
	case readsFail:
		return lease.Lease{}, fmt.Errorf("%w: the test's server is away", lease.ErrUnavailable)
	case readsHang:
		<-ctx.Done()
		return lease.Lease{}, ctx.Err()
	}
	return b.Backend.Get(ctx, key)
}

// TestObserveByReadingNeverReportsALeaderPastExpires: reading instead of
// watching, Observe reports "no leader known" once the leader's Expires,
// as last read, passes while its reads fail or hang (the backend went away,
// the link went silent), not the old leader for as long as the fault lasts;
// and the leader again once a read finds it. While reads answer, a leader
// that renews is reported once, with no gap.
func TestObserveByReadingNeverReportsALeaderPastExpires(t *testing.T) {
	for _, mode := range []struct {
		name string
		m    int32
	}{{"fail", readsFail}, {"hang", readsHang}} {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, err := memstore.New()
				if err != nil {
					t.Fatal(err)
				}
				const ttl = time.Second
				term, err := newElector(t, store, ttl).Campaign(t.Context(), "svc", "a")
				if err != nil {
					t.Fatal(err)
				}
				b := &readFault{Backend: store}
				seen, stop := reports(t, newElector(t, b, ttl), "svc")
				synctest.Wait()
				if ld := <-seen; ld.Value != "a" || ld.Token != term.Token() {
					t.Fatalf("first report %+v, want a", ld)
				}
				time.Sleep(3 * ttl)
				synctest.Wait()
				select {
				case ld := <-seen:
					t.Fatalf("reported %+v while a led and renewed, reads answering", ld)
				default:
				}

				b.mode.Store(mode.m)
				// The last read that answered saw a's Expires at most a TTL
				// ahead; reads come at least every 500 ms (the backoff's max).
				time.Sleep(ttl + 500*time.Millisecond)
				synctest.Wait()
				select {
				case ld := <-seen:
					if ld.Token != 0 {
						t.Fatalf("with reads that %s: reported %+v, want no leader known", mode.name, ld)
					}
				default:
					t.Fatalf("with reads that %s, a is still reported as leader past its Expires", mode.name)
				}

				b.mode.Store(readsAnswer)
				time.Sleep(ttl)
				synctest.Wait()
				if mode.m != readsHang { // a hung read holds Observe until its ctx ends
					select {
					case ld := <-seen:
						if ld.Value != "a" || ld.Token != term.Token() {
							t.Fatalf("once reads answer again: reported %+v, want a", ld)
						}
					default:
						t.Fatal("once reads answer again, a (still leading) is not reported")
					}
				}
				stop()
				if err := term.Resign(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// flakyRelease fails the releases whose turn (counted from 1) is in fail,
// without releasing, as a backend that cannot be reached for a moment.
type flakyRelease struct {
	lease.Backend
	mu   sync.Mutex
	n    int
	fail map[int]bool
}

func (b *flakyRelease) Release(ctx context.Context, l lease.Lease) error {
	b.mu.Lock()
	b.n++
	fail := b.fail[b.n]
	b.mu.Unlock()
	if fail {
		return fmt.Errorf("%w: release %d refused for the test", lease.ErrUnavailable, b.n)
	}
	return b.Backend.Release(ctx, l)
}

// TestResignAgain: a Resign that could not tell (the backend failed) is
// followed by one that asks the backend again, and answers nil only once
// the lease is gone; after a nil, Resign answers nil without asking.
// Campaign's term used to answer the second Resign nil without asking,
// its lease still held until the TTL; a Lead term's second Resign, after
// a nil, asked again and failed.
func TestResignAgain(t *testing.T) {
	t.Run("Campaign", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := memtest.New(t)
			b := &flakyRelease{Backend: store, fail: map[int]bool{1: true}}
			term, err := newElector(t, b, time.Hour).Campaign(t.Context(), "svc", "a")
			if err != nil {
				t.Fatal(err)
			}
			if err := term.Resign(t.Context()); !errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("Resign through a failed release = %v, want ErrUnavailable", err)
			}
			if err := term.Resign(t.Context()); err != nil {
				t.Fatalf("Resign again, the backend back = %v", err)
			}
			if l, err := store.Get(t.Context(), "svc"); err == nil {
				t.Errorf("Resign again answered nil, but the store still holds the term (token %d)", l.Token)
			}
		})
	})
	t.Run("Lead", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := memtest.New(t)
			// 1: Lead's own resignation at ctx's end; 2: the first
			// Resign's, which frees it; 3: refused, if asked.
			b := &flakyRelease{Backend: store, fail: map[int]bool{1: true, 3: true}}
			ctx, cancel := context.WithCancel(t.Context())
			term, err := newElector(t, b, time.Hour).Lead(ctx, "svc", "a")
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			synctest.Wait()
			if err := term.Resign(t.Context()); err != nil {
				t.Fatalf("Resign after Lead's resignation failed = %v, want it freed by asking again", err)
			}
			if _, err := store.Get(t.Context(), "svc"); !errors.Is(err, lease.ErrNotFound) {
				t.Fatalf("Resign = nil, the store's Get = %v", err)
			}
			if err := term.Resign(t.Context()); err != nil {
				t.Errorf("Resign again after nil = %v, want nil", err)
			}
		})
	})
}

// slowRead answers each Get with the lease as it was when asked, delay
// later, as over a slow link.
type slowRead struct {
	lease.Backend // the interface alone: no Watch, no WaitChange
	delay         time.Duration
}

func (b slowRead) Get(ctx context.Context, key string) (lease.Lease, error) {
	l, err := b.Backend.Get(ctx, key)
	select { // on the bubble's clock: the test runs in one
	case <-time.After(b.delay):
	case <-ctx.Done():
		return lease.Lease{}, ctx.Err()
	}
	return l, err
}

// TestObserveByReadingDoesNotReportALateRead: reading instead of
// watching, a read answered after the leader's Expires (a slow link) does
// not report that leader, as a watch's late news does not: Observe never
// reports a leader past its Expires. It used to report it, 500 ms past its
// Expires here, until the next slow read a second later.
func TestObserveByReadingDoesNotReportALateRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		const ttl = time.Second
		term, err := newElector(t, failRenew{store}, ttl).Campaign(t.Context(), "svc", "a")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 2)
		seen, stop := reports(t, newElector(t, slowRead{store, ttl}, ttl), "svc")
		defer stop()
		for range 3 {
			select {
			case ld := <-seen:
				if ld.Token != 0 && !time.Now().Before(ld.Expires) {
					t.Fatalf("reported %q (token %d) %v past its Expires", ld.Value, ld.Token, time.Since(ld.Expires))
				}
			case <-time.After(5 * ttl):
			}
		}
		_ = term.Resign(context.Background())
	})
}

// countingCtx is a context that never ends and counts the functions
// context.AfterFunc has registered on it and not stopped. (Its own Done
// keeps the context package from registering them on a parent instead.)
type countingCtx struct {
	context.Context // for Value
	done            chan struct{}
	live            atomic.Int32
}

func (c *countingCtx) Done() <-chan struct{} { return c.done }
func (c *countingCtx) Err() error            { return nil }

func (c *countingCtx) AfterFunc(func()) func() bool {
	c.live.Add(1)
	var once sync.Once
	return func() bool {
		stopped := false
		once.Do(func() {
			stopped = true
			c.live.Add(-1)
		})
		return stopped
	}
}

// TestLeadLeavesNothingOnItsContextAfterALoss: a term won with Lead and
// lost is resigned at once (the backend held it for the drift margin
// still) and leaves nothing registered on Lead's ctx, so that a process
// leading again and again under one long-lived ctx, resigning none of its
// lost terms, does not keep them all: it used to keep each until ctx
// ended.
func TestLeadLeavesNothingOnItsContextAfterALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		ctx := &countingCtx{Context: context.Background(), done: make(chan struct{})}
		e := newElector(t, failRenew{store}, time.Minute)
		var terms []*election.Term
		for i := range 3 {
			term, err := e.Lead(ctx, "svc", "a")
			if err != nil {
				t.Fatal(err)
			}
			<-term.Done() // lost at its safe deadline: its renewals fail
			synctest.Wait()
			if !errors.Is(term.Err(), lease.ErrLost) {
				t.Fatalf("term %d ended with %v, want ErrLost", i, term.Err())
			}
			if _, err := store.Get(t.Context(), "svc"); !errors.Is(err, lease.ErrNotFound) {
				t.Errorf("term %d: lost, and its lease still held on the backend (%v): not resigned", i, err)
			}
			if n := ctx.live.Load(); n != 0 {
				t.Errorf("after term %d was lost, %d functions stay registered on Lead's ctx", i, n)
			}
			terms = append(terms, term) // and not resigned, as a careless loop would
		}
		for i, term := range terms {
			if err := term.Resign(t.Context()); err != nil {
				t.Errorf("Resign of the lost term %d = %v", i, err)
			}
		}
	})
}
