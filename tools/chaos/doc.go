// Package chaos runs workers that use the real lease.Client against real
// engines while faults are injected, records every operation with its
// invocation and response times, and checks the history with porcupine.
//
// A run (Run) starts a toxiproxy proxy in process in front of each engine
// address, so that every byte between a worker's backend connection and the
// engine passes through it. Workers loop: acquire a key through
// lease.Client.Acquire, write to a fenced register a few times while
// Hold.Err() is nil, sometimes read it, release. The fault driver, on the
// test goroutine, applies one fault at a time — toxics (latency, bandwidth
// limit, timeout, reset_peer), an engine restart, or a worker pause that stops
// a worker between its check of Hold.Err() and its write until the guard has
// accepted a newer token on its key (read from the guard, not timed: a pause
// of a fixed length ends, on a loaded machine, before anybody else has
// written, and tests nothing) — then removes it and waits until some worker
// makes progress (an accepted write that started after the fault ended), and
// after a restart until every key has been acquired again.
//
// Every check counts what it exercised (Stats.Late: the pauses that made a
// stale writer, what the guard did with its late writes, and what its Hold
// then said; Stats.Regranted), and a run that did not exercise it fails: a
// driver's pause that ends without a newer token, a restart followed by no
// grant of some key.
//
// An engine may bring crashes of its own (Engine.Crashes): the replicated
// engine of replicated_test.go — three `lease serve` replicas over a
// three-member etcd cluster, reached through multi-endpoint leasehttp
// clients — kills a replica (kill -9) or the etcd leader. For those the
// driver waits for progress with the fault still in place, then heals it
// (restarts what it killed) and waits again, and records both times
// (Stats.Recoveries: from the fault, or the heal, to the answer of the
// first accepted write invoked after it).
//
// Two histories are checked with porcupine (Check):
//
//   - the register history (writes with their token and whether the guard
//     accepted them, reads with what they returned) against a fenced
//     register: state = value + highest accepted token; a write is accepted
//     if and only if the guard's mode admits its token, and then sets both;
//     a read returns the state;
//   - the grant history (each successful Acquire and its token) against a
//     counter that only rises: tokens strictly increase per key in any order
//     of grants consistent with real time.
//
// RunElection plays the election workload on the same machinery: workers
// campaign through package election, the elected one writes the register
// with its term's token while its term holds, observers follow the key
// with Observe, and the faults include pausing or crashing the leader. On
// top of both histories it checks that no leader finds its term held after
// a newer term was elected (E1) and that no observer reports a leader's
// token below one it reported before (E3).
//
// Each time a worker finds its Hold's Err nil Run records it, and lists
// (Result.HeldAfter) every such finding made after another worker's
// Acquire of the key had returned a newer token: the engine had expired
// the lease by then, so the Client said "held" past its expiry (I5, from
// the client's side; Config.SlowClocks is its negative control).
//
// With Config.Session each worker holds every key in one lease.Session and
// writes every key's register while the session's Err is nil; on top of
// both histories Run lists (Result.Split) every time a worker found its
// session live after another's Acquire of one of its keys had returned a
// newer token (G1).
//
// A history that is not linearizable fails the test, and porcupine's HTML
// visualisation is written to $LEASE_CHAOS_ARTIFACTS (or a fresh temporary
// directory) with its path in the failure message. With the guard off
// (Config.Unguarded, the negative control) the register takes every write,
// and the paused workers' late writes make the history illegal.
package chaos
