package leasetest_test

// Mutation testing of the conformance suite: each mutant below is memstore
// with one thing broken, and the suite must fail it. A suite that passes a
// broken backend proves nothing about the real ones.
//
// TestMutantsCaught runs this test binary again once per mutant, with
// LEASETEST_MUTANT naming it, so that the suite's failure is the child's
// exit status rather than this test's. By default a child runs only the
// suite's subtests that mutant.caughtBy names, and at least one of them must
// fail; with LEASETEST_MUTATION_FULL=1 every child runs the whole suite and
// the test reports which subtests failed (for auditing a change to the
// suite). The unbroken wrapper, "Control", always runs the whole suite and
// must pass it: the mutants fail for what they break, not for the wrapper.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest"
	"github.com/leasehq/lease/memstore"
)

const (
	envMutant = "LEASETEST_MUTANT"
	envFull   = "LEASETEST_MUTATION_FULL"
	control   = "Control"
)

// hooks replace a wrapper's methods; a nil hook is memstore's method.
type hooks struct {
	acquire     func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error)
	renew       func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error)
	release     func(ctx context.Context, l lease.Lease) error
	get         func(ctx context.Context, key string) (lease.Lease, error)
	list        func(ctx context.Context, prefix string) ([]lease.Lease, error) // every lease under prefix: List pages it
	page        func(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error)
	acquireWait func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error)
	waitChange  func(ctx context.Context, key string) error
	watch       func(ctx context.Context, prefix string) iter.Seq2[lease.Event, error]
	renewBatch  func(ctx context.Context, renewals []lease.Renewal) ([]lease.RenewResult, error)
	close       func() error
}

// wrapper is a lease.Backend, WaitAcquirer, Notifier, Watcher and io.Closer
// over a memstore that remembers what it granted, so that mutants can
// misuse it.
type wrapper struct {
	s *memstore.Store
	h hooks

	closeOnce sync.Once
	closed    chan struct{} // closed by Close

	mu       sync.Mutex
	last     map[string]lease.Lease // per key, the last generation granted or renewed, until released
	released map[lease.ID]bool
	releases map[string]int      // per key, successful releases so far
	queues   map[string][]*int   // per key, pollWait's waiters in arrival order
	acquired map[lease.ID]string // ID → key, for every generation granted
}

var (
	_ lease.Backend      = (*wrapper)(nil)
	_ lease.WaitAcquirer = (*wrapper)(nil)
	_ lease.Notifier     = (*wrapper)(nil)
	_ lease.Watcher      = (*wrapper)(nil)
	_ io.Closer          = (*wrapper)(nil)
)

// errClosed is what WaitChange returns once the wrapper is closed, as a
// store's does.
var errClosed = fmt.Errorf("wrapper: %w: closed", lease.ErrUnavailable)

func newWrapper(tb testing.TB) *wrapper {
	return &wrapper{
		s:        memtest.New(tb),
		closed:   make(chan struct{}),
		last:     map[string]lease.Lease{},
		released: map[lease.ID]bool{},
		releases: map[string]int{},
		queues:   map[string][]*int{},
		acquired: map[lease.ID]string{},
	}
}

func (w *wrapper) note(l lease.Lease) {
	w.mu.Lock()
	w.last[l.Key] = l
	w.acquired[l.ID] = l.Key
	w.mu.Unlock()
}

// lastOf returns the last generation of key this wrapper granted or renewed
// and did not release: the current lease, or an expired or superseded one.
func (w *wrapper) lastOf(key string) (lease.Lease, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l, ok := w.last[key]
	return l, ok
}

// The honest operations, which keep the wrapper's records.

func (w *wrapper) acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := w.s.Acquire(ctx, key, owner, ttl)
	if err == nil {
		w.note(l)
	}
	return l, err
}

func (w *wrapper) renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	r, err := w.s.Renew(ctx, l, ttl)
	if err == nil {
		w.note(r)
	}
	return r, err
}

func (w *wrapper) release(ctx context.Context, l lease.Lease) error {
	err := w.s.Release(ctx, l)
	if err == nil {
		w.mu.Lock()
		if w.last[l.Key].ID == l.ID {
			delete(w.last, l.Key)
		}
		w.released[l.ID] = true
		w.releases[l.Key]++
		w.mu.Unlock()
	}
	return err
}

func (w *wrapper) acquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := w.s.AcquireWait(ctx, key, owner, ttl)
	if err == nil {
		w.note(l)
	}
	return l, err
}

