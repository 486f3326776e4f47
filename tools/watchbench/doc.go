// Package watchbench measures how soon a change reaches HTTP watchers
// (bench_test.go, issue 17's watch target): an acquisition committed on
// boltstore (fsync on), served by leasehttp on loopback, to each of 1 and
// 1,000 watchers reading GET /v1/watch through leasehttp.Client, beside
// the same change reaching as many in-process boltstore watchers, and a
// bare Server-Sent Events write and read of the same bytes on the same
// loopback (the floor of any HTTP watch).
//
// Run with `cd tools && go test -run '^$' -bench CompareWatch ./watchbench`,
// or `make bench BENCHFLAGS="-pkg ./tools/watchbench"`.
package watchbench
