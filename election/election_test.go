package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends are the ways election and semaphore must work on a backend.
var backends = memtest.Ways

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newElector is an Elector on a Client of its own on b, made with opts.
func newElector(t *testing.T, b lease.Backend, ttl time.Duration, opts ...lease.Option) *election.Elector {
	t.Helper()
	c, err := lease.NewClient(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := election.New(c, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// observer collects what Observe reports, in the background.
type observer struct {
	seen chan election.Leader
	done chan error
}

func observe(t *testing.T, e *election.Elector, key string) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{seen: make(chan election.Leader, 100), done: make(chan error, 1)}
	go func() {
		var last error
		for l, err := range e.Observe(ctx, key) {
			if err != nil {
				last = err
				break
			}
			o.seen <- l
		}
		o.done <- last
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-o.done; err != nil {
			t.Errorf("Observe ended with %v", err)
		}
	})
	return o
}

// next waits for the next leader Observe reports.
func (o *observer) next(t *testing.T) election.Leader {
	t.Helper()
	select {
	case l := <-o.seen:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("Observe reported nothing within 10s")
		return election.Leader{}
	}
}

func TestCampaignResignHandOver(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := ctxFor(t)
			e := newElector(t, be.New(t), time.Minute)
			obs := observe(t, e, "svc")
			if l := obs.next(t); l.Token != 0 || l.Key != "svc" {
				t.Fatalf("first report %+v, want no leader", l)
			}
			if _, err := e.Leader(ctx, "svc"); !errors.Is(err, election.ErrNoLeader) {
				t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
			}

			a, err := e.Campaign(ctx, "svc", "10.0.0.1:80")
			if err != nil {
				t.Fatal(err)
			}
			if l := obs.next(t); l.Value != "10.0.0.1:80" || l.Token != a.Token() {
				t.Fatalf("observed %+v, want a's term (token %d)", l, a.Token())
			}
			got, err := e.Leader(ctx, "svc")
			if err != nil || got.Value != "10.0.0.1:80" || got.Token != a.Token() {
				t.Fatalf("Leader = %+v, %v; want a's term", got, err)
			}

			// b waits while a leads, and is elected once a resigns.
			elected := make(chan *election.Term, 1)
			go func() {
				b, err := e.Campaign(ctx, "svc", "10.0.0.2:80")
				if err != nil {
					t.Error(err)
				}
				elected <- b
			}()
			select {
			case <-elected:
				t.Fatal("b was elected while a led")
			case <-time.After(50 * time.Millisecond):
			}
			if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			b := <-elected
			if b == nil {
				t.FailNow()
			}
			defer b.Resign(ctx)
			if b.Token() <= a.Token() {
				t.Errorf("b's token %d is not above a's %d", b.Token(), a.Token())
			}
			// Observe may or may not see the gap between the terms, but
			// never a token that goes back, and ends at b.
			for {
				l := obs.next(t)
				if l.Token != 0 && l.Token < a.Token() {
					t.Fatalf("observed token %d after %d", l.Token, a.Token())
				}
				if l.Token == b.Token() {
					if l.Value != "10.0.0.2:80" {
						t.Errorf("b's term observed with value %q", l.Value)
					}
					break
				}
			}
		})
	}
}

func TestObserveSeesTheEndOfATerm(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := ctxFor(t)
			e := newElector(t, be.New(t), time.Minute)
			a, err := e.Campaign(ctx, "svc", "a")
			if err != nil {
				t.Fatal(err)
			}
			obs := observe(t, e, "svc")
			if l := obs.next(t); l.Token != a.Token() {
				t.Fatalf("observed %+v first, want a's term", l)
			}
			if err := a.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if l := obs.next(t); l.Token != 0 {
				t.Fatalf("observed %+v after a resigned, want no leader", l)
			}
		})
	}
}

// Another key that extends the election's key is another election.
func TestObserveIgnoresLongerKeys(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			ctx := ctxFor(t)
			e := newElector(t, be.New(t), time.Minute)
			obs := observe(t, e, "svc")
			obs.next(t) // no leader
			other, err := e.Campaign(ctx, "svc2", "other")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Resign(ctx)
			a, err := e.Campaign(ctx, "svc", "a")
			if err != nil {
				t.Fatal(err)
			}
			defer a.Resign(ctx)
			if l := obs.next(t); l.Value != "a" {
				t.Fatalf("observed %+v, want a (svc2's leader is not svc's)", l)
			}
		})
	}
}

