// Package servebench compares `lease serve`'s work with etcd's (bench_test.go):
// acquire+release pairs through the leasehttp server over boltstore with
// fsync on, against an embedded single-node etcd doing concurrency.Mutex
// Lock+Unlock with one session per client, at 1 and 32 concurrent clients.
// The baseline row is the physical limit of the HTTP path: two round trips
// to a handler that does nothing. The fsync-floor row (floor_test.go) adds
// to it the least a durable server must do: the acquire answered only once
// an fdatasync, shared by group commit, covers its record.
//
// Run with `cd tools && go test -run '^$' -bench CompareServe ./servebench`, or
// `make bench`, which reads the BenchmarkCompareServe/c=N/impl rows.
package servebench
