// Package redisbench compares redisstore with the Redis locks users would
// otherwise pick, redsync and bsm/redislock, on one real redis-server
// (compare_test.go): acquire+release pairs at 1 and 32 concurrent clients,
// on a durable server (appendfsync always) and on a volatile one.
//
// It lives in the tools module so that the library's go.mod does not require
// the rivals. Run with `go test -run '^$' -bench CompareRedis ./redisbench`
// from tools/, or `make bench`.
package redisbench