// failRenew makes every renewal fail, as a partitioned leader's would.
type failRenew struct{ lease.Backend }

func (failRenew) Renew(context.Context, lease.Lease, time.Duration) (lease.Lease, error) {
	return lease.Lease{}, lease.ErrUnavailable
}

// TestLostTermIsFenced: a leader that can no longer renew loses its term
// before the backend can elect another (I5), and once the next leader has
// written, the guard refuses the old leader's late write. Time is a fake
// clock shared by the backend and the electors, so "before" is exact, not a
// race between the test's Get and the backend's expiry.
func TestLostTermIsFenced(t *testing.T) {
	ctx := ctxFor(t)
	clock := fakeclock.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	store := memtest.New(t, memstore.WithClock(clock))
	const ttl = 200 * time.Millisecond
	elector := func(b lease.Backend) *election.Elector {
		t.Helper()
		return newElector(t, b, ttl, lease.WithClock(clock))
	}
	a, err := elector(failRenew{store}).Campaign(ctx, "svc", "a")
	if err != nil {
		t.Fatal(err)
	}
	resource := fence.NewResource("svc-data", "", fence.AtLeast)
	if err := resource.Write(a.Token(), "by a"); err != nil {
		t.Fatal(err)
	}
	held, err := store.Get(ctx, "svc")
	if err != nil || held.Token != a.Token() {
		t.Fatalf("the backend after a was elected: %+v, %v; want a's lease", held, err)
	}
	if !a.Deadline().Before(held.Expires) {
		t.Fatalf("a's safe deadline %v is not before the backend's expiry %v", a.Deadline(), held.Expires)
	}
	// Every renewal fails; a leads until its safe deadline, and not a
	// moment longer.
	clock.Set(a.Deadline().Add(-time.Nanosecond))
	select {
	case <-a.Done():
		t.Fatalf("a's term ended %v before its safe deadline: %v", time.Nanosecond, a.Err())
	default:
	}
	clock.Set(a.Deadline())
	select {
	case <-a.Done():
	default:
		t.Fatal("a's term outlived its safe deadline")
	}
	if !errors.Is(a.Err(), lease.ErrLost) {
		t.Fatalf("a's term ended with %v, want ErrLost", a.Err())
	}
	// The backend still holds a's lease now: a gave up first.
	if l, err := store.Get(ctx, "svc"); err != nil || l.Token != a.Token() {
		t.Fatalf("when a's term was lost the backend had %+v, %v; want a's lease still there", l, err)
	}
	clock.Set(held.Expires) // the backend's expiry: now b can be elected
	b, err := elector(store).Campaign(ctx, "svc", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(ctx)
	if err := resource.Write(b.Token(), "by b"); err != nil {
		t.Fatal(err)
	}
	if err := resource.Write(a.Token(), "late by a"); !errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("a's late write: %v, want ErrStaleToken", err)
	}
	if v, tok := resource.Read(); v != "by b" || tok != b.Token() {
		t.Errorf("resource holds %q with token %d, want b's write", v, tok)
	}
	if err := a.Resign(ctx); err != nil {
		t.Errorf("resigning a lost term whose lease is gone: %v, want nil (Err says it was lost)", err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := election.New(nil, time.Second); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	c, err := lease.NewClient(memtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := election.New(c, time.Nanosecond); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("New with a 1ns TTL: %v, want ErrInvalid", err)
	}
	e := newElector(t, memtest.New(t), time.Second)
	ctx := ctxFor(t)
	if _, err := e.Campaign(ctx, "svc", "bad\x00value"); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Campaign with a control character in the value: %v, want ErrInvalid", err)
	}
	if _, err := e.Campaign(ctx, "", "v"); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Campaign with an empty key: %v, want ErrInvalid", err)
	}
	for _, err := range e.Observe(ctx, "") {
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Observe with an empty key: %v, want ErrInvalid", err)
		}
	}
}