// waitChange polls: allowed, as WaitChange may return early.
func (w *wrapper) waitChange(ctx context.Context, key string) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	for {
		select {
		case <-w.closed:
			return errClosed
		default:
		}
		if _, err := w.s.Get(ctx, key); errors.Is(err, lease.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.closed:
			return errClosed
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitRelease is WaitChange woken by releases only: by the next release of
// key after the call, or, if free, at once unless wakeIfFree is false.
func (w *wrapper) waitRelease(ctx context.Context, key string, wakeIfFree bool) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	w.mu.Lock()
	seen := w.releases[key]
	w.mu.Unlock()
	if _, err := w.s.Get(ctx, key); wakeIfFree && errors.Is(err, lease.ErrNotFound) {
		return nil
	}
	for {
		w.mu.Lock()
		n := w.releases[key]
		w.mu.Unlock()
		if n != seen {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.closed:
			return errClosed
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// close ends pending WaitChange calls and fails later ones; the memstore
// underneath stays usable, as a store's caller-owned client does.
func (w *wrapper) close() error {
	w.closeOnce.Do(func() { close(w.closed) })
	return nil
}

// pollWait is AcquireWait by polling, serving waiters first come first
// served, or last come first served if lifo; if onRelease, a waiter tries
// again only after a release of the key, not after its expiry.
func (w *wrapper) pollWait(ctx context.Context, key, owner string, ttl time.Duration, lifo, onRelease bool) (lease.Lease, error) {
	if err := lease.ValidateAcquire(key, owner, ttl); err != nil {
		return lease.Lease{}, err
	}
	me := new(int)
	w.mu.Lock()
	w.queues[key] = append(w.queues[key], me)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.queues[key] = slices.DeleteFunc(w.queues[key], func(p *int) bool { return p == me })
		w.mu.Unlock()
	}()
	seen := -1
	for {
		w.mu.Lock()
		q := w.queues[key]
		head := q[0]
		if lifo {
			head = q[len(q)-1]
		}
		rel := w.releases[key]
		w.mu.Unlock()
		if head == me && (!onRelease || rel != seen) {
			seen = rel
			l, err := w.acquire(ctx, key, owner, ttl)
			if !errors.Is(err, lease.ErrHeld) {
				return l, err
			}
		}
		select {
		case <-ctx.Done():
			return lease.Lease{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// steal acquires key, releasing its current holder first.
func (w *wrapper) steal(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := w.acquire(ctx, key, owner, ttl)
	if !errors.Is(err, lease.ErrHeld) {
		return l, err
	}
	if h, ok := w.lastOf(key); ok {
		_ = w.release(ctx, h)
	}
	return w.acquire(ctx, key, owner, ttl)
}

// The lease.Backend methods: hooks where set, else the honest operations.

func (w *wrapper) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if w.h.acquire != nil {
		return w.h.acquire(ctx, key, owner, ttl)
	}
	return w.acquire(ctx, key, owner, ttl)
}

func (w *wrapper) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	if w.h.renew != nil {
		return w.h.renew(ctx, l, ttl)
	}
	return w.renew(ctx, l, ttl)
}

func (w *wrapper) Release(ctx context.Context, l lease.Lease) error {
	if w.h.release != nil {
		return w.h.release(ctx, l)
	}
	return w.release(ctx, l)
}

func (w *wrapper) Get(ctx context.Context, key string) (lease.Lease, error) {
	if w.h.get != nil {
		return w.h.get(ctx, key)
	}
	return w.s.Get(ctx, key)
}

func (w *wrapper) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	switch {
	case w.h.page != nil:
		return w.h.page(ctx, prefix, page)
	case w.h.list != nil:
		// Pages of the hook's whole list, in its order, honestly cut.
		limit, after, err := lease.ParseList(prefix, page)
		if err != nil {
			return lease.ListPage{}, err
		}
		ls, err := w.h.list(ctx, prefix)
		if err != nil {
			return lease.ListPage{}, err
		}
		ls = slices.DeleteFunc(ls, func(l lease.Lease) bool { return l.Key <= after })
		return lease.PageOf(ls[:min(len(ls), limit+1)], limit), nil
	}
	return w.s.List(ctx, prefix, page)
}

// memList is every lease under prefix in s, in key order.
func memList(ctx context.Context, s *memstore.Store, prefix string) ([]lease.Lease, error) {
	var out []lease.Lease
	for l, err := range lease.All(ctx, s, prefix) {
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func (w *wrapper) AcquireWait(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	if w.h.acquireWait != nil {
		return w.h.acquireWait(ctx, key, owner, ttl)
	}
	return w.acquireWait(ctx, key, owner, ttl)
}

func (w *wrapper) WaitChange(ctx context.Context, key string) error {
	if w.h.waitChange != nil {
		return w.h.waitChange(ctx, key)
	}
	return w.waitChange(ctx, key)
}

func (w *wrapper) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	if w.h.watch != nil {
		return w.h.watch(ctx, prefix)
	}
	return w.s.Watch(ctx, prefix)
}

func (w *wrapper) Close() error {
	if w.h.close != nil {
		return w.h.close()
	}
	return w.close()
}

// retoken shows callers tokens other than memstore's, and translates them
// back by the lease's ID.
type retoken struct {
	mu    sync.Mutex
	shown map[lease.ID]lease.Token // ID → token shown for it
	real  map[lease.ID]lease.Token // ID → memstore's token
	view  map[string]lease.Token   // key and memstore's token → token shown
}

func newRetoken() *retoken {
	return &retoken{shown: map[lease.ID]lease.Token{}, real: map[lease.ID]lease.Token{}, view: map[string]lease.Token{}}
}

func viewKey(key string, tok lease.Token) string { return fmt.Sprintf("%s\x00%d", key, tok) }

// show records that l, as memstore has it, is shown with token tok.
func (r *retoken) show(l lease.Lease, tok lease.Token) lease.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shown[l.ID], r.real[l.ID], r.view[viewKey(l.Key, l.Token)] = tok, l.Token, tok
	l.Token = tok
	return l
}

func (r *retoken) shownFor(id lease.ID) (lease.Token, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tok, ok := r.shown[id]
	return tok, ok
}

// toReal translates a caller's lease to memstore's.
func (r *retoken) toReal(l lease.Lease) lease.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if shown, ok := r.shown[l.ID]; ok {
		switch real := r.real[l.ID]; l.Token {
		case shown:
			l.Token = real
		case real: // not what the caller was shown: must not match
			l.Token = real + 1
		}
	}
	return l
}

func (r *retoken) toShown(l lease.Lease) lease.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tok, ok := r.view[viewKey(l.Key, l.Token)]; ok {
		l.Token = tok
	}
	return l
}

// retokened installs hooks showing the tokens that pick chooses for each
// new generation, given memstore's lease.
func retokened(w *wrapper, pick func(l lease.Lease) lease.Token) {
	r := newRetoken()
	w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
		l, err := w.acquire(ctx, key, owner, ttl)
		if err != nil {
			var he *lease.HeldError
			if errors.As(err, &he) {
				he.Token = r.toShown(lease.Lease{Key: he.Key, Token: he.Token}).Token
			}
			return l, err
		}
		return r.show(l, pick(l)), nil
	}
	w.h.acquireWait = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
		l, err := w.acquireWait(ctx, key, owner, ttl)
		if err != nil {
			return l, err
		}
		return r.show(l, pick(l)), nil
	}
	w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
		shown, _ := r.shownFor(l.ID)
		n, err := w.renew(ctx, r.toReal(l), ttl)
		if err != nil {
			return n, err
		}
		return r.show(n, shown), nil
	}
	w.h.release = func(ctx context.Context, l lease.Lease) error { return w.release(ctx, r.toReal(l)) }
	w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
		l, err := w.s.Get(ctx, key)
		if err != nil {
			return l, err
		}
		return r.toShown(l), nil
	}
	w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
		ls, err := memList(ctx, w.s, prefix)
		for i := range ls {
			ls[i] = r.toShown(ls[i])
		}
		return ls, err
	}
}

