package election_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
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
// shutdown ends.
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
