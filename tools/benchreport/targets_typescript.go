package main

// The TypeScript client's targets (issues 18 and 33), measured by
// BenchmarkCompareTypeScript in clients/typescript: its pair through the
// server against two raw round trips doing the same requests through
// node:http's keep-alive Agent (the floor: the least any client of the HTTP
// API in Node.js does), and against redlock on a durable Redis.
func init() {
	for _, c := range []int{1, 32} {
		for _, store := range []string{"mem", "bolt"} {
			Targets = append(Targets, Target{Group: "TypeScript", Clients: c, Impl: "ts-" + store, Versus: "http-pair-" + store,
				Cmp: "<=", Ratio: 1.3, Metric: "ns/op",
				Note: "issue 33: the client's acquire+release within 1.3× of two raw keep-alive node:http round trips to the same server"})
		}
		Targets = append(Targets, Target{Group: "TypeScript", Clients: c, Impl: "ts-bolt", Versus: "redlock",
			Cmp: ">=", Ratio: 1.0, Metric: "ops/s", Floor: "http-pair-bolt",
			Note: "issue 18: at least redlock's ops/s (durable Redis) while also issuing a durable fencing token; " +
				"the floor is two raw keep-alive node:http round trips to the same server, the least any client of the HTTP API in Node.js does"})
	}
	Targets = append(Targets, Target{Group: "TypeScript", Clients: 32, Impl: "ts-mem", Versus: "ts-fetch-mem",
		Cmp: ">=", Ratio: 2.0, Metric: "ops/s",
		Note: "issue 33: at least twice the pairs per second of the same client sending through fetch, its transport in Node.js before"})
	groupNotes["TypeScript"] = "From Node.js, one process, c callers interleaved on its one thread; one op = one acquire+release pair on the caller's own key. " +
		"Every row, floors and rivals alike, first runs 3,000 pairs untimed in the worker (Go's timer stopped, its N ramp unaffected), once per row and c per process: " +
		"V8 compiles a row's code to its fast tiers only after 2,000 to 2,500 pairs, and go test reports only the last round of its ramp, " +
		"so without it a row's reported round came after anywhere from ~100 to several thousand pairs of its own code, by how many rounds its ramp took — a bias against rows that stopped early, not a property of the row. " +
		"http-pair-mem / http-pair-bolt (the floor): two raw round trips doing the same acquire and release (JSON parsed, nothing checked) through node:http with a keep-alive Agent — the HTTP path's limit from Node.js. " +
		"fetch-pair-mem / fetch-pair-bolt: the same two round trips through Node's fetch, for comparison (the client used fetch until issue 33; it uses node:http in Node.js, fetch elsewhere). " +
		"ts-mem: LeaseClient.tryAcquire + Hold.release against the leasehttp server over memstore (lease serve has no memory store); " +
		"ts-fetch-mem: the same client given fetch, which it sent through in Node.js before issue 33; " +
		"ts-bolt: the same against lease serve's embedded store (fsync on); ts-redis: against lease serve --backend redis:// on the Redis below. " +
		"redlock: redlock 4 lock + unlock through one ioredis client (which pipelines concurrent commands on one connection) on Redis with appendfsync always; no fencing token. " +
		"allocs/op and B/op are the Go process's (the servers in it), not Node's."
}
