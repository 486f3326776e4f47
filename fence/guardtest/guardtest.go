// Package guardtest is the conformance suite of fencing guards (I6), run by
// every guard in this module:
//
//	func TestConformance(t *testing.T) {
//		guardtest.TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard {
//			return fence.NewMemory(mode)
//		})
//	}
//
// TestGuard takes a fence.Guard: fence.Memory, fence.Middleware seen from
// its client, pgfence.Guard.Check inside a transaction of its own.
// TestValueGuard takes a guard that keeps the guarded value itself, as
// redisfence.Guard does (nothing outside Redis can be atomic with its
// check, so it runs no caller's write). TestGuard runs every check of
// TestValueGuard, keeping the value in the write it passes to Check, and
// adds the checks only a write can show.
//
// The suite checks, in both modes: tokens are admitted by the mode's rule
// and nothing else; a rejected write changes nothing and returns a
// *fence.StaleTokenError matching lease.ErrStaleToken that names the
// resource, the token, the highest accepted and the mode; resources are
// independent; tokens 1 and lease.MaxToken are valid and 0 or above
// lease.MaxToken are not (lease.ErrInvalid, nothing changed); a cancelled
// context writes nothing; and under concurrent writers the accepted tokens
// never go back, every rejection names a token that was accepted, and the
// newest token's write is the one kept.
package guardtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// ValueGuard is a guard that keeps one value per resource, written under a
// fencing token: redisfence.Guard has this shape.
type ValueGuard interface {
	// Set stores value as resource's value, and token as its highest
	// accepted, if the guard's mode admits token. Otherwise it returns a
	// *fence.StaleTokenError and changes nothing.
	Set(ctx context.Context, resource string, token lease.Token, value string) error
	// Get returns resource's value and the highest token accepted for it,
	// or an error matching lease.ErrNotFound if it was never written.
	Get(ctx context.Context, resource string) (value string, token lease.Token, err error)
}

// TestValueGuard runs the suite's checks against guards made by newGuard,
// which is called once per check with the mode to admit tokens by. It may
// return a fresh guard or one on shared state: each check writes resources
// of its own.
func TestValueGuard(t *testing.T, newGuard func(t *testing.T, mode fence.Mode) ValueGuard) {
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			for _, c := range valueChecks {
				t.Run(c.name, func(t *testing.T) { c.f(t, newGuard(t, mode), mode) })
			}
		})
	}
}

// TestGuard runs the suite's checks against guards made by newGuard, called
// as by TestValueGuard: those of TestValueGuard, with the value kept by the
// write Check runs, and those about the write itself.
func TestGuard(t *testing.T, newGuard func(t *testing.T, mode fence.Mode) fence.Guard) {
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			for _, c := range valueChecks {
				t.Run(c.name, func(t *testing.T) { c.f(t, newValues(newGuard(t, mode)), mode) })
			}
			for _, c := range guardChecks {
				t.Run(c.name, func(t *testing.T) { c.f(t, newGuard(t, mode), mode) })
			}
		})
	}
}

var valueChecks = []struct {
	name string
	f    func(t *testing.T, g ValueGuard, mode fence.Mode)
}{
	{"AdmitsByMode", admitsByMode},
	{"NeverWritten", neverWritten},
	{"ResourcesIndependent", resourcesIndependent},
	{"TokenEdges", tokenEdges},
	{"CancelledContext", cancelledContext},
	{"ConcurrentWriters", concurrentWriters},
}

var guardChecks = []struct {
	name string
	f    func(t *testing.T, g fence.Guard, mode fence.Mode)
}{
	{"RejectedCheckRunsNothing", rejectedCheckRunsNothing},
	{"FailedWriteRecordsNothing", failedWriteRecordsNothing},
	{"WritesOneAtATime", writesOneAtATime},
}

// values is a fence.Guard seen as a ValueGuard: the value is kept by the
// write passed to Check, so it changes exactly when the guard runs a write.
type values struct {
	g  fence.Guard
	mu sync.Mutex
	m  map[string]stored
}

type stored struct {
	value string
	token lease.Token
}

func newValues(g fence.Guard) *values { return &values{g: g, m: make(map[string]stored)} }

