package main

// Issue 29's waiting-line targets (tools/linebench): no overtakes in a
// long line through lease serve, and a runner's hand-off as quick as a
// bare Campaign's on every backend.
func init() {
	Targets = append(Targets,
		Target{Group: "Line", Clients: 50, Impl: "serve-tickets", Cmp: "<=", Ratio: 0, Metric: "overtakes",
			Floor: "no-resend-floor",
			Note:  "issue 29: 50 waiters queued in order through lease serve, waiting LINEBENCH_WAIT (5 min) through a 1 s wait cap: none served before one that queued ahead"})
	for _, be := range []string{"memstore", "boltstore", "pgstore", "redisstore", "etcdstore", "leasehttp"} {
		Targets = append(Targets, Target{Group: "RunnerHandoff", Clients: 1, Impl: "runner-" + be, Versus: "campaign-" + be, Cmp: "<=", Ratio: 1.05, Metric: "p50-µs",
			Note: "issue 29: a graceful hand-off with election.Run no slower than the same hand-off written by hand with Campaign and Resign (the leader's work stopped before it resigns, as Run must)"})
	}
	groupNotes["Line"] = "c = waiters. Each row is a lease serve of its own on the embedded store, all three run at once: a holder holds one key, 50 waiters " +
		"(leasehttp.Client.AcquireWait, a client each) queue in order, wait LINEBENCH_WAIT, then are served one by one (each releases at once). " +
		"overtakes = waiters served before one that queued ahead of them; p50/p99 = a waiter's whole wait. no-resend-floor = a wait cap longer than the wait, so each wait is one request " +
		"and the line is the store's alone; serve-tickets = --max-wait 1s with the default --wait-grace (each wait re-sent about once a second, keeping its place by its ticket); " +
		"serve-no-tickets = the same with --wait-grace 0, the server before issue 29, where a re-sent wait joins the back."
	groupNotes["RunnerHandoff"] = "A graceful hand-off on each backend, the next candidate queued 30 ms before the leader steps down; TTL 30 s. " +
		"runner-X = the leader's election.Run context cancelled (its Lead returns, then Run resigns) to the next Run's Lead starting; " +
		"campaign-X = the same written by hand with Campaign and Resign: the leader's work runs under a context that its shutdown or its term's loss ends, " +
		"the shutdown cancels it and the leader resigns once the work has returned (it must not act after its successor leads), to the next one's work starting; " +
		"resign-X = a leader with no work to stop calls Resign, to the next Campaign returning: not a floor for the runner, which must wait for its Lead " +
		"(the difference is mostly the wake-up of the leader's goroutine, which on memstore is a good part of the hand-off). Every end is stamped in the next leader's goroutine. " +
		"Interleaved: each round one hand-off of each row, starting from the next row each round, 100 rounds; ns/op is the mean."
}
