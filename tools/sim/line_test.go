package sim_test

import (
	"strings"
	"testing"

	"github.com/leasehq/lease/tools/sim"
)

// TestLineKeepsOrder plays the long-wait simulation (issue 29): waits of a
// second through a 10 ms server wait cap, re-sent about a hundred times
// each over a network of seeded delays, are served in the order they
// queued, whichever way the server waits. Its control turns the server's
// tickets off and must find a waiter served out of order.
func TestLineKeepsOrder(t *testing.T) {
	n := 40
	if testing.Short() {
		n = 10
	}
	for _, queues := range []bool{false, true} {
		name := "BackendWaits"
		if queues {
			name = "ServerQueues"
		}
		t.Run(name, func(t *testing.T) {
			for _, seed := range seeds(t, n) {
				if r := sim.Line(t, sim.LineConfig{Seed: seed, ServerQueues: queues}); r.Violation != "" {
					t.Fatalf("seed %d: %s: %s\n%s", seed, r.Property, r.Violation, strings.Join(r.Trace, "\n"))
				}
			}
		})
		t.Run(name+"/ControlWithoutTickets", func(t *testing.T) {
			for _, seed := range seeds(t, n) {
				if r := sim.Line(t, sim.LineConfig{Seed: seed, ServerQueues: queues, NoTickets: true}); r.Property == sim.LineOrder {
					t.Logf("seed %d: found: %s", seed, r.Violation)
					return
				}
			}
			t.Fatalf("no run of %d without tickets served a waiter out of order: the check cannot find it", n)
		})
	}
}