func (v *values) Set(ctx context.Context, resource string, token lease.Token, value string) error {
	return v.g.Check(ctx, resource, token, func() error {
		v.mu.Lock()
		v.m[resource] = stored{value, token}
		v.mu.Unlock()
		return nil
	})
}

func (v *values) Get(_ context.Context, resource string) (string, lease.Token, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.m[resource]
	if !ok {
		return "", 0, fmt.Errorf("guardtest: %q: %w", resource, lease.ErrNotFound)
	}
	return s.value, s.token, nil
}

// resource returns a resource name unique to this run, so that checks on
// shared state (one database, one Redis) never see each other's writes.
func resource(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "guardtest/" + hex.EncodeToString(b[:]) + "/" + name
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkStale fails t unless err is a *fence.StaleTokenError matching
// lease.ErrStaleToken with exactly want's fields.
func checkStale(t *testing.T, what string, err error, want fence.StaleTokenError) {
	t.Helper()
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || !errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("%s: err = %v, want a *fence.StaleTokenError matching lease.ErrStaleToken", what, err)
	}
	if *stale != want {
		t.Fatalf("%s: StaleTokenError %+v, want %+v", what, *stale, want)
	}
}

// checkValue fails t unless resource holds value, written with token.
func checkValue(t *testing.T, g ValueGuard, what, res, value string, token lease.Token) {
	t.Helper()
	v, tok, err := g.Get(ctxFor(t), res)
	if err != nil || v != value || tok != token {
		t.Fatalf("%s: %q holds %q with token %d (err %v), want %q with token %d", what, res, v, tok, err, value, token)
	}
}

// checkNeverWritten fails t unless resource was never written.
func checkNeverWritten(t *testing.T, g ValueGuard, what, res string) {
	t.Helper()
	if v, tok, err := g.Get(ctxFor(t), res); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("%s: %q holds %q with token %d (err %v), want it never written (ErrNotFound)", what, res, v, tok, err)
	}
}

// admitsByMode writes a sequence of tokens — new, equal, older, newer — and
// checks each answer against the mode's rule, and the state after each.
func admitsByMode(t *testing.T, g ValueGuard, mode fence.Mode) {
	ctx := ctxFor(t)
	res := resource("modes")
	var value string
	var highest lease.Token
	for i, tok := range []lease.Token{3, 3, 2, 1, 4, 4, 9, 5, 10} {
		v := fmt.Sprintf("write %d with token %d", i, tok)
		err := g.Set(ctx, res, tok, v)
		what := fmt.Sprintf("write %d: token %d after highest %d (%v)", i, tok, highest, mode)
		if mode.Admits(tok, highest) {
			if err != nil {
				t.Fatalf("%s: %v, want it admitted", what, err)
			}
			value, highest = v, tok
		} else {
			checkStale(t, what, err, fence.StaleTokenError{Resource: res, Token: tok, Highest: highest, Mode: mode})
		}
		checkValue(t, g, what, res, value, highest)
	}
}

// neverWritten: a resource nobody wrote reads as not found and admits any
// valid token first.
func neverWritten(t *testing.T, g ValueGuard, mode fence.Mode) {
	ctx := ctxFor(t)
	for _, tok := range []lease.Token{1, 7, lease.MaxToken} {
		res := resource(fmt.Sprintf("fresh-%d", tok))
		checkNeverWritten(t, g, "before any write", res)
		if err := g.Set(ctx, res, tok, "first"); err != nil {
			t.Fatalf("first write to %q with token %d: %v", res, tok, err)
		}
		checkValue(t, g, "after the first write", res, "first", tok)
	}
}

