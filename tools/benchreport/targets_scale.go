package main

// The Scale groups (tools/scalebench): issue 20's figures at a million
// idle leases, and sustained renewals against etcd's lease keep-alive.
func init() {
	Targets = append(Targets,
		Target{Group: "ScaleMemstore", Clients: 1, Impl: "memstore-1M-idle", Cmp: "<=", Ratio: 200, Metric: "B/lease", Floor: "map-floor",
			Note: "issue 20: heap bytes per idle lease in memstore at 1M leases at most 200 (key included)"},
		Target{Group: "ScaleMemstore", Clients: 1, Impl: "memstore-1M-idle", Versus: "memstore-empty", Cmp: "<=", Ratio: 1.2, Metric: "ns/op",
			Note: "issue 20: an acquire+release pair with 1M idle leases in the store within 1.2× of the same in an empty store"},
		Target{Group: "ScaleBolt", Clients: 1, Impl: "bolt-1M-idle", Versus: "bolt-empty", Cmp: "<=", Ratio: 1.2, Metric: "p50-µs",
			Note: "issue 20: an acquire+release pair with 1M idle leases within 1.2× of the same in an empty store (interleaved)"},
		Target{Group: "ScaleBolt", Clients: 1, Impl: "open-after-kill", Cmp: "<=", Ratio: 2, Metric: "open-s",
			Note: "issue 20: boltstore's Open of 1M leases after the process that wrote them was killed with SIGKILL, in seconds"},
		Target{Group: "ScaleRenew", Clients: 64, Impl: "serve-bolt-batch256", Versus: "etcd-keepalive", Cmp: ">=", Ratio: 2.0, Metric: "ops/s", Floor: "floor-http-fsync",
			Note: "issue 20: leases one lease serve (boltstore, fsync on) keeps alive at TTL 30 s, renewed at TTL/3, at least twice etcd's keep-alive: with the lever, 256 renewals per request"},
		Target{Group: "ScaleRenew", Clients: 64, Impl: "serve-bolt", Versus: "etcd-keepalive", Cmp: ">=", Ratio: 2.0, Metric: "ops/s",
			Note: "issue 20: the same goal without the lever, one request per renewal"},
		Target{Group: "ScaleRenew", Clients: 64, Impl: "serve-bolt-client", Versus: "etcd-keepalive", Cmp: ">=", Ratio: 2.0, Metric: "leases-kept", Floor: "floor-http-fsync",
			Note: "issue 31: the same goal with the ordinary lease.Client (its scheduler's batches, not the batch API by hand): leases kept alive at TTL 30 s with no hold lost"},
	)
	groupNotes["ScaleMemstore"] = "A million idle leases (keys of 12 bytes, TTL a day) held in one memstore. One op = one acquire+release pair on 1,024 keys of the caller's own. " +
		"memstore-empty: the pair in an empty store. memstore-1M-idle: the pair beside the million; B/lease is the heap the million took, over a million (key included). " +
		"B/lease is not flat in the count: the index is a power of two of 16-byte slots, rebuilt twice as large when half full, so a million fit in 2^21 slots (34 B/lease) " +
		"and from 1,048,576 leases it takes 2^22 (64 B/lease just past it, back to 34 at 2.1M): LEASE_SCALE_LEASES=1100000 measured about 205 B/lease. " +
		"map-floor: the same fields (owner, token, ID, TTL, expiry) in one Go map under one mutex and nothing else — no lock per key, no waiters, no watch, no token kept past a release; its pair is an insert and a delete. " +
		"memstore-1M-list-1000: one List page of 1,000 of the million (ns/op per page; its × base is against a pair), each starting after a key spread over the keyspace."
	groupNotes["ScaleBolt"] = "A million idle leases in one boltstore (fsync on), written by a child process from 512 goroutines and then killed with SIGKILL, its log holding the batches since its last checkpoint. " +
		"bolt-empty / bolt-1M-idle: one acquire+release pair on 1,024 keys of the caller's own, in an empty store and in the million's, interleaved pair by pair; disk-B/lease is lease.db's size over a million. " +
		"bolt-1M-list-1000: one List page of 1,000 of the million, as memstore's. " +
		"open-after-kill: boltstore.Open of the million after the kill (replaying the log, checking every page), in seconds (also as ns/op)."
	groupNotes["ScaleRenew"] = "Sustained renewals from 64 callers, each renewing 256 leases of its own (counted at TTL 30 s) as fast as it can; the rows take turns, half a second at a time, six rounds each. " +
		"ops/s are renewals a second; leases-kept = ops/s × 10 s, the leases one server keeps alive when each is renewed every TTL/3. " +
		"The leases are granted and renewed with a TTL of 10 minutes, the work of a renewal being the same at any TTL, so that a round slowed by other work on the machine cannot let one expire between two of its renewals. " +
		"etcd-keepalive: etcd's own lease keep-alive on an embedded single-node etcd — a LeaseKeepAlive stream per caller, 256 requests sent, then the 256 answers read, as clientv3's KeepAlive sends them; a keep-alive is served by the leader from memory, not written to its log. " +
		"serve-bolt: POST /v1/leases/{key}/renew through the leasehttp server over boltstore (fsync on), one request per renewal. " +
		"serve-bolt-batch256: POST /v1/renew with the caller's 256 renewals in one request, made by boltstore in one batch (the lever). " +
		"Every row's renewals keep their TTL, so boltstore answers them quietly (boltstore/quiet.go): applied and answered without a log record or fdatasync, a durable mark written once a second keeping their promise across a crash, as etcd's keep-alives skip its log. " +
		"floor-http-fsync: the batch row's floor — the same request bytes POSTed to a handler that reads the body, waits for an fdatasync of a 4 KiB record (16 bytes a renewal) in the store's directory, shared with the requests that arrived meanwhile (group commit), " +
		"and answers the bytes the real server answered to the same batch, read whole by the caller; no JSON, no lease state: the least a server of 256-renewal batches that makes each batch durable must do on this HTTP stack and disk (quiet renewals need no fdatasync a batch, so for them it is a bound, not a floor). " +
		"serve-bolt-client: 64 lease.Clients on one leasehttp.Client, each holding 2,048 holds (131,072 in all) and renewing them as any program does (the scheduler's batches through POST /v1/renew, a window of 1 to 8 in flight per Client set by their round trips); " +
		"each turn takes the holds over one renewal interval, lets them renew for a TTL and counts their renewals for two TTLs (at least a second). The server's work for a renewal does not depend on the TTL, so the row holds them at a short one and looks for the shortest at which no hold is lost: " +
		"2 s first, then 0.6× the shortest lossless TTL until a turn loses holds, then the geometric mean of the shortest lossless TTL and the longest lossy one below it. leases-kept = the lesser of 131,072 × 30 s / TTL (the holds the same requests keep alive at TTL 30 s, if each is renewed every TTL/3) and ops/s × 10 s (as the other rows: a Client behind its holds' due times renews them later than TTL/3, up to their deadlines, and makes fewer requests), the most of any turn without a loss; ops/s are that turn's renewals a second; ttl-ms is its TTL and lossy-turns counts the turns that lost a hold. " +
		"131,072 holds saturate the server at TTLs of about a second, where a renewal can be hundreds of milliseconds late, as at TTL 30 s it can be 20 s late; with 16,384 the TTL fell to 130-180 ms, and a pause of fdatasync or of the processor of some 80 ms lost every renewal in flight. " +
		"Its leases are acquired once, before the turns (its backend hands them out and takes them back without a request), and its renewals ask the server for 10 minutes whatever TTL the Client judges its holds by, so that a hold lost in a turn leaves its lease held for the next."
}
