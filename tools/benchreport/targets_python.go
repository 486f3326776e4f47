package main

// The Python client's targets (issue 32), measured by BenchmarkComparePython
// and BenchmarkComparePythonImport in clients/python: its pair through the
// server against two raw http.client round trips doing the same requests,
// redis-py's Lock on a durable Redis beside it, and the package's import time.
func init() {
	for _, c := range []int{1, 16} {
		// One caller's pair is a latency, judged by its median as the Serve
		// group's is (the shared machine's fsync stalls make means of a few
		// hundred pairs swing 2×); 16 threads' pairs are a throughput.
		metric := "ns/op"
		if c == 1 {
			metric = "p50-µs"
		}
		for _, store := range []string{"mem", "bolt"} {
			Targets = append(Targets, Target{Group: "Python", Clients: c, Impl: "py-" + store, Versus: "http-pair-" + store,
				Cmp: "<=", Ratio: 1.3, Metric: metric,
				Note: "issue 32: the client's acquire+release within 1.3× of two raw http.client round trips to the same server"})
		}
		Targets = append(Targets, Target{Group: "Python", Clients: c, Impl: "py-bolt", Versus: "redis-py-lock",
			Cmp: ">=", Ratio: 1.0, Metric: "ops/s", Floor: "http-pair-bolt",
			Note: "issue 32: side by side with redis-py's Lock (durable Redis), reported as a ratio; " +
				"the floor is two raw http.client round trips to the same server, the least any Python client of the HTTP API does"})
	}
	Targets = append(Targets, Target{Group: "PythonImport", Clients: 1, Impl: "leasehq_lease", Cmp: "<=", Ratio: 50, Metric: "import-ms",
		Note: "issue 32: importing leasehq_lease (LeaseClient, FencedResource, the errors) takes at most 50 ms"})
	groupNotes["Python"] = "From CPython (Debian's python3, the wheel installed in a venv), one process, c threads; one op = one acquire+release pair on the thread's own key. " +
		"Interleaved: after a round that warms every row up, each round runs every row in an order that turns each round, on clients, connections and keys kept throughout: at c=1 one pair each (at least 200 rounds), at c=16 a batch of 160 pairs each (at least 10 rounds); ns/op is a row's mean time per pair, p50/p99 of its pairs (c=1) or batches (c=16). " +
		"http-pair-mem / http-pair-bolt: two raw http.client round trips doing the same acquire and release (JSON parsed, nothing checked), one kept-alive connection per thread — the HTTP path's limit from Python. " +
		"py-mem: LeaseClient.try_acquire + Hold.release against the leasehttp server over memstore (lease serve has no memory store); " +
		"py-bolt: the same against lease serve's embedded store (fsync on). " +
		"redis-py-lock: redis-py's Lock acquire + release (one connection pool) on Redis with appendonly yes and appendfsync always; no fencing token. " +
		"Means take every outlier of the shared machine; compare p50 too."
	groupNotes["PythonImport"] = "`python3 -X importtime -c 'from leasehq_lease import LeaseClient, FencedResource, StaleTokenError, LeaseLostError'` in a fresh interpreter: " +
		"the package's cumulative import time; one op is one interpreter (at most 20 a run), import-ms the best of them (http.client, ssl and asyncio are imported when a client is made, not by the import)."
}