// resourcesIndependent: a token recorded on one resource says nothing
// about another, however alike their names: names that differ only in
// case, in a trailing space, in how an accented letter is composed, or
// after a long common prefix (the longest names a lease key can have) are
// different resources, as they are to Go — a store that folds case or pads
// spaces (a case-insensitive collation) or truncates keys would merge them.
func resourcesIndependent(t *testing.T, g ValueGuard, mode fence.Mode) {
	ctx := ctxFor(t)
	base := resource("job")
	long := base + "/" + strings.Repeat("l", lease.MaxKeyLen-len(base)-2)
	names := []string{base, base + "/", base + "/x", base + " ", base + "X", base + "/ünï/🔒", base + `/"q" 'q'`,
		base + "/X", base + "/\u00e9", base + "/e\u0301", long + "a", long + "b"}
	for i, res := range names {
		// Highest first, so that a guard keeping one mark for all rejects
		// every later name.
		tok := lease.Token(100 - i)
		if err := g.Set(ctx, res, tok, res); err != nil {
			t.Fatalf("token %d on %q, after higher tokens on other resources only: %v", tok, res, err)
		}
	}
	for i, res := range names {
		checkValue(t, g, "after writes to the other resources", res, res, lease.Token(100-i))
	}
	// A rejection on one resource leaves the others as they were.
	err := g.Set(ctx, names[0], 1, "late")
	checkStale(t, "an older token", err, fence.StaleTokenError{Resource: names[0], Token: 1, Highest: 100, Mode: mode})
	for i, res := range names {
		checkValue(t, g, "after a rejection on "+names[0], res, res, lease.Token(100-i))
	}
}

// tokenEdges: the smallest and largest tokens a backend can issue are
// admitted by the rule like any other; tokens no backend can issue are
// invalid and change nothing.
func tokenEdges(t *testing.T, g ValueGuard, mode fence.Mode) {
	ctx := ctxFor(t)
	invalid := []lease.Token{0, lease.MaxToken + 1, math.MaxUint64}
	fresh := resource("invalid")
	for _, tok := range invalid {
		err := g.Set(ctx, fresh, tok, "invalid")
		if !errors.Is(err, lease.ErrInvalid) || errors.Is(err, lease.ErrStaleToken) {
			t.Errorf("token %d on a fresh resource: err = %v, want ErrInvalid (not ErrStaleToken)", tok, err)
		}
	}
	checkNeverWritten(t, g, "after invalid tokens", fresh)

	res := resource("edges")
	if err := g.Set(ctx, res, 1, "one"); err != nil {
		t.Fatalf("token 1: %v", err)
	}
	if err := g.Set(ctx, res, lease.MaxToken, "max"); err != nil {
		t.Fatalf("token MaxToken after 1: %v", err)
	}
	err := g.Set(ctx, res, lease.MaxToken, "max again")
	if mode == fence.Strict {
		checkStale(t, "MaxToken again", err, fence.StaleTokenError{Resource: res, Token: lease.MaxToken, Highest: lease.MaxToken, Mode: mode})
		checkValue(t, g, "after MaxToken again", res, "max", lease.MaxToken)
	} else {
		if err != nil {
			t.Fatalf("MaxToken again (%v): %v", mode, err)
		}
		checkValue(t, g, "after MaxToken again", res, "max again", lease.MaxToken)
	}
	v, _, _ := g.Get(ctx, res)
	err = g.Set(ctx, res, lease.MaxToken-1, "below max")
	checkStale(t, "MaxToken-1 after MaxToken", err, fence.StaleTokenError{Resource: res, Token: lease.MaxToken - 1, Highest: lease.MaxToken, Mode: mode})
	for _, tok := range invalid {
		err := g.Set(ctx, res, tok, "invalid")
		if !errors.Is(err, lease.ErrInvalid) || errors.Is(err, lease.ErrStaleToken) {
			t.Errorf("token %d after MaxToken: err = %v, want ErrInvalid (not ErrStaleToken)", tok, err)
		}
	}
	checkValue(t, g, "after rejected and invalid tokens", res, v, lease.MaxToken)
}

// cancelledContext: a write whose context has ended returns the context's
// error and writes nothing.
func cancelledContext(t *testing.T, g ValueGuard, mode fence.Mode) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	cancel()
	fresh, res := resource("cancelled-fresh"), resource("cancelled")
	if err := g.Set(ctxFor(t), res, 5, "five"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{fresh, res} {
		if err := g.Set(ctx, r, 6, "six"); !errors.Is(err, context.Canceled) {
			t.Errorf("write to %q with a cancelled context: err = %v, want context.Canceled", r, err)
		}
	}
	checkNeverWritten(t, g, "after a write with a cancelled context", fresh)
	checkValue(t, g, "after a write with a cancelled context", res, "five", 5)
}

