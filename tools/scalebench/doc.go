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
//
// To look into the ordinary Client's ScaleRenew row (serve-bolt-client):
// LEASE_SCALE_CLIENT_TRACE=1 logs, for each of its turns, the sizes of the
// batches its Clients sent, their round trips, the time between two sends of
// a hold, and whether each hold lost waited in its Client's queue or was
// answered too late; BenchmarkScaleRenewClientAt holds the row at fixed
// TTLs (LEASE_SCALE_CLIENT_TTLS), traced or not, with the CPU per renewal, the
// batch row's CPU per renewal at a paced rate (LEASE_SCALE_BATCH_RATE) and
// CPU profiles (LEASE_SCALE_CPUPROFILE). LEASE_SCALE_CLIENT_HOLDS sets the
// row's holds per Client (2,048).
package scalebench