// reported makes Get and List show a TTL and expiry other than memstore's
// for the generations set names.
type reported struct {
	mu sync.Mutex
	m  map[string]lease.Lease // key and memstore's token → the lease as reported
}

func (r *reported) set(real, shown lease.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]lease.Lease{}
	}
	r.m[viewKey(real.Key, real.Token)] = shown
}

func (r *reported) fix(l lease.Lease) lease.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[viewKey(l.Key, l.Token)]; ok {
		l.TTL, l.Expires = s.TTL, s.Expires
	}
	return l
}

func (r *reported) hookGetList(w *wrapper) {
	w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
		l, err := w.s.Get(ctx, key)
		return r.fix(l), err
	}
	w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
		ls, err := memList(ctx, w.s, prefix)
		for i := range ls {
			ls[i] = r.fix(ls[i])
		}
		return ls, err
	}
}

// shorter is the TTL a mutant that expires early really asks memstore for.
func shorter(ttl time.Duration) time.Duration { return max(ttl/2, lease.MinTTL) }

// globPrefix matches keys against prefix read as a LIKE or glob pattern, as
// a store that does not escape the prefix it searches by would.
func globPrefix(prefix string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range prefix {
		switch r {
		case '_', '?':
			b.WriteString(".")
		case '%', '*':
			b.WriteString(".*")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return regexp.MustCompile(b.String())
}

type mutant struct {
	name   string
	breaks string
	// caughtBy names the suite's subtests of which at least one must fail:
	// top-level ones ("HeldByOther"), or, all under one, subtests of it
	// ("Watch/SlowReader").
	caughtBy []string
	install  func(w *wrapper)
	// reopen, if set, replaces the harmless restart (the same store).
	reopen func(t *testing.T, old lease.Backend) lease.Backend
}

var mutants = []mutant{
	// I1, I2: tokens.
	{name: "TokenReusedAfterRelease", breaks: "every generation of a key gets its first token (I1)",
		caughtBy: []string{"TokensRiseAcrossRelease"},
		install: func(w *wrapper) {
			var mu sync.Mutex
			first := map[string]lease.Token{}
			retokened(w, func(l lease.Lease) lease.Token {
				mu.Lock()
				defer mu.Unlock()
				if tok, ok := first[l.Key]; ok {
					return tok
				}
				first[l.Key] = l.Token
				return l.Token
			})
		}},
	{name: "TokenReusedAfterExpiry", breaks: "a generation after an expiry gets the expired one's token (I1)",
		caughtBy: []string{"TokensRiseAcrossExpiry"},
		install: func(w *wrapper) {
			var mu sync.Mutex
			type gen struct {
				id  lease.ID
				tok lease.Token
			}
			prev := map[string]gen{}
			retokened(w, func(l lease.Lease) lease.Token {
				mu.Lock()
				defer mu.Unlock()
				tok := l.Token
				w.mu.Lock()
				if p, ok := prev[l.Key]; ok && !w.released[p.id] {
					tok = p.tok
				}
				w.mu.Unlock()
				prev[l.Key] = gen{l.ID, tok}
				return tok
			})
		}},
	{name: "TokenStartsAtZero", breaks: "the first token is 0, which means none (I1)",
		caughtBy: []string{"AcquireReturnsLease"},
		install: func(w *wrapper) {
			retokened(w, func(l lease.Lease) lease.Token { return l.Token - 1 })
		}},
	{name: "RenewChangesToken", breaks: "Renew raises the token (I2)",
		caughtBy: []string{"RenewKeepsToken"},
		install: func(w *wrapper) {
			r := newRetoken()
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if err != nil {
					return l, err
				}
				return r.show(l, l.Token), nil
			}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				n, err := w.renew(ctx, r.toReal(l), ttl)
				if err != nil {
					return n, err
				}
				return r.show(n, l.Token+1), nil
			}
			w.h.release = func(ctx context.Context, l lease.Lease) error { return w.release(ctx, r.toReal(l)) }
		}},
	{name: "SameIDAfterExpiry", breaks: "a new generation after an expiry keeps the expired one's ID (I2, I4)",
		caughtBy: []string{"TokensRiseAcrossExpiry"},
		install: func(w *wrapper) {
			var mu sync.Mutex
			real := map[lease.ID]lease.ID{} // shown → memstore's
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				prev, hadPrev := w.lastOf(key)
				l, err := w.acquire(ctx, key, owner, ttl)
				if err != nil || !hadPrev {
					return l, err
				}
				mu.Lock()
				defer mu.Unlock()
				real[prev.ID] = l.ID
				l.ID = prev.ID
				return l, nil
			}
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				mu.Lock()
				if id, ok := real[l.ID]; ok {
					l.ID = id
				}
				mu.Unlock()
				return w.release(ctx, l)
			}
		}},

	// I3: exclusion.
	{name: "AcquireStealsHeldKey", breaks: "Acquire of a held key releases the holder and grants it (I3)",
		caughtBy: []string{"HeldByOther"},
		install:  func(w *wrapper) { w.h.acquire = w.steal }},
	{name: "AcquireReentrant", breaks: "the holder's owner can acquire its key again (I3)",
		caughtBy: []string{"HeldByOther"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if h, ok := w.lastOf(key); ok && h.Owner == owner {
					return w.steal(ctx, key, owner, ttl)
				}
				return w.acquire(ctx, key, owner, ttl)
			}
		}},
	{name: "HeldErrorWithoutHolder", breaks: "ErrHeld comes without the *HeldError naming the holder",
		caughtBy: []string{"HeldByOther"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if errors.Is(err, lease.ErrHeld) {
					err = fmt.Errorf("%q: %w", key, lease.ErrHeld)
				}
				return l, err
			}
		}},
	{name: "HeldErrorWithoutExpiry", breaks: "HeldError.Expires is not the holder's expiry",
		caughtBy: []string{"HeldByOther"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				var he *lease.HeldError
				if errors.As(err, &he) {
					he.Expires = time.Time{}
				}
				return l, err
			}
		}},
	{name: "GrantToAGoneCaller", breaks: "an Acquire whose ctx ended as it granted answers the ctx's error and keeps the grant, held by nobody until its TTL",
		caughtBy: []string{"AcquireGivenUp"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(context.WithoutCancel(ctx), key, owner, ttl)
				if err == nil && ctx.Err() != nil {
					return lease.Lease{}, ctx.Err()
				}
				return l, err
			}
		}},
	{name: "FailedAcquireExtendsHolder", breaks: "an Acquire refused with ErrHeld renews the holder with its TTL",
		caughtBy: []string{"FailedAcquireChangesNothing"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if errors.Is(err, lease.ErrHeld) {
					if h, ok := w.lastOf(key); ok {
						_, _ = w.renew(ctx, h, max(ttl, h.TTL))
					}
				}
				return l, err
			}
		}},

	// I4: proof of holding.
	{name: "RenewIgnoresToken", breaks: "Renew checks the ID but not the token (I4)",
		caughtBy: []string{"SecretIDRequired"},
		install: func(w *wrapper) {
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				if h, ok := w.lastOf(l.Key); ok && h.ID == l.ID && l.Token != 0 && l.Token <= lease.MaxToken {
					l.Token = h.Token
				}
				return w.renew(ctx, l, ttl)
			}
		}},
	{name: "RenewIgnoresID", breaks: "Renew checks the token but not the secret ID (I4)",
		caughtBy: []string{"SecretIDRequired"},
		install: func(w *wrapper) {
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				if h, ok := w.lastOf(l.Key); ok && h.Token == l.Token && !l.ID.IsZero() {
					l.ID = h.ID
				}
				return w.renew(ctx, l, ttl)
			}
		}},
	{name: "ReleaseIgnoresToken", breaks: "Release checks the ID but not the token (I4)",
		caughtBy: []string{"SecretIDRequired"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				if h, ok := w.lastOf(l.Key); ok && h.ID == l.ID && l.Token != 0 && l.Token <= lease.MaxToken {
					l.Token = h.Token
				}
				return w.release(ctx, l)
			}
		}},
	{name: "ReleaseIgnoresID", breaks: "Release checks the token but not the secret ID (I4)",
		caughtBy: []string{"SecretIDRequired"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				if h, ok := w.lastOf(l.Key); ok && h.Token == l.Token && !l.ID.IsZero() {
					l.ID = h.ID
				}
				return w.release(ctx, l)
			}
		}},
	{name: "ReleaseIgnoresKey", breaks: "Release finds the lease by ID and token alone, whatever key it names (I4)",
		caughtBy: []string{"SecretIDRequired"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				w.mu.Lock()
				k, ok := w.acquired[l.ID]
				w.mu.Unlock()
				if ok && lease.ValidateKey(l.Key) == nil {
					l.Key = k
				}
				return w.release(ctx, l)
			}
		}},
	{name: "RenewRevivesReleased", breaks: "Renew of a released lease takes the free key back (I4)",
		caughtBy: []string{"ReleaseTwiceFails"},
		install: func(w *wrapper) {
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				r, err := w.renew(ctx, l, ttl)
				w.mu.Lock()
				was := w.released[l.ID]
				w.mu.Unlock()
				if errors.Is(err, lease.ErrNotHeld) && was {
					if n, err := w.acquire(ctx, l.Key, l.Owner, ttl); err == nil {
						l.TTL, l.Expires = n.TTL, n.Expires
						return l, nil
					}
				}
				return r, err
			}
		}},
	{name: "RenewRevivesExpired", breaks: "Renew of an expired lease takes the free key back (I4)",
		caughtBy: []string{"RenewAfterExpiryFails"},
		install: func(w *wrapper) {
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				r, err := w.renew(ctx, l, ttl)
				if h, ok := w.lastOf(l.Key); errors.Is(err, lease.ErrNotHeld) && ok && h.ID == l.ID {
					if n, err := w.acquire(ctx, l.Key, l.Owner, ttl); err == nil {
						l.TTL, l.Expires = n.TTL, n.Expires
						return l, nil
					}
				}
				return r, err
			}
		}},
	{name: "ReleaseOfExpiredSucceeds", breaks: "Release of an expired lease returns nil (I4)",
		caughtBy: []string{"RenewAfterExpiryFails"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				err := w.release(ctx, l)
				if h, ok := w.lastOf(l.Key); errors.Is(err, lease.ErrNotHeld) && ok && h.ID == l.ID {
					return nil
				}
				return err
			}
		}},
	{name: "ReleaseOfSupersededHitsSuccessor", breaks: "Release of a superseded lease fails but releases the successor (I4)",
		caughtBy: []string{"ReleaseSupersededFails"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				err := w.release(ctx, l)
				if h, ok := w.lastOf(l.Key); errors.Is(err, lease.ErrNotHeld) && ok && h.ID != l.ID {
					_ = w.release(ctx, h)
				}
				return err
			}
		}},
	{name: "ReleaseIdempotent", breaks: "Release of a lease not held returns nil (I4)",
		caughtBy: []string{"ReleaseTwiceFails"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				if err := w.release(ctx, l); !errors.Is(err, lease.ErrNotHeld) {
					return err
				}
				return nil
			}
		}},

	// Expiry.
	{name: "NeverExpires", breaks: "leases outlive their TTL (I3 liveness)",
		caughtBy: []string{"TokensRiseAcrossExpiry"},
		install: func(w *wrapper) {
			rep := &reported{}
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if lease.ValidateTTL(ttl) != nil {
					return w.acquire(ctx, key, owner, ttl)
				}
				l, err := w.acquire(ctx, key, owner, lease.MaxTTL)
				if err != nil {
					return l, err
				}
				shown := l
				shown.TTL, shown.Expires = ttl, time.Now().Add(ttl)
				rep.set(l, shown)
				return shown, nil
			}
			rep.hookGetList(w)
		}},
	{name: "AcquireExpiresEarly", breaks: "Acquire's lease expires after half its TTL",
		caughtBy: []string{"HeldUntilTTL"},
		install: func(w *wrapper) {
			rep := &reported{}
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if lease.ValidateTTL(ttl) != nil {
					return w.acquire(ctx, key, owner, ttl)
				}
				l, err := w.acquire(ctx, key, owner, shorter(ttl))
				if err != nil {
					return l, err
				}
				shown := l
				shown.TTL, shown.Expires = ttl, l.Expires.Add(ttl-shorter(ttl))
				rep.set(l, shown)
				return shown, nil
			}
			rep.hookGetList(w)
		}},
	{name: "RenewExpiresEarly", breaks: "a renewed lease expires after half its new TTL",
		caughtBy: []string{"HeldUntilTTL"},
		install: func(w *wrapper) {
			rep := &reported{}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				if lease.ValidateTTL(ttl) != nil {
					return w.renew(ctx, l, ttl)
				}
				r, err := w.renew(ctx, l, shorter(ttl))
				if err != nil {
					return r, err
				}
				shown := r
				shown.TTL, shown.Expires = ttl, r.Expires.Add(ttl-shorter(ttl))
				rep.set(r, shown)
				return shown, nil
			}
			rep.hookGetList(w)
		}},
	{name: "RenewCannotShorten", breaks: "Renew never moves the expiry earlier, as if by GREATEST(old, new)",
		caughtBy: []string{"RenewCanShorten"},
		install: func(w *wrapper) {
			rep := &reported{}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				h, ok := w.lastOf(l.Key)
				if lease.ValidateTTL(ttl) != nil || !ok || h.ID != l.ID || h.TTL <= ttl {
					return w.renew(ctx, l, ttl)
				}
				r, err := w.renew(ctx, l, h.TTL)
				if err != nil {
					return r, err
				}
				shown := r
				shown.TTL, shown.Expires = ttl, time.Now().Add(ttl)
				rep.set(r, shown)
				return shown, nil
			}
			rep.hookGetList(w)
		}},
	{name: "RenewFromOldExpiry", breaks: "Renew adds the TTL to the old expiry instead of to now",
		caughtBy: []string{"RenewKeepsToken"},
		install: func(w *wrapper) {
			rep := &reported{}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				h, ok := w.lastOf(l.Key)
				if lease.ValidateTTL(ttl) != nil || !ok || h.ID != l.ID {
					return w.renew(ctx, l, ttl)
				}
				r, err := w.renew(ctx, l, min(ttl+time.Until(h.Expires), lease.MaxTTL))
				if err != nil {
					return r, err
				}
				shown := r
				shown.TTL = ttl
				rep.set(r, shown)
				return shown, nil
			}
			rep.hookGetList(w)
		}},
	{name: "ExpiresIsNow", breaks: "Acquire reports Expires as the time of the grant, not grant + TTL",
		caughtBy: []string{"AcquireReturnsLease"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if err == nil {
					l.Expires = time.Now()
				}
				return l, err
			}
		}},
	{name: "GetShowsAcquireTTL", breaks: "after a Renew, Get still reports the TTL of the Acquire",
		caughtBy: []string{"RenewKeepsToken"},
		install: func(w *wrapper) {
			var mu sync.Mutex
			first := map[string]time.Duration{} // key and token → TTL asked at Acquire
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if err == nil {
					mu.Lock()
					first[viewKey(key, l.Token)] = ttl
					mu.Unlock()
				}
				return l, err
			}
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				l, err := w.s.Get(ctx, key)
				mu.Lock()
				if ttl, ok := first[viewKey(key, l.Token)]; ok && err == nil {
					l.TTL = ttl
				}
				mu.Unlock()
				return l, err
			}
		}},

	// Get and List.
	{name: "GetShowsID", breaks: "Get returns the secret ID (I4)",
		caughtBy: []string{"GetAndList"},
		install: func(w *wrapper) {
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				l, err := w.s.Get(ctx, key)
				if h, ok := w.lastOf(key); err == nil && ok && h.Token == l.Token {
					l.ID = h.ID
				}
				return l, err
			}
		}},
	{name: "ListShowsID", breaks: "List returns the secret IDs (I4)",
		caughtBy: []string{"GetAndList"},
		install: func(w *wrapper) {
			w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
				ls, err := memList(ctx, w.s, prefix)
				for i, l := range ls {
					if h, ok := w.lastOf(l.Key); ok && h.Token == l.Token {
						ls[i].ID = h.ID
					}
				}
				return ls, err
			}
		}},
	{name: "GetShowsExpired", breaks: "Get returns a lease that expired",
		caughtBy: []string{"TokensRiseAcrossExpiry"},
		install: func(w *wrapper) {
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				l, err := w.s.Get(ctx, key)
				if h, ok := w.lastOf(key); errors.Is(err, lease.ErrNotFound) && ok {
					h.ID = lease.ID{}
					return h, nil
				}
				return l, err
			}
		}},
	{name: "ListShowsExpired", breaks: "List returns leases that expired",
		caughtBy: []string{"TokensRiseAcrossExpiry", "RenewAfterExpiryFails"},
		install: func(w *wrapper) {
			w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
				ls, err := memList(ctx, w.s, prefix)
				if err != nil {
					return ls, err
				}
				w.mu.Lock()
				for k, h := range w.last {
					if strings.HasPrefix(k, prefix) && !slices.ContainsFunc(ls, func(l lease.Lease) bool { return l.Key == k }) {
						h.ID = lease.ID{}
						ls = append(ls, h)
					}
				}
				w.mu.Unlock()
				slices.SortFunc(ls, func(a, b lease.Lease) int { return strings.Compare(a.Key, b.Key) })
				return ls, nil
			}
		}},
	{name: "ListIgnoresPrefix", breaks: "List returns every lease",
		caughtBy: []string{"GetAndList"},
		install: func(w *wrapper) {
			w.h.list = func(ctx context.Context, _ string) ([]lease.Lease, error) { return memList(ctx, w.s, "") }
		}},
	{name: "ListPrefixIsPattern", breaks: "List reads _ % ? * in the prefix as wildcards (unescaped LIKE or MATCH)",
		caughtBy: []string{"ListLiteralPrefixByteOrder"},
		install: func(w *wrapper) {
			w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
				all, err := memList(ctx, w.s, "")
				re := globPrefix(prefix)
				return slices.DeleteFunc(all, func(l lease.Lease) bool { return !re.MatchString(l.Key) }), err
			}
		}},
	{name: "ListUnsorted", breaks: "List is not ordered by key",
		caughtBy: []string{"GetAndList"},
		install: func(w *wrapper) {
			w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
				ls, err := memList(ctx, w.s, prefix)
				slices.Reverse(ls)
				return ls, err
			}
		}},
	{name: "ListSortedByCollation", breaks: "List orders keys ignoring case, as a database collation would, not by bytes",
		caughtBy: []string{"ListLiteralPrefixByteOrder"},
		install: func(w *wrapper) {
			w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
				ls, err := memList(ctx, w.s, prefix)
				slices.SortStableFunc(ls, func(a, b lease.Lease) int {
					return strings.Compare(strings.ToLower(a.Key), strings.ToLower(b.Key))
				})
				return ls, err
			}
		}},
	{name: "GetMatchesPrefix", breaks: "Get of a free key returns a lease on a key that starts with it",
		caughtBy: []string{"RelatedKeysIndependent"},
		install: func(w *wrapper) {
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				l, err := w.s.Get(ctx, key)
				if errors.Is(err, lease.ErrNotFound) {
					if ls, _ := memList(ctx, w.s, key); len(ls) > 0 {
						return ls[0], nil
					}
				}
				return l, err
			}
		}},
	{name: "AcquireConflictsByPrefix", breaks: "a key is held while a key that starts with it is held",
		caughtBy: []string{"RelatedKeysIndependent"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if lease.ValidateKey(key) == nil {
					ls, _ := memList(ctx, w.s, key)
					for _, h := range ls {
						if h.Key != key {
							return lease.Lease{}, &lease.HeldError{Key: key, Owner: h.Owner, Token: h.Token, Expires: h.Expires}
						}
					}
				}
				return w.acquire(ctx, key, owner, ttl)
			}
		}},
	{name: "ReleaseByPrefix", breaks: "Release also releases the keys that start with the lease's key",
		caughtBy: []string{"RelatedKeysIndependent"},
		install: func(w *wrapper) {
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				if err := w.release(ctx, l); err != nil {
					return err
				}
				w.mu.Lock()
				var more []lease.Lease
				for k, h := range w.last {
					if strings.HasPrefix(k, l.Key) {
						more = append(more, h)
					}
				}
				w.mu.Unlock()
				for _, h := range more {
					_ = w.release(ctx, h)
				}
				return nil
			}
		}},
	{name: "KeysCaseInsensitive", breaks: "keys that differ only in case are one key",
		caughtBy: []string{"RelatedKeysIndependent"},
		install: func(w *wrapper) {
			var mu sync.Mutex
			orig := map[string]string{}
			fold := func(k string) string {
				if lease.ValidateKey(k) != nil {
					return k
				}
				f := strings.ToLower(k)
				mu.Lock()
				if _, ok := orig[f]; !ok {
					orig[f] = k
				}
				mu.Unlock()
				return f
			}
			unfold := func(k string) string {
				mu.Lock()
				defer mu.Unlock()
				if o, ok := orig[k]; ok {
					return o
				}
				return k
			}
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, fold(key), owner, ttl)
				var he *lease.HeldError
				if errors.As(err, &he) {
					he.Key = key
				}
				if err == nil {
					l.Key = key
				}
				return l, err
			}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				k := l.Key
				l.Key = fold(k)
				r, err := w.renew(ctx, l, ttl)
				if err == nil {
					r.Key = k
				}
				return r, err
			}
			w.h.release = func(ctx context.Context, l lease.Lease) error {
				l.Key = fold(l.Key)
				return w.release(ctx, l)
			}
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				l, err := w.s.Get(ctx, fold(key))
				if err == nil {
					l.Key = key
				}
				return l, err
			}
			w.h.list = func(ctx context.Context, prefix string) ([]lease.Lease, error) {
				ls, err := memList(ctx, w.s, strings.ToLower(prefix))
				for i := range ls {
					ls[i].Key = unfold(ls[i].Key)
				}
				return ls, err
			}
		}},

	// Input.
	{name: "AcceptsEmptyKey", breaks: "Acquire of the empty key succeeds",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if key == "" {
					l, err := w.acquire(ctx, "(empty)", owner, ttl)
					l.Key = ""
					return l, err
				}
				return w.acquire(ctx, key, owner, ttl)
			}
		}},
	{name: "AcceptsZeroTTL", breaks: "a TTL below the minimum is raised to it instead of refused",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				return w.acquire(ctx, key, owner, max(ttl, lease.MinTTL))
			}
		}},
	{name: "AcceptsOverlongKey", breaks: "a key over MaxKeyLen is truncated instead of refused",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key[:min(len(key), lease.MaxKeyLen)], owner, ttl)
				l.Key = key
				return l, err
			}
		}},
	{name: "AcceptsBadOwner", breaks: "an owner with control characters, invalid UTF-8 or over MaxKeyLen bytes is accepted",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				clean := strings.Map(func(r rune) rune {
					if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
						return '?'
					}
					return r
				}, strings.ToValidUTF8(owner, "?"))
				l, err := w.acquire(ctx, key, clean[:min(len(clean), lease.MaxKeyLen)], ttl)
				if err == nil {
					l.Owner = owner
				}
				return l, err
			}
		}},
	{name: "RejectsMaxTTL", breaks: "a TTL of exactly MaxTTL is refused (off by one)",
		caughtBy: []string{"InputLimitsAccepted"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if ttl >= lease.MaxTTL {
					return lease.Lease{}, fmt.Errorf("%w: ttl %v too long", lease.ErrInvalid, ttl)
				}
				return w.acquire(ctx, key, owner, ttl)
			}
		}},
	{name: "RejectsMinTTL", breaks: "a TTL of exactly MinTTL is refused (off by one)",
		caughtBy: []string{"InputLimitsAccepted"},
		install: func(w *wrapper) {
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				if ttl <= lease.MinTTL {
					return lease.Lease{}, fmt.Errorf("%w: ttl %v too short", lease.ErrInvalid, ttl)
				}
				return w.renew(ctx, l, ttl)
			}
		}},
	{name: "RenewAcceptsZeroTTL", breaks: "Renew with a TTL of 0 succeeds",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				return w.renew(ctx, l, max(ttl, lease.MinTTL))
			}
		}},
	{name: "PanicsOnBadKey", breaks: "Get panics on a key that is not valid",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				if lease.ValidateKey(key) != nil {
					panic("bad key")
				}
				return w.s.Get(ctx, key)
			}
		}},
	{name: "AcquireWaitSkipsValidation", breaks: "AcquireWait grants bad keys, owners and TTLs",
		caughtBy: []string{"BadInput"},
		install: func(w *wrapper) {
			w.h.acquireWait = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				if lease.ValidateAcquire(key, owner, ttl) != nil {
					return lease.Lease{Key: key, Owner: owner, Token: 1, ID: lease.NewID(), TTL: ttl, Expires: time.Now().Add(ttl)}, nil
				}
				return w.acquireWait(ctx, key, owner, ttl)
			}
		}},

	// Kinds of error.
	{name: "NotHeldAsNotFound", breaks: "Renew and Release of a lease not held return ErrNotFound",
		caughtBy: []string{"ReleaseTwiceFails"},
		install: func(w *wrapper) {
			swap := func(err error) error {
				if errors.Is(err, lease.ErrNotHeld) {
					return lease.ErrNotFound
				}
				return err
			}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				r, err := w.renew(ctx, l, ttl)
				return r, swap(err)
			}
			w.h.release = func(ctx context.Context, l lease.Lease) error { return swap(w.release(ctx, l)) }
		}},
	{name: "NotFoundAsNotHeld", breaks: "Get of a free key returns ErrNotHeld",
		caughtBy: []string{"GetAndList"},
		install: func(w *wrapper) {
			w.h.get = func(ctx context.Context, key string) (lease.Lease, error) {
				l, err := w.s.Get(ctx, key)
				if errors.Is(err, lease.ErrNotFound) {
					err = lease.ErrNotHeld
				}
				return l, err
			}
		}},
	{name: "ErrorsAlsoUnavailable", breaks: "every error also matches ErrUnavailable, so callers cannot tell an answer from an outage",
		caughtBy: []string{"HeldByOther", "ReleaseTwiceFails", "SecretIDRequired"},
		install: func(w *wrapper) {
			wrap := func(err error) error {
				if err == nil {
					return nil
				}
				return fmt.Errorf("%w (%w)", err, lease.ErrUnavailable)
			}
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				return l, wrap(err)
			}
			w.h.renew = func(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
				r, err := w.renew(ctx, l, ttl)
				return r, wrap(err)
			}
			w.h.release = func(ctx context.Context, l lease.Lease) error { return wrap(w.release(ctx, l)) }
		}},
	{name: "HeldAlsoNotHeld", breaks: "ErrHeld from Acquire also matches ErrNotHeld",
		caughtBy: []string{"HeldByOther"},
		install: func(w *wrapper) {
			w.h.acquire = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquire(ctx, key, owner, ttl)
				if errors.Is(err, lease.ErrHeld) {
					err = fmt.Errorf("%w: %w", err, lease.ErrNotHeld)
				}
				return l, err
			}
		}},

	// WaitAcquirer.
	{name: "WaitLIFO", breaks: "AcquireWait serves the last waiter first",
		caughtBy: []string{"WaitAcquirer"},
		install: func(w *wrapper) {
			w.h.acquireWait = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				return w.pollWait(ctx, key, owner, ttl, true, false)
			}
		}},
	{name: "WaitDoesNotWait", breaks: "AcquireWait takes a held key from its holder",
		caughtBy: []string{"WaitAcquirer"},
		install:  func(w *wrapper) { w.h.acquireWait = w.steal }},
	{name: "WaitIgnoresExpiry", breaks: "AcquireWait wakes on releases only, not on expiry",
		caughtBy: []string{"WaitAcquirer"},
		install: func(w *wrapper) {
			w.h.acquireWait = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				return w.pollWait(ctx, key, owner, ttl, false, true)
			}
		}},
	{name: "WaitCancelLeaksLease", breaks: "a waiter whose context ended still takes the key later",
		caughtBy: []string{"WaitAcquirer"},
		install: func(w *wrapper) {
			w.h.acquireWait = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				type result struct {
					l   lease.Lease
					err error
				}
				ch := make(chan result, 1)
				go func() {
					l, err := w.acquireWait(context.Background(), key, owner, ttl)
					ch <- result{l, err}
				}()
				select {
				case r := <-ch:
					return r.l, r.err
				case <-ctx.Done():
					return lease.Lease{}, ctx.Err()
				}
			}
		}},
	{name: "WaitCancelWrongError", breaks: "AcquireWait gives up with an error that is neither ctx's nor ErrHeld",
		caughtBy: []string{"WaitAcquirer"},
		install: func(w *wrapper) {
			w.h.acquireWait = func(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
				l, err := w.acquireWait(ctx, key, owner, ttl)
				if err != nil && ctx.Err() != nil {
					err = errors.New("gave up waiting")
				}
				return l, err
			}
		}},

	// Notifier.
	{name: "NotifierFails", breaks: "WaitChange fails instead of waiting",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			w.h.waitChange = func(context.Context, string) error { return errors.New("no notifications") }
		}},
	{name: "NotifierIgnoresExpiry", breaks: "WaitChange wakes on releases only, not when the holder's lease expires",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			w.h.waitChange = func(ctx context.Context, key string) error { return w.waitRelease(ctx, key, true) }
		}},
	{name: "NotifierMissesFreeKey", breaks: "WaitChange on a key released just before it waits for the next release",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			w.h.waitChange = func(ctx context.Context, key string) error {
				// Wakes on expiry, so only the free key's check can catch it.
				if _, err := w.s.Get(ctx, key); errors.Is(err, lease.ErrNotFound) {
					return w.waitRelease(ctx, key, false)
				}
				return w.waitChange(ctx, key)
			}
		}},
	{name: "NotifierHidesContextEnd", breaks: "WaitChange whose context ended returns an error that is not the context's",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			w.h.waitChange = func(ctx context.Context, key string) error {
				err := w.waitChange(ctx, key)
				if err != nil && ctx.Err() != nil {
					err = fmt.Errorf("%w: gave up waiting", lease.ErrUnavailable)
				}
				return err
			}
		}},
	{name: "NotifierAcceptsBadKey", breaks: "WaitChange does not check its key",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			w.h.waitChange = func(ctx context.Context, key string) error {
				if lease.ValidateKey(key) != nil {
					return nil
				}
				return w.waitChange(ctx, key)
			}
		}},
	{name: "CloseLeavesWaits", breaks: "Close fails later WaitChange calls but leaves pending ones waiting",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			var closed atomic.Bool
			w.h.close = func() error { closed.Store(true); return nil }
			w.h.waitChange = func(ctx context.Context, key string) error {
				if closed.Load() {
					return errClosed
				}
				return w.waitChange(ctx, key)
			}
		}},
	{name: "WaitChangeAfterCloseReturnsNil", breaks: "WaitChange on a closed backend returns nil, a retry for ever",
		caughtBy: []string{"Notifier"},
		install: func(w *wrapper) {
			w.h.waitChange = func(ctx context.Context, key string) error {
				if err := w.waitChange(ctx, key); !errors.Is(err, errClosed) {
					return err
				}
				return nil
			}
		}},

	// Restarts.
	{name: "ReopenResetsTokens", breaks: "a restart forgets tokens and held leases (I1)",
		caughtBy: []string{"Reopen"},
		install:  func(*wrapper) {},
		reopen:   func(t *testing.T, _ lease.Backend) lease.Backend { return newWrapper(t) }},
}

