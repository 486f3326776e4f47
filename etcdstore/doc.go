// Package etcdstore is a lease.Backend, lease.WaitAcquirer and lease.Watcher on etcd
// (clientv3), for deployments that outgrow one machine: every operation is
// a linearizable etcd request, replicated by Raft, so leases and tokens
// survive the loss of a minority of members and leader changes.
//
// # Keys
//
// Everything lives under a prefix ending in "/" (WithPrefix, default
// "lease/"), built by one function: prefix, a kind letter, NUL, the lease
// key (and for entries NUL and a name). Lease keys and prefixes
// contain no control characters, so no Store's keys can fall inside
// another's ranges even when one prefix starts with the other (etcd issue
// #6278). Per lease key there are:
//
//   - e: the entries, one per holder or waiter, each attached to its
//     caller's etcd lease: named "0" if created when the key had none (an
//     uncontended key writes one etcd key over and over), else by the etcd
//     lease's ID in hex (pooled etcd leases are reused, so a contended key
//     reuses a few names rather than leaving a deleted key in etcd's index
//     per hand-off until the next compaction); value the lease's secret ID,
//     NUL, and owner, asked TTL, etcd TTL and expiry estimate as JSON.
//     The entry with the oldest CreateRevision is the holder, and that
//     revision is the token; the others wait in create-revision order, as
//     the candidates of concurrency.Election do.
//   - r: the release mark, written (empty, without an etcd lease) by each
//     Release in the Txn that deletes the holder's entry, so that a watch
//     tells a release from an expiry. One small key per lease key ever
//     released.
//
// and, per prefix, one high-water key and one store id (m; StoreID).
// (Versions before the entries
// kept a holder key 'h' and a queue 'w' per lease key, and a waiter created
// the holder key when its turn came — a second write per hand-off. New
// refuses a prefix that still holds such keys.)
//
// # Tokens (I1)
//
// A token is the create revision of the holder's entry. etcd's revision is a
// counter of the replicated Raft log's applied writes: every member applies
// the same committed entries in the same order, and a committed entry is
// never lost when the leader changes (Raft's leader completeness), so the
// revision only grows — across releases, expiries, compactions, member
// restarts and failovers. A key's entries hold in the order of their create
// revisions: an entry holds only once every older one is gone, and every
// entry created later has a greater create revision. So each holder's
// token is strictly greater than every earlier holder's — also when a
// waiter's turn comes long after it queued (its token is from when it
// queued, and every holder before it queued earlier still). An Acquire
// (try once) creates an entry only if the key has none. Renewal keeps the
// token: a Put to an existing key keeps its create revision. Revisions above 2^53 (lease.MaxToken) are
// refused; at etcd's write rates that is centuries away.
//
// Acquisitions of distinct keys batched into one Txn (see Group commit)
// get the same token: all writes of a Txn share its revision. I1 is per key,
// and that revision is still strictly greater than every earlier one, so
// greater than every token issued before for each of those keys; two
// acquisitions of one key never share a Txn.
//
// # Expiry and TTLs (I5)
//
// Expiry is etcd's: each generation is attached to an etcd lease that the
// leader expires on its own clock. etcd lease TTLs are whole seconds and at
// least ceil(1.5 × election timeout) (1 s with the defaults). A waiting
// acquisition's TTL (AcquireWait: package election's terms, queues, and
// lease.Client.Acquire) maps to ceil(TTL), as an etcd Session of the TTL
// would hold it, so that after a crash the successor takes over when etcd
// would: up to about 1.5 s after the TTL (etcd checks expiry every 0.5 s).
// A waiter keeps its etcd lease alive at a third of its etcd TTL; the lease
// it comes to hold lasts at least the TTL from its call, and Expires says
// until when (it may be sooner than the TTL from the hand-off: after a long
// wait lease.Client renews at once). Acquire's TTL maps to ceil(TTL) + 1 s,
// up to about 2.5 s later than asked: the extra second lets an idle pooled
// etcd lease be reused without a keep-alive, which keeps a plain
// acquire+release at two Txns. A new leader also extends every lease by an
// election timeout. A 50 ms TTL is therefore held for about 1 or 2 s.
// This only delays successors after a crash: the holder's client gives
// the lease up at its own conservative deadline (send time + TTL − margin),
// which is always before etcd's expiry. Lease.Expires is an estimate on the
// local clock (receive time of the last grant or keep-alive + etcd TTL); for
// Get, List and HeldError, which cannot know when the holder last renewed,
// it is the latest the lease can expire: now + etcd TTL.
//
// # Round trips
//
// Each generation has an etcd lease of its own — renewing or expiring one
// never touches another — but etcd leases are reused: after a release the
// now keyless etcd lease goes back to a per-Store pool and carries the next
// generation of any key with the same etcd TTL. So, in the common case:
//
//   - Acquire: one Txn (If the key has no entries and the store id is
//     the Store's, Then create one, Else read the oldest, the holder, and
//     the store id: Wiped data). A Grant first only when the pool has no etcd lease for
//     the TTL. A pooled etcd lease last refreshed more than about a second
//     ago (and less than its etcd TTL ago) gets a KeepAliveOnce sent beside
//     the Txn, not before it: keep-alives are served by the leader from
//     memory, without a Raft write, so the pair costs about the Txn's round
//     trip. The lease is vouched for only once the keep-alive succeeded; if
//     etcd expired the etcd lease first, the Txn was refused or its
//     generation went with it, and Acquire tries once more on a new one; if
//     the keep-alive fails otherwise, Acquire revokes the etcd lease (ending
//     the generation) and fails. An older pooled lease gets its keep-alive
//     first. AcquireWait and Renew keep alive first too.
//   - Release: one Txn (If the entry's mod revision is that of this
//     Store's last write of it — the Store knows each of its generations'
//     token and that revision, and any later write has a later one — Then
//     delete it and write the release mark; for a lease this Store did not
//     grant or renew, a read of the key's oldest entry, then the Txn If
//     token and ID match). The next waiter, if any, holds from that
//     revision on, with nothing more written.
//   - Renew: a read-only Txn reading the key's oldest entry to check token
//     and ID, then KeepAliveOnce, then
//     a Txn that writes the entry again (the keep-alive alone would be
//     invisible to watchers); a changed etcd TTL instead moves the keys to
//     another etcd lease in a Txn.
//   - Get, List: one linearizable read.
//
// A lone client's Acquire+Release is thus two Txns, like concurrency.Mutex's
// Lock (a Txn) + Unlock (a Delete), which has no token check on unlock, no
// fresh lease per holder and no secret. The check costs Release one
// comparison (a read of the key inside the Txn) that Unlock does not do;
// Acquire's comparisons of a free key find no live key and read no value,
// where Lock reads the owner back: the two pairs are at parity.
//
// # Group commit
//
// The Txns of Acquire, AcquireWait, Renew and Release that goroutines start
// while one of the Store's Txns is in flight queue up, and the next Txn sends
// all of them — on distinct keys — as nested transactions
// (clientv3.OpTxn), each evaluated on its own by etcd, in one Raft entry:
// 32 clients cost a few Raft entries, gRPC calls and applies instead of 32
// of each. A lone Txn is sent at once by its caller, with no timer. Two
// operations on one key never share a Txn: the second is sent alone, at
// once. A batch that fails fails each of its operations with an error
// matching lease.ErrUnavailable that says the outcome is unknown; one that
// etcd refuses before applying it is sent again one operation at a time.
// The rules are in batch.go.
//
// An acquisition whose outcome is unknown (its ctx ended, or etcd failed,
// with its Txn on the way) may have created a generation that nobody will
// hear of: the Store revokes its etcd lease, which deletes the generation,
// and a Txn that names a revoked etcd lease is refused, so the revoke ends
// exactly what that acquisition may have made, however late its Txn
// arrives. A revoke that etcd cannot take then (a member lost, a leader
// being elected) is tried again in the background until it can, or until
// the etcd lease has expired by itself (twice its TTL and 5 s: a new leader
// renews every etcd lease), or Close (TestAcquireGivenUpAsLeaderDies; it
// was tried once, for a second, and a revoke that fell in an election left
// the key held until its TTL). A wait given up as it was granted is revoked
// the same way.
//
// # Waiting (AcquireWait)
//
// A waiter creates its entry (one Txn, which holds at once if the key had
// no entries) and then writes nothing for its turn: it watches the key's
// entries for deletions, with a watch registered before it reads which
// entries are older than its own, and holds when the last of them is gone
// — at that deletion's revision, with its entry's create revision as token.
// A hand-off is therefore the releaser's Txn and one watch event, as in
// concurrency.Election, where the candidate, once woken, still reads once
// more to see that nobody is left ahead of it; here the watch tells it
// exactly which older entries remain. Differences from concurrency.Mutex
// and Election: the watch starts at the current revision, not at the one
// observed (Mutex's starts there, which puts the watcher among etcd's
// unsynced watchers and delays the event until the 100 ms resync, capping a
// contended key at ~300 hand-offs/s); and the waiter holds only if its own
// entry is still there when the last older one goes — a waiter whose etcd
// lease expired while it waited sees its own entry's deletion first and
// never believes it holds the lease (Jepsen's etcd 3.4.3 finding, etcd PR
// #11408). A waiter keeps its etcd lease alive and writes its entry again
// with each keep-alive (about once a second: one Raft write per waiter per
// second while it waits), so that when its turn comes its entry shows the
// expiry it returns. The EtcdOneKey table of docs/BENCHMARKS.md measures the
// hand-off rate of 32 waiters on one key beside the Mutex's, the Election
// table a single hand-off beside concurrency.Election's. Acquire (try once)
// fails while any entry exists, so waiters are served in order.
//
// # Watching
//
// Store implements lease.Watcher (see Store.Watch) natively: a watch reads
// the entries under its prefix at one revision and watches the Store's
// keys after it, so its state and its changes meet at one revision. A
// watch that hears nothing from etcd for 5 s, though it asks for progress
// after each second of silence, breaks (ErrUnavailable): over a link that
// drops everything it would otherwise tell an old picture for good.
// Acquisitions are an entry's creation (or, for a waiter, the deletion of
// the last older one), renewals writes of the holder's entry, releases its
// delete beside a release mark, expiries its delete by etcd when the etcd
// lease expires: an Expired event comes when etcd deletes the entry, up to
// about 2.5 s after the lease's TTL (see Expiry and TTLs), plus the watch's
// delivery. For that, Renew writes the entry each time (one Raft
// write more than a keep-alive) and Release writes its mark (one key more
// in its Txn), whether or not anybody watches: etcd cannot tell a write
// whether a watcher exists. On the 2-core test machine (under load from
// other work), BenchmarkWatchRenewCost put Renew at 2.7 times the median
// time of the keep-alive-only renewal at one client (978 against 368 µs)
// and at 56% of its rate at 32 (3412 against 6047 renewals/s); the release
// mark raised the median acquire+release, next to concurrency.Mutex's
// Lock+Unlock in BenchmarkCompareEtcd, from 1.05 to 1.07-1.09 times the
// Mutex's at one client, and made no difference above the noise at 32.
//
// # Restoring a snapshot (I7)
//
// Restoring an etcd snapshot without `--bump-revision` starts the cluster
// at the snapshot's revision, which can be lower than tokens issued after
// the snapshot was taken. New tokens would then repeat old ones; the
// guards' high-water marks reject them — safe, but every new holder is
// rejected until the revision passes the old tokens (stuck). Restore with
//
//	etcdutl snapshot restore snap.db --bump-revision 1000000000 --mark-compacted ...
//
// choosing a bump larger than the revisions written since the snapshot. The
// Store detects what it can: New and Open refuse, with ErrRevisionBehind, a
// cluster whose revision is below the prefix's high-water key (raised by
// every acquisition and at every Open — this catches keys copied to a new
// cluster, e.g. by make-mirror), and a running Store stops serving when a
// response's revision is below one it saw earlier. A snapshot restore that
// rewinds the high-water key with everything else cannot be detected from
// inside etcd: the guards' marks are the last line.
//
// # Wiped data
//
// A member's data dir emptied, or a cluster made anew on the same
// endpoints, starts the revision again at 1 and takes the prefix's keys,
// the high-water key and the store id with it. A running Store's first
// response below a revision it saw stops it, as above; but once the new
// cluster has been written past those (other applications' keys, other
// Stores), the revision no longer tells, and a Store that had been idle
// granted a key at token 152 that another Store had granted up to 403
// (TestWipedAndWrittenPastUnderARunningStore). The store id key is
// written once and never changed, so every grant checks it: Acquire's Txn
// compares it (one comparison; a held key's try reads it too, to tell a
// refusal from a holder), and AcquireWait's reads it in either branch and
// revokes the entry it made if it is not the Store's. A watch reads it with
// its state, at the same revision; a running watch that hears it written
// or deleted, or reads it after a second of silence (at most once a second
// per Store, beside the progress request), stops the Store: a watch
// resumed past its revision on the new data hears progress again, and
// showed the holders the wipe took for good (TestWipedEndsRunningWatches).
// Once stopped, the Store answers every operation with an error matching
// lease.ErrUnavailable that says so, and its watches end with it (so do
// those of a Store stopped by ErrRevisionBehind). New on wiped data cannot
// tell it from a new prefix: it writes a new store id, which clients that
// knew the old refuse (leasehttp WithStoreID).
package etcdstore
