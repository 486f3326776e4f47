package election_test

import (
	"context"
	"errors"
	"iter"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/leasetest/fakeclock"
	"github.com/leasehq/lease/memstore"
)

// TestRunTellsOfNewLeaders: OnNewLeader hears the leader of the moment,
// then each new one, its own terms included.
func TestRunTellsOfNewLeaders(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			e := newElector(t, be.New(t), time.Minute)
			actx, stopA := context.WithCancel(ctxFor(t))
			leading := make(chan struct{})
			aDone := make(chan error, 1)
			go func() {
				aDone <- e.Run(actx, "svc", "a", func(ctx context.Context, _ *election.Term) error {
					close(leading)
					<-ctx.Done()
					return nil
				})
			}()
			<-leading
			seen := make(chan string, 16)
			bctx, stopB := context.WithCancel(ctxFor(t))
			bDone := make(chan error, 1)
			go func() {
				bDone <- e.Run(bctx, "svc", "b", func(ctx context.Context, _ *election.Term) error {
					<-ctx.Done()
					return nil
				}, election.OnNewLeader(func(l election.Leader) { seen <- l.Value }))
			}()
			next := func() string {
				select {
				case v := <-seen:
					return v
				case <-time.After(10 * time.Second):
					t.Fatal("no word of a leader within 10 s")
					return ""
				}
			}
			if v := next(); v != "a" {
				t.Fatalf("first word %q, want the leader a", v)
			}
			stopA()
			if err := <-aDone; err != nil {
				t.Fatalf("a's Run: %v", err)
			}
			for v := next(); v != "b"; v = next() {
				if v != "" { // a zero Leader between the terms is allowed
					t.Fatalf("word of %q, want b after a stopped", v)
				}
			}
			stopB()
			if err := <-bDone; err != nil {
				t.Fatalf("b's Run: %v", err)
			}
		})
	}
}

// hungRelease is a backend whose Release hangs until its context ends, and
// says when that was.
type hungRelease struct {
	lease.Backend
	ended chan time.Time
}

func (b *hungRelease) Release(ctx context.Context, _ lease.Lease) error {
	<-ctx.Done()
	b.ended <- time.Now()
	return ctx.Err()
}

// TestShutdownResignIsBounded: the resignation when Run's or Lead's
// context ends is bounded (10 s) against a backend that hangs, so that a
// shutdown ends; so is Run's resignation of a term Lead gave up, which a
// shutdown may meet (it used to wait for the backend without bound).
func TestShutdownResignIsBounded(t *testing.T) {
	const bound = 10 * time.Second
	for _, tc := range []struct {
		name string
		// lead wins a term, tells won, and holds it until ctx ends.
		lead func(ctx context.Context, e *election.Elector, won chan<- struct{}) error
	}{
		{"Run", func(ctx context.Context, e *election.Elector, won chan<- struct{}) error {
			return e.Run(ctx, "svc", "a", func(ctx context.Context, _ *election.Term) error {
				close(won)
				<-ctx.Done()
				return nil
			})
		}},
		{"RunGivenUp", func(ctx context.Context, e *election.Elector, won chan<- struct{}) error {
			// Lead gives the term up at once: Run resigns it, and the
			// shutdown comes while that resignation hangs.
			return e.Run(ctx, "svc", "a", func(ctx context.Context, _ *election.Term) error {
				close(won)
				return nil
			})
		}},
		{"Lead", func(ctx context.Context, e *election.Elector, won chan<- struct{}) error {
			term, err := e.Lead(ctx, "svc", "a")
			if err != nil {
				return err
			}
			close(won)
			<-term.Context().Done() // the term ends (resigning) with ctx
			synctest.Wait()         // the resignation in the background is under way or done
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, err := memstore.New()
				if err != nil {
					t.Fatal(err)
				}
				b := &hungRelease{Backend: store, ended: make(chan time.Time, 1)}
				e := newElector(t, b, time.Minute)
				ctx, cancel := context.WithCancel(context.Background())
				won, done := make(chan struct{}), make(chan error, 1)
				go func() { done <- tc.lead(ctx, e, won) }()
				<-won
				start := time.Now()
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if ended := (<-b.ended).Sub(start); ended != bound {
					t.Errorf("the hung resignation ended after %v, want %v", ended, bound)
				}
			})
		})
	}
}

// failAcquire is a backend whose acquisitions fail as an unreachable one's
// do, counting them; it hides the backend's other abilities.
type failAcquire struct {
	lease.Backend
	calls atomic.Int32
}

func (f *failAcquire) Acquire(context.Context, string, string, time.Duration) (lease.Lease, error) {
	f.calls.Add(1)
	return lease.Lease{}, lease.ErrUnavailable
}

