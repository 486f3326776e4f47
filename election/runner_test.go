package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehq/lease/election"
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