func findMutant(name string) (mutant, bool) {
	if name == control {
		return mutant{name: control, install: func(*wrapper) {}}, true
	}
	for _, m := range mutants {
		if m.name == name {
			return m, true
		}
	}
	return mutant{}, false
}

// runMutant runs the suite on the mutant named: the child's side of
// TestMutantsCaught, in a process of its own.
func runMutant(t *testing.T, name string) {
	m, ok := findMutant(name)
	if !ok {
		t.Fatalf("no mutant %q", name)
	}
	reopen := func(t *testing.T, old lease.Backend) lease.Backend { return old }
	if m.reopen != nil {
		reopen = m.reopen
	}
	leasetest.TestBackend(t, func(t *testing.T) lease.Backend {
		w := newWrapper(t)
		m.install(w)
		return w
	}, leasetest.Reopen(reopen))
}

type childRun struct {
	err     error
	out     string
	elapsed time.Duration
	failed  []string // the suite's subtests that failed, as paths ("Watch/SlowReader")
}

var failLine = regexp.MustCompile(`--- FAIL: TestMutantsCaught/(\S+)`)

// runPattern is the -test.run pattern that runs the suite's subtests
// named, as caughtBy names them.
func runPattern(subtests []string) string {
	pattern := "^TestMutantsCaught$"
	if len(subtests) == 0 {
		return pattern
	}
	var tops, subs []string
	for _, s := range subtests {
		top, sub, _ := strings.Cut(s, "/")
		if !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
		subs = append(subs, sub)
	}
	pattern += "/^(" + strings.Join(tops, "|") + ")$"
	if len(tops) == 1 && !slices.Contains(subs, "") {
		pattern += "/^(" + strings.Join(subs, "|") + ")$"
	}
	return pattern
}

