package main

// The TypeScript client's targets (issue 18), measured by
// BenchmarkCompareTypeScript in clients/typescript: its pair through the
// server against two raw fetch round trips doing the same requests, and
// against redlock on a durable Redis.
func init() {
	for _, c := range []int{1, 32} {
		for _, store := range []string{"mem", "bolt"} {
			Targets = append(Targets, Target{Group: "TypeScript", Clients: c, Impl: "ts-" + store, Versus: "fetch-pair-" + store,
				Cmp: "<=", Ratio: 1.3, Metric: "ns/op",
				Note: "issue 18: the client's acquire+release within 1.3× of two raw fetch round trips to the same server"})
		}
		Targets = append(Targets, Target{Group: "TypeScript", Clients: c, Impl: "ts-bolt", Versus: "redlock",
			Cmp: ">=", Ratio: 1.0, Metric: "ops/s", Floor: "fetch-pair-bolt",
			Note: "issue 18: at least redlock's ops/s (durable Redis) while also issuing a durable fencing token; " +
				"the floor is two raw fetch round trips to the same server, the least any client of the HTTP API in Node.js does"})
	}
	groupNotes["TypeScript"] = "From Node.js, one process, c callers interleaved on its one thread; one op = one acquire+release pair on the caller's own key. " +
		"fetch-pair-mem / fetch-pair-bolt: two raw fetch round trips doing the same acquire and release (JSON parsed, nothing checked) — the HTTP path's limit from Node's fetch. " +
		"ts-mem: LeaseClient.tryAcquire + Hold.release against the leasehttp server over memstore (lease serve has no memory store); " +
		"ts-bolt: the same against lease serve's embedded store (fsync on); ts-redis: against lease serve --backend redis:// on the Redis below. " +
		"redlock: redlock 4 lock + unlock through one ioredis client (which pipelines concurrent commands on one connection) on Redis with appendfsync always; no fencing token. " +
		"allocs/op and B/op are the Go process's (the servers in it), not Node's."
}
