// Package electionbench measures leadership hand-off, side by side on one
// embedded etcd node: package election on etcdstore against etcd's own
// concurrency.Election, each beside the least any election must do
// (issue 17's speed targets; `make bench` reads the rows).
//
//   - BenchmarkCompareElection (handoff_test.go): a graceful hand-off, from
//     the leader's Resign to the next leader's Campaign returning.
//   - BenchmarkCompareElectionCrash (crash_test.go): a crashed leader's, from
//     its lease's grant, the leader's process stopping at once, to the next
//     leader's Campaign returning, reported beyond the TTL in round trips.
//
// Run with `cd tools && go test -run '^$' -bench CompareElection ./electionbench`,
// or `make bench BENCHFLAGS="-pkg ./tools/electionbench"`.
package electionbench