// caught reports whether a failed path is one of subtests or under one.
func caught(failed, subtests []string) bool {
	for _, f := range failed {
		for _, s := range subtests {
			if f == s || strings.HasPrefix(f, s+"/") {
				return true
			}
		}
	}
	return false
}

func runChild(name string, subtests []string) childRun {
	pattern := runPattern(subtests)
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), envMutant+"="+name)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r := childRun{err: err, out: out.String(), elapsed: time.Since(start)}
	for _, m := range failLine.FindAllStringSubmatch(r.out, -1) {
		if !slices.Contains(r.failed, m[1]) {
			r.failed = append(r.failed, m[1])
		}
	}
	return r
}

// TestMutantsCaught checks that the suite fails every mutant, and passes
// the unbroken wrapper. In a child process it started (LEASETEST_MUTANT
// set), it is instead the suite run on that one mutant.
func TestMutantsCaught(t *testing.T) {
	if name := os.Getenv(envMutant); name != "" {
		runMutant(t, name)
		return
	}
	full := os.Getenv(envFull) != ""
	names := []string{control}
	for _, m := range mutants {
		names = append(names, m.name)
	}
	runs := make([]childRun, len(names))
	sem := make(chan struct{}, 8) // the children mostly sleep
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			m, _ := findMutant(name)
			var subtests []string
			if !full {
				subtests = m.caughtBy
			}
			runs[i] = runChild(name, subtests)
		}()
	}
	wg.Wait()

	for i, name := range names {
		r := runs[i]
		t.Run(name, func(t *testing.T) {
			if name == control {
				if r.err != nil {
					t.Fatalf("the suite fails the unbroken wrapper (%v in %v):\n%s", r.err, r.elapsed, r.out)
				}
				return
			}
			m, _ := findMutant(name)
			var exit *exec.ExitError
			if r.err != nil && !errors.As(r.err, &exit) {
				t.Fatalf("running the child: %v", r.err)
			}
			if full {
				if r.err == nil {
					t.Errorf("NOT CAUGHT: the suite passes a backend where %s", m.breaks)
				} else {
					t.Logf("caught in %v by %v", r.elapsed.Round(time.Millisecond), r.failed)
				}
				return
			}
			if r.err == nil {
				t.Fatalf("the suite's %v pass a backend where %s", m.caughtBy, m.breaks)
			}
			if !caught(r.failed, m.caughtBy) {
				t.Fatalf("the child failed (%v), but not in %v:\n%s", r.err, m.caughtBy, r.out)
			}
		})
	}
}
