// Package scalebench measures lease at scale (bench_test.go, `make bench`'s
// Scale groups): what a million idle leases cost in memory and on disk, how
// much they slow an acquire+release pair on other keys, how long boltstore
// takes to open them after a kill -9, what lease.db keeps of a million
// keys each used once (BenchmarkCompareScaleBoltDisk), and how many held
// leases one `lease
// serve` keeps alive against etcd's own lease keep-alive.
//
// Run with `cd tools && go test -run '^$' -bench CompareScale ./scalebench`.
// LEASE_SCALE_LEASES sets the number of idle leases (default 1,000,000) for
// a quicker look; the report's figures are at the default.
package scalebench
