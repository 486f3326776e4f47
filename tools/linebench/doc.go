// Package linebench measures issue 29's waiting-line targets, for
// `make bench` (tools/benchreport):
//
//   - BenchmarkCompareLine: 50 waiters queued in order for one key behind
//     `lease serve` (the embedded store) wait LINEBENCH_WAIT (default 5m)
//     through a server wait cap of LINEBENCH_CAP (default 1s), so that
//     every wait is re-sent hundreds of times, then are served one by one;
//     overtakes counts waiters served before one that queued ahead of them.
//     Rows, run at once on servers of their own: serve-tickets (the
//     server's default --wait-grace), no-resend-floor (a cap longer than
//     the wait: nothing is re-sent, the line is the backend's alone), and
//     serve-no-tickets (--wait-grace 0, the server before issue 29).
//   - BenchmarkCompareRunnerHandoff: a graceful hand-off with
//     election.Run (the leader's runner shut down, to the next runner's
//     Lead starting) beside the same hand-off written by hand with
//     Campaign and Resign, as safe as Run (the leader's work stopped, then
//     Resign; to the next one's work starting), and a bare Resign with no
//     work to stop (to the next Campaign returning), interleaved round by
//     round, on every backend.
//
// The hand-off rows' resolution on the shared 2-core machine (2026-12-06,
// issue 29): with the default 100-150 rounds, two copies of the campaign
// row in one run differed by up to 9% at the median and up to 2× at the
// 99th percentile, on every backend; with 1000 rounds of memstore alone,
// by 0-2% at the median and up to 7% at the 99th percentile. A ratio
// within those spreads says nothing either way; the runner's own cost
// shows only on memstore, where a hand-off takes tens of microseconds
// (see the notes at election's lead).
//
// A shorter LINEBENCH_WAIT (e.g. 20s) is for iterating.
package linebench
