package main

// Issue 17's speed targets: leadership hand-off on etcd against etcd's own
// concurrency.Election (tools/electionbench), and how soon a change on
// boltstore reaches HTTP watchers (tools/watchbench).
func init() {
	Targets = append(Targets,
		Target{Group: "Election", Clients: 1, Impl: "election-etcdstore", Versus: "etcd-election", Cmp: "<=", Ratio: 1.0, Metric: "p50-µs",
			Floor: "delete-watch-floor",
			Note:  "issue 17: a graceful hand-off (Resign to the next leader's Campaign returning) no slower than etcd's concurrency.Election"},
		Target{Group: "ElectionCrash", Clients: 1, Impl: "election-etcdstore", Cmp: "<=", Ratio: 2, Metric: "over-ttl-rtt",
			Floor: "expiry-floor",
			Note:  "issue 17: a crashed leader's hand-off within the TTL + 2 backend round trips (p50 beyond the 1 s TTL, in put-rtt p50s)"},
	)
	for _, g := range []string{"ElectionCrash", "ElectionCrash10"} {
		for _, m := range []string{"p50-µs", "p99-µs"} {
			Targets = append(Targets, Target{Group: g, Clients: 1, Impl: "election-etcdstore", Versus: "etcd-election", Cmp: "<=", Ratio: 1.15, Metric: m,
				Floor: "expiry-floor",
				Note:  "issue 31: a crashed leader's successor takes over within 1.15× of concurrency.Election's time on the same etcd (" + m + ")"})
		}
	}
	for _, c := range []int{1, 1000} {
		Targets = append(Targets, Target{Group: "Watch", Clients: c, Impl: "leasehttp-bolt", Cmp: "<=", Ratio: 2000, Metric: "p50-µs",
			Floor: "sse-floor",
			Note:  "issue 17: an event reaches an HTTP watcher within 2 ms (p50) of its commit on boltstore; c = watchers"})
	}
	Targets = append(Targets,
		Target{Group: "Silence", Clients: 1, Impl: "leasehttp-watch", Cmp: "<=", Ratio: 3, Metric: "p99-hb", Floor: "deadline-floor",
			Note: "issue 29: a watch stream that stops delivering without closing is reported broken within 3 heartbeat intervals (p99)"},
		Target{Group: "StaleLeader", Clients: 1, Impl: "observe-leasehttp", Cmp: "<=", Ratio: 1, Metric: "p99-hb", Floor: "expires-floor",
			Note: "issue 29: behind a silent link, no leader is reported past its Expires + one heartbeat (p99)"},
	)
	Targets = append(Targets, Target{Group: "Cancel", Clients: 1, Impl: "campaign-leasehttp", Cmp: "<=", Ratio: 100000, Metric: "p99-µs", Floor: "ctx-floor",
		Note: "issue 29: a waiting Campaign given up returns within 100 ms (p99) even against a hung server (the link blackholed)"})
	groupNotes["Cancel"] = "The same server and proxy; each round a Campaign waits at the server for a held key, the link is blackholed both ways (a hung server), and the caller cancels. " +
		"Latency = from the cancel to the call's return. ctx-floor = a goroutine blocked on the context alone; campaign-leasehttp = election.Elector.Campaign through leasehttp.Client " +
		"(its wait then ends in the background). Interleaved: each round one of each row, 20 rounds."
	groupNotes["Silence"] = "leasehttp on memstore, heartbeat 500 ms, behind toxiproxy; each round a watch syncs, and after a random phase within a heartbeat the link is blackholed both ways " +
		"(timeout toxics with no timeout: no byte passes, nothing closes). Latency = from the blackhole to the break reported; p99-hb = p99 in heartbeat intervals. " +
		"deadline-floor = a raw reader of the same stream with the socket's read deadline at the same silence limit (2 heartbeats + 250 ms) before each read: the rule with nothing in between; " +
		"leasehttp-watch = leasehttp.Client.Watch's ErrUnavailable. Interleaved: each round one break of each row, 20 rounds."
	groupNotes["StaleLeader"] = "The same server and proxy; each round a leader is acquired for 1 s and never renewed, an observer syncs, and the link is blackholed after a random phase within a heartbeat. " +
		"Latency = how long past the leader's Expires it was still reported current (0 when the report of no leader, or the observation's error, came before). " +
		"expires-floor = a timer at the Expires: the least an observer that does not ask again must do; observe-leasehttp = election.Elector.Observe through leasehttp.Client. " +
		"Interleaved: each round one of each row, 20 rounds."
	groupNotes["Election"] = "A graceful hand-off on one embedded etcd node: from the leader's resignation to the next leader's Campaign returning, " +
		"the next candidate queued for a term of 120 ms first (longer than etcd's 100 ms watch resync: concurrency.Election's waiter watches from a past revision, " +
		"so it joins etcd's unsynced watchers and is synced only at the next resync, which a term that short would charge it). " +
		"delete-watch-floor = the leader's key deleted and the deletion reaching a synced watcher: the least any election on etcd must do, one write and one event; " +
		"delete-watch-claim = the same, and the watcher then claims with a Txn creating the key if absent: the least an election must do whose next term's token is made at the hand-off (as etcdstore's was before its waiters' entries became the holder; kept for comparison); " +
		"etcd-election = concurrency.Election, leader and candidate each on a session and client of its own: Resign is a Delete, and the candidate, woken by the deletion, " +
		"reads once more (a Get) to see nobody is left ahead of it; election-etcdstore = package election on etcdstore, each on a Store and client of its own: " +
		"Resign is a Release Txn, and the candidate, whose entry (made when it queued; its create revision is the term's token) is then the oldest, holds on the deletion's event, with no write or read of its own. " +
		"Interleaved: each round one hand-off of each row, starting from the next row each round, 120 rounds. ns/op is the mean hand-off; ops/s means nothing here."
	groupNotes["ElectionCrash"] = "A crashed leader on the same etcd: the leader's process stops (its client closed: no more keep-alives or renewals, nothing revoked or released) " +
		"right after its Campaign returned, and the hand-off counts from just before its first request (its lease's grant) to the next leader's Campaign returning; TTL 1 s, " +
		"the least etcd grants here (ceil(1.5 × the 100 ms election timeout)). expiry-floor = an etcd lease of 1 s granted, a key put on it and never kept alive, " +
		"and the key's deletion reaching a synced watcher: the least any election on etcd must wait for (etcd's lessor revokes expired leases every 500 ms, so up to half a second beyond the TTL); " +
		"etcd-election = concurrency.Election with a 1 s session; election-etcdstore = package election on etcdstore with a 1 s TTL, which etcdstore maps to an etcd lease of ceil(TTL) for a waiting acquisition as the election's (ceil(TTL) + 1 s before issue 31; see etcdstore's package documentation). " +
		"put-rtt = one Put round trip on the same etcd, 50 timed between rounds: over-ttl-rtt is a row's p50 beyond the TTL in put-rtt p50s, over-ttl-ms the same in ms. " +
		"Each round runs 4 hand-offs of every row at once, instance i of each row starting at the same random offset in etcd's 500 ms tick; 6 rounds."
	groupNotes["ElectionCrash10"] = "ElectionCrash with a TTL of 10 s for every row (the expiry floor's etcd lease, the Election's session, the election's term)."
	groupNotes["Watch"] = "c = watchers. One change = an acquisition on boltstore (fsync on), made in process; its latency at a watcher runs from Store.Acquire returning to the watcher receiving the Acquired event " +
		"(boltstore publishes a batch's changes once durable, just before answering, so a watcher can be first: a latency may be negative). " +
		"sse-floor = no store: per stream a handler woken through a channel writes and flushes the bytes leasehttp would send for the event, each watcher reading them off its own loopback stream " +
		"with a bufio.Reader, timed from the wake-up: the least any watch over HTTP here must do; boltstore-watch = boltstore's Watch in process, no HTTP; " +
		"leasehttp-bolt = boltstore behind leasehttp's server on loopback, each watcher a leasehttp.Client.Watch stream of its own. " +
		"Interleaved: each round one change through each row (then its release, untimed, awaited at every watcher), 2,000 rounds at c=1 and 100 at c=1000; " +
		"p50 and p99 are over every watcher's latency; ns/op is their mean."
}
