// Package crashtest holds the kill -9 test of `lease serve` (crash_test.go):
// it builds the lease binary, serves a bbolt data directory under concurrent
// acquire/renew/release load, kills the server with SIGKILL at seeded random
// moments, restarts it on the same directory, and checks from everything the
// clients were told that no token was handed out twice or out of order and
// that no acknowledged lease was given to anyone else before it expired on
// the server's clock.
//
// The history checker is in check.go so that its own tests can feed it
// histories that break each rule.
package crashtest