// attempt is one write of concurrentWriters, timed on the test's clock.
type attempt struct {
	token      lease.Token
	value      string
	err        error
	start, end time.Time
}

const (
	writers   = 8
	perWriter = 30
	maxTok    = 40
)

// concurrentWriters: writers race on one resource with random tokens. The
// guard must act as if the writes happened one at a time, each at some
// instant between its call and its return: a write accepted after another
// returned never has an older token (in Strict mode, nor an equal one); a
// rejection names a token that was accepted, one its own token is not
// admitted after, and no lower than any accepted before the rejected call
// began; in Strict mode no token is accepted twice; and the resource ends
// with the newest token and a value written with it.
func concurrentWriters(t *testing.T, g ValueGuard, mode fence.Mode) {
	ctx := ctxFor(t)
	res := resource("race")
	var mu sync.Mutex
	var all []attempt
	var wg sync.WaitGroup
	for w := range writers {
		rng := mrand.New(mrand.NewPCG(uint64(w), 42))
		wg.Go(func() {
			for i := range perWriter {
				tok := lease.Token(1 + rng.IntN(maxTok))
				a := attempt{token: tok, value: fmt.Sprintf("w%d-%d-t%d", w, i, tok), start: time.Now()}
				a.err = g.Set(ctx, res, tok, a.value)
				a.end = time.Now()
				mu.Lock()
				all = append(all, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	var ok, rejected []attempt
	acceptedTok := map[lease.Token]int{}
	for _, a := range all {
		var stale *fence.StaleTokenError
		switch {
		case a.err == nil:
			ok = append(ok, a)
			acceptedTok[a.token]++
		case errors.As(a.err, &stale) && errors.Is(a.err, lease.ErrStaleToken):
			if stale.Resource != res || stale.Token != a.token || stale.Mode != mode {
				t.Errorf("token %d rejected with %+v", a.token, *stale)
			}
			if mode.Admits(a.token, stale.Highest) {
				t.Errorf("token %d rejected though %v admits it after the highest %d named", a.token, mode, stale.Highest)
			}
			rejected = append(rejected, a)
		default:
			t.Fatalf("token %d: %v", a.token, a.err)
		}
	}
	for _, a := range rejected {
		var stale *fence.StaleTokenError
		errors.As(a.err, &stale)
		if acceptedTok[stale.Highest] == 0 {
			t.Errorf("token %d rejected as older than %d, which was never accepted", a.token, stale.Highest)
		}
		for _, b := range ok {
			if b.end.Before(a.start) && b.token > stale.Highest {
				t.Errorf("token %d rejected naming highest %d, though %d had been accepted before the call", a.token, stale.Highest, b.token)
			}
		}
	}
	for _, a := range ok {
		if mode == fence.Strict && acceptedTok[a.token] > 1 {
			t.Errorf("Strict accepted token %d %d times", a.token, acceptedTok[a.token])
		}
		for _, b := range ok {
			if b.end.Before(a.start) && !mode.Admits(a.token, b.token) {
				t.Errorf("token %d accepted after token %d had been (%v)", a.token, b.token, mode)
			}
		}
	}
	if t.Failed() {
		return
	}
	top := slices.MaxFunc(all, func(a, b attempt) int { return cmp.Compare(a.token, b.token) }).token
	v, tok, err := g.Get(ctx, res)
	if err != nil || tok != top {
		t.Fatalf("after the race %q holds token %d (err %v), want the newest token sent, %d", res, tok, err, top)
	}
	if !slices.ContainsFunc(ok, func(a attempt) bool { return a.value == v && a.token == top }) {
		t.Errorf("after the race %q holds %q, not a value accepted with token %d", res, v, top)
	}
	if len(rejected) == 0 {
		t.Errorf("no write of %d was rejected: the race never tried an older token", len(all))
	}
}

// rejectedCheckRunsNothing: the write of a rejected Check does not run.
func rejectedCheckRunsNothing(t *testing.T, g fence.Guard, mode fence.Mode) {
	ctx := ctxFor(t)
	res := resource("rejected")
	if err := g.Check(ctx, res, 5, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []lease.Token{5, 4, 1} {
		if mode.Admits(tok, 5) {
			continue
		}
		ran := false
		err := g.Check(ctx, res, tok, func() error { ran = true; return nil })
		checkStale(t, fmt.Sprintf("token %d after 5", tok), err, fence.StaleTokenError{Resource: res, Token: tok, Highest: 5, Mode: mode})
		if ran {
			t.Errorf("the write of a Check rejected for token %d ran", tok)
		}
	}
	ran := false
	if err := g.Check(ctx, res, 0, func() error { ran = true; return nil }); !errors.Is(err, lease.ErrInvalid) || ran {
		t.Errorf("Check with token 0: err = %v, write ran %v; want ErrInvalid and no write", err, ran)
	}
}

// errWrite is the failure of a write in failedWriteRecordsNothing.
var errWrite = errors.New("guardtest: the write failed")

// failedWriteRecordsNothing: a Check whose write fails returns the write's
// error and records nothing, so a token below the failed one is still
// admitted, and so is the failed token itself, in either mode.
func failedWriteRecordsNothing(t *testing.T, g fence.Guard, mode fence.Mode) {
	ctx := ctxFor(t)
	fail := func() error { return errWrite }
	ok := func() error { return nil }

	fresh := resource("failed-first")
	if err := g.Check(ctx, fresh, 9, fail); !errors.Is(err, errWrite) || errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("first Check with a failing write: err = %v, want the write's error", err)
	}
	if err := g.Check(ctx, fresh, 1, ok); err != nil {
		t.Fatalf("token 1 after a failed first write with token 9: %v, want it admitted", err)
	}

	res := resource("failed")
	if err := g.Check(ctx, res, 2, ok); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, res, 7, fail); !errors.Is(err, errWrite) || errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("Check with a failing write: err = %v, want the write's error", err)
	}
	if err := g.Check(ctx, res, 3, ok); err != nil {
		t.Fatalf("token 3 after a failed write with token 7: %v, want it admitted (7 was not recorded)", err)
	}
	if err := g.Check(ctx, res, 7, ok); err != nil {
		t.Fatalf("token 7 after its failed write (%v): %v, want it admitted", mode, err)
	}
	err := g.Check(ctx, res, 6, ok)
	checkStale(t, "token 6 after 7", err, fence.StaleTokenError{Resource: res, Token: 6, Highest: 7, Mode: mode})
}

// writesOneAtATime: concurrent Checks on one resource run their writes one
// at a time, each exactly once if admitted, and in an order the mode admits.
func writesOneAtATime(t *testing.T, g fence.Guard, mode fence.Mode) {
	ctx := ctxFor(t)
	res := resource("exclusive")
	var (
		inWrite  atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		order    []lease.Token // tokens in the order their writes ran
		admitted atomic.Int32  // Checks that returned nil
	)
	var wg sync.WaitGroup
	for w := range writers {
		rng := mrand.New(mrand.NewPCG(uint64(w), 7))
		wg.Go(func() {
			for range perWriter {
				tok := lease.Token(1 + rng.IntN(maxTok))
				err := g.Check(ctx, res, tok, func() error {
					if inWrite.Add(1) != 1 {
						overlaps.Add(1)
					}
					mu.Lock()
					order = append(order, tok)
					mu.Unlock()
					time.Sleep(50 * time.Microsecond) // long enough for a second write to overlap
					inWrite.Add(-1)
					return nil
				})
				switch {
				case err == nil:
					admitted.Add(1)
				case !errors.Is(err, lease.ErrStaleToken):
					t.Errorf("token %d: %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d writes to one resource ran while another was running", n)
	}
	if int(admitted.Load()) != len(order) {
		t.Errorf("%d Checks admitted, %d writes ran: each admitted Check runs its write once, a rejected one none", admitted.Load(), len(order))
	}
	for i := 1; i < len(order); i++ {
		if !mode.Admits(order[i], order[i-1]) {
			t.Fatalf("write with token %d ran after one with token %d (%v); order %v", order[i], order[i-1], mode, order)
		}
	}
}