// TestRunRequeuesOnTheClientsClock: after a failed campaign, Run waits
// its requeue backoff on the Elector's Client's clock, jittered from the
// Client's source: with the fake clock standing still it does not campaign
// again, and once the clock passes the backoff it does.
func TestRunRequeuesOnTheClientsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := fakeclock.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
		t0 := clk.Now()
		b := &failAcquire{Backend: memtest.New(t)}
		e := newElector(t, b, time.Minute, lease.WithClock(clk), lease.WithJitter(func() float64 { return 0 }))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, "svc", "a", func(ctx context.Context, _ *election.Term) error { return nil },
				election.WithRequeueBackoff(time.Hour, time.Hour))
		}()
		synctest.Wait()
		if n := b.calls.Load(); n != 1 {
			t.Fatalf("%d campaigns before the backoff, want 1", n)
		}
		// No jitter: half the backoff.
		if p := clk.Pending(); len(p) != 1 || !p[0].Equal(t0.Add(30*time.Minute)) {
			t.Fatalf("timers pending on the Client's clock: %v, want the requeue at %v", p, t0.Add(30*time.Minute))
		}
		clk.Advance(30 * time.Minute)
		synctest.Wait()
		if n := b.calls.Load(); n != 2 {
			t.Fatalf("%d campaigns once the fake clock passed the backoff, want 2", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// TestKeepTermOnCancelLetsTheTermExpire: with KeepTermOnCancel, Run's end
// leaves its term unresigned but no longer renewed, so that it expires at
// its TTL and the next candidate leads. It used to go on being renewed by
// the Client after Run had returned: a minute later (TTL 3 s) the term
// was still held, its Err nil, and nobody else could ever lead while the
// process lived.
func TestKeepTermOnCancelLetsTheTermExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		e := newElector(t, store, 3*time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		leading := make(chan *election.Term, 1)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, "svc", "a", func(ctx context.Context, tm *election.Term) error {
				leading <- tm
				<-ctx.Done()
				return nil
			}, election.KeepTermOnCancel())
		}()
		term := <-leading
		time.Sleep(5 * time.Second) // renewed past its first TTL
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		stopped := time.Now()
		if l, err := store.Get(context.Background(), "svc"); err != nil || l.Token != term.Token() {
			t.Fatalf("right after Run returned the term is gone (%v, %v): KeepTermOnCancel resigned it", l, err)
		}
		next := make(chan time.Time, 1)
		go func() {
			tm, err := e.Campaign(context.Background(), "svc", "b")
			if err != nil {
				t.Errorf("b's Campaign: %v", err)
				next <- time.Time{}
				return
			}
			next <- time.Now()
			_ = tm.Resign(context.Background())
		}()
		select {
		case at := <-next:
			if wait := at.Sub(stopped); wait < time.Second {
				t.Errorf("b was elected %v after Run returned: the kept term ended early", wait)
			}
		case <-time.After(time.Minute):
			l, err := store.Get(context.Background(), "svc")
			t.Errorf("a minute after Run returned with KeepTermOnCancel (TTL 3 s), b is not elected: the store holds %q token %d (%v), the term's Err is %v",
				l.Owner, l.Token, err, term.Err())
			_ = term.Resign(context.Background())
			<-next
		}
		if err := term.Err(); !errors.Is(err, lease.ErrLost) {
			t.Errorf("the kept term's Err after it expired = %v, want ErrLost", err)
		}
	})
}

// TestRunEndsOnARefusedCredential: Run against a lease serve that refuses
// its bearer token returns that refusal, an error campaigning again cannot
// mend (as lease.Follow ends on it), instead of campaigning again at its
// backoff without a word until its ctx ended (it did, and then returned
// nil).
func TestRunEndsOnARefusedCredential(t *testing.T) {
	srv, err := leasehttp.NewServer(memtest.New(t), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: "the-right-token-0123456789abcdefghij", Prefixes: []string{leasehttp.AllKeys}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() { hs.Close(); srv.Close() }()
	hc, err := leasehttp.NewClient(hs.URL, leasehttp.WithAuthToken("a-wrong-token-0123456789abcdefghijk"))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	e := newElector(t, hc, time.Minute)
	ctx, cancel := context.WithTimeout(ctxFor(t), 30*time.Second)
	defer cancel()
	err = e.Run(ctx, "svc", "a", func(ctx context.Context, _ *election.Term) error {
		t.Error("led with a refused credential")
		return nil
	}, election.WithRequeueBackoff(time.Millisecond, time.Millisecond))
	if !errors.Is(err, leasehttp.ErrUnauthorized) {
		t.Errorf("Run with a refused credential = %v (after %v), want its ErrUnauthorized", err, ctx.Err())
	}
}

// watchThenRefuse is a backend whose watches yield the store's picture of
// a key and then end with an error observing again cannot mend, as a
// server that stops authorising the stream does.
type watchThenRefuse struct {
	lease.Backend
	w lease.Watcher
}

var errRefusedForTheTest = errors.New("refused for the test")

func (b watchThenRefuse) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return func(yield func(lease.Event, error) bool) {
		for ev, err := range b.w.Watch(ctx, prefix) {
			if err != nil || !yield(ev, nil) {
				return
			}
			if ev.Kind == lease.Synced {
				yield(lease.Event{}, errRefusedForTheTest)
				return
			}
		}
	}
}

// TestOnNewLeaderEndsWithNoLeaderKnown: when Run's Observe ends with an
// error that observing again cannot mend, OnNewLeader's last word is "no
// leader known", not the leader it heard of last, which it would otherwise
// go on believing in past its term (it did).
func TestOnNewLeaderEndsWithNoLeaderKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memtest.New(t)
		other, err := newElector(t, store, time.Minute).Campaign(t.Context(), "svc", "other")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Resign(context.Background())
		e := newElector(t, watchThenRefuse{store, store}, time.Minute)
		ctx, cancel := context.WithCancel(t.Context())
		var heard []string
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, "svc", "a", func(ctx context.Context, _ *election.Term) error {
				<-ctx.Done()
				return nil
			}, election.OnNewLeader(func(l election.Leader) { heard = append(heard, l.Value) }))
		}()
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(heard) == 0 || heard[len(heard)-1] != "" {
			t.Errorf("OnNewLeader heard %q; want its last word, once Observe ended, to be no leader (\"\")", heard)
		}
	})
}
