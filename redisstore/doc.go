// Package redisstore is a lease.Backend on Redis (go-redis v9), with fencing
// tokens that do not go backwards while the server keeps its data.
//
//	s, err := redisstore.Open(ctx, "redis://127.0.0.1:6379/0")
//	// errors.Is(err, redisstore.ErrVolatile) on a server without a durable AOF
//	c, err := lease.NewClient(s)
//
// # Operations
//
// Acquire, Renew and Release are one Lua script call each (EVALSHA,
// falling back to EVAL after a restart), and Get is one GET, so each is one
// round trip and atomic on the server. Expiry is Redis' own PX expiry on the
// lease key, judged on the server's clock; the expiry times the store
// reports are the server's TIME, which the scripts read and store in the
// lease, plus the TTL, never the client's clock (I5). An Acquire that finds
// the key held only reads: it returns a *lease.HeldError with the holder's
// owner, token and expiry and writes nothing, so losers of a contended key
// cost no AOF write.
//
// Each key has a token counter beside its lease, INCRed by every grant and
// never deleted or given an expiry, so tokens rise across release, expiry
// and restart (I1). The lease is one string holding the secret ID, the
// token, the server's TIME at the grant or last renewal (the expiry is that
// plus the TTL), the TTL and the owner, written with SET PX, so that a grant
// is GET, INCR, GET of the token floor (Restores), TIME and SET in one
// script (and one GET more, of the store id: Wipes), a held
// key or a Get one read, and a release GET and DEL; Renew and Release
// compare both ID and token (I4). Tokens stay below 2^53.
// List SCANs the keyspace (see List for its cost).
//
// # Restores
//
// A grant's token is above both the key's counter and the token floor,
// which acquire.lua GETs (a held key's try does not): a key without a
// counter starts at the floor + 1. The floor is set only by Store.Bump
// (`lease bump`), run after restoring an RDB or AOF older than the server's
// last write, before serving: it raises the floor to the highest counter
// (or floor) plus a bump and ends every lease, so that every key, known to
// the backup or not, is then issued tokens above any the server could have
// issued after the backup (unless one key was granted more than the bump
// times since). BenchmarkFloorCost runs the scripts with the floor's GET
// and without it, interleaved, on a durable server: on the 2-core test
// machine under a load average of 2-3 from other work, the median pair
// differed by -1.4%, +1.8% and +1.3% at one client and the pairs/s by
// -3.6%, +8% and -1.1% at 32: no cost resolved above the noise.
//
// # Wipes
//
// A namespace's keys can vanish under a running Store: FLUSHALL, FLUSHDB,
// an operator deleting them, a server restarted without its data (an AOF
// lost, a volume replaced). The token counters go with them, and a Store
// that went on serving would issue every key's tokens from 1 again, below
// ones it issued (I1), or go on from the grants another Store made on the
// new data. Every grant checks, in acquire.lua before its INCR, that the
// store id (StoreID) is still the one the Store read in New: not only a
// key's first (its counter new), since another Store started on the wiped
// namespace may have granted the key already, its counter then at 1 and the
// running Store's grant at 2 (TestWipedAndMadeAnewUnderARunningStore). Gone
// (wiped), or another (a Store started on the wiped namespace since and set
// a new one: the namespace looks whole again, floor and all, but is not the
// one this Store served), the script refuses, having written nothing; the Store then answers that grant and every later
// operation (Acquire, Renew, RenewBatch, Release, Get, List, WaitChange,
// Bump, a new Watch) with an error matching lease.ErrUnavailable that says so and
// names the way out: restore the data and run Bump (`lease bump`), then
// restart; or restart to serve the new, empty data under a new store id,
// which New sets. Its watches running end with that error too
// (TestWipedEndsRunningWatches): they would go on showing the leases the
// wipe took, and drop the new data's grants, tokens from 1 again, as
// older than what they knew. A grant pays one GET in its script, no round
// trip; a held key's try pays nothing. With AllowVolatile nothing is checked: a volatile
// server's restart empties it, and its caller has accepted tokens from 1
// again then (TestVolatileRestartRegression).
//
// A Store that grants nothing (an election's observers, a leader keeping
// its term) finds out where the data shows a sign of a wipe, and reads the
// store id there (TestWipeFoundWithoutAGrant): a Renew, RenewBatch or
// Release that finds its lease gone (one GET more, on that path only; the
// call itself answers lease.ErrNotHeld, which is true); a watched lease's
// expiry check that finds its token counter gone (counters are never
// deleted), or a lease of a lower token in its place; a change on the
// subscription whose token is below one the watches know
// (TestWatchHearsATokenGoBack); and a watch's start, whose state is read
// with the store id in the same pipeline (TestWatchStartFindsAWipe, and
// lease.Follow's watch after a server restarted without its data:
// TestFollowAcrossARestartWithoutData). Without these a watch showed a
// holder the wipe took for good: its expiry check found the counter gone
// and told nothing. Where the store id is still the Store's (keys deleted
// by hand; under AllowVolatile, a server emptied), the watches break
// instead (lease.ErrUnavailable) and start again from the data in place.
// Bump checks the store id too (Store.Bump; TestBumpOnAWipedNamespace):
// run by a Store on a wiped namespace made anew, it raised the new data's
// floor and ended its leases.
//
// On Cluster a grant's script reaches only its key's hash slot, not the
// store id key's, so it checks the slot's copy of the id, NS:{T}:store-id,
// beside the slot's floor. Copies are made as grants need them: the first
// grant in a slot that finds its copy missing, or holding another id, reads
// the store id key itself; if that holds the Store's id, the Store writes
// the copy, reads the store id key again (a wipe between the two reads shows
// in the second; one after it takes the copy too) and grants again, else it
// refuses as above. That costs three round trips once per slot in the
// namespace's life. New writes none: 16384 copies written by every New on
// a new namespace cost it 0.2 s on Cluster, and the conformance suite on
// Cluster took 64 s instead of 7.
//
// What New cannot tell apart. It reads the store id, setting one if there
// is none, and serves what it finds. A namespace wiped while no Store ran,
// and a new one, are the same to it: it serves from token 1 under a new
// store id, which clients that knew the old refuse (leasehttp WithStoreID).
// A store id key alone deleted is a new store id over the old counters
// (tokens still rise; running Stores refuse their next grant). Keys
// of some user keys deleted by hand, with the store id kept (the counters
// gone, on Cluster the slot's copy too), are, to New and to running Stores
// alike, keys never granted: their tokens start again above the floor,
// which may be below them. A slot without its copy of the id on Cluster is
// what Stores of earlier versions left (they wrote none) as much as a slot
// whose keys were deleted: the store id key vouches for it. Data restored
// from an older backup is not a wipe either: Bump it before serving
// (Restores).
//
// Concurrent Acquire, Renew and Release calls of one Store share round
// trips: while calls are on the wire, later ones queue and go out together
// as one pipeline, each script in it still atomic by itself. That saves the
// system calls that bound many clients on a small machine and, with
// appendfsync always, lets one fsync cover all of them. A lone caller never
// waits for company: with nothing in flight its call goes out at once.
//
// # Persistence (I7)
//
// A counter that a restart forgets issues tokens again from 1, and a guard
// then rejects every new holder — or, if it lost its state too, admits a
// stale one. New therefore reads the server's configuration with CONFIG GET
// and refuses, with an error matching ErrVolatile that names what to change,
// unless all of these hold on every node it can reach:
//
//	appendonly yes                 every write goes to the AOF
//	appendfsync always             ... and is fsynced before the reply
//	no-appendfsync-on-rewrite no   ... also while the AOF is rewritten
//	maxmemory-policy noeviction    (when maxmemory is set) nothing is evicted:
//	                               allkeys-* would evict counters, volatile-*
//	                               held leases
//
// Fix a server with redis-cli: CONFIG SET appendonly yes, CONFIG SET
// appendfsync always, then CONFIG REWRITE to keep it in redis.conf.
// AllowVolatile runs on such a server anyway (tests, caches whose guards
// are reset with it); AssumeDurable skips the check on servers that hide
// CONFIG but are known to be durable. Neither checks anything later either.
//
// The settings can change while the Store runs: CONFIG SET, a restart with
// another redis.conf, a failover (Sentinel, a Cluster replica promoted) to a
// node configured otherwise. So New's check is not the last. Every grant's
// script reads INFO persistence and refuses to grant (an error matching
// ErrVolatile and lease.ErrUnavailable) while appendonly is off. CONFIG SET
// appendonly no at runtime leaves the AOF as it was; a restart then loaded
// it and issued again every token granted since
// (TestAppendonlyOffAtRuntime: token 4 after 6). INFO cost a bare script
// 8-18% of its rate in redis-benchmark on the shared test machine (84.7k
// against 78.3k, 53.1k against 43.7k calls/s), a few microseconds beside a
// grant's fsync; a try on a held key never pays it, nor does a renewal.
// The other settings cannot be read from a script: the Store reads them all
// again, as New does (CONFIG GET on every node, the cluster's topology read
// anew), every second, in a goroutine of its own, over a connection of its
// own to each node (the client's options; its hooks do not see the
// checks), which Close closes under a check in flight: Close returns at
// once even while a check waits on a silent link, where it waited for
// go-redis' read timeout before (TestCloseOnSilentLink; recheck.go). While the last check found one that cannot keep tokens
// rising, every grant (Acquire, and Bump) is refused with an error
// matching ErrVolatile and lease.ErrUnavailable that names the setting, the
// node and the fix, until a check finds it fixed
// (TestVolatileSettingAtRuntime); renewals, releases, reads and watches go
// on, as they issue no token. A grant never waits for a check: it loads the
// last verdict. A check the server answers with an error (CONFIG renamed or
// forbidden since) refuses, as New would; one that gets no answer (a node
// unreachable, a timeout) keeps the last verdict and is tried again sooner,
// so that a server back from a restart or a failover is read at once, and
// after 5 s of such checks grants are refused until one passes
// (TestRecheckThatCannotRun). What this cannot close: a grant made between
// a change and the next check, within about a second of the CONFIG SET,
// the restart or the failover.
//
// With appendfsync always a grant's reply leaves the server only after its
// AOF record is on disk, so an acknowledged token survives even a crash
// (kill -9, power loss with honest disks). A reply lost with its connection
// may or may not have been applied: the store reports such failures as
// lease.ErrUnavailable, never as a grant. Acquire is idempotent, keyed by the
// lease ID it generates, so go-redis' automatic retries of a call whose
// reply was lost return the lease the first try granted instead of a false
// "held".
//
// An Acquire whose ctx ends while its script is on the wire returns ctx's
// error at once, and holds nothing: the call goes on without it (go-redis
// would read on past the ctx's end, or, with ContextTimeoutEnabled, close
// the connection at its deadline after the server had the script, which
// then granted a lease nobody knew the ID of, held until its TTL), and the
// store releases what it grants. A call that gets no reply at all after
// go-redis' retries is settled: the lease carrying its ID, if any, is
// released, retried for its TTL while the server cannot be reached
// (settle.go says what this cannot reach). TestAcquireGivenUpLeavesNothing
// checks it against a server in DEBUG SLEEP; before, with
// ContextTimeoutEnabled, the lease stayed held for its minute.
//
// # Redis Cluster
//
// The lease, its counter, and the token floor and copy of the store id its
// grant reads are touched by one script, so they must share a hash slot. Key names are
//
//	NS:{E}:l   lease string      NS:{E}:t   token counter
//	NS:{T}:floor   the token floor of the hash slot of E (NS:floor on a single server)
//	NS:{T}:store-id   that slot's copy of the store id (Wipes; none on a single server)
//
// with NS the namespace (WithNamespace, default "lease", no braces allowed)
// and E the user's key with '%' written as "%25" and '}' as "%7D". Cluster
// hashes only the text between the first '{' and the next '}', which is then
// exactly E: user keys containing braces cannot move the tag, and the keys
// of one lease always land in one slot. A single floor key could sit in one
// slot only, so on Cluster each slot has its own: T is a short tag (at most
// 4 characters) whose CRC16, computed here as Redis does, lands in that slot,
// and Bump raises all 16384; the copies of the store id are made per slot
// the same way (Wipes). Pass a *redis.ClusterClient to New;
// the persistence check covers every node, List scans every master, and the
// release channel works because a plain PUBLISH reaches every node. A
// *redis.Ring is refused (lease.ErrInvalid): it moves keys to the other
// shards when one is marked down, where the lease and the counter are not.
//
// # Failover
//
// Redis replication is asynchronous. If a master fails after acknowledging
// a grant but before a replica received it, a promoted replica has the older
// counter and issues a token again: I1 breaks, and with it fencing. WAIT 1 0
// after each grant, or min-replicas-to-write with min-replicas-max-lag,
// narrows the window but does not close it (Redis has no synchronous,
// quorum-committed replication; a failover can still pick a replica that
// lacks the write). Sentinel or Cluster failover is therefore safe for
// exclusion only in the ordinary case and not for tokens. Where failover must
// not break tokens, use etcdstore (Raft) or pgstore with synchronous
// replication instead; on Redis, prefer one durable master whose restarts are
// restarts, not failovers. A failover to a node whose persistence is
// configured otherwise is refused grants from the Store's next re-check, as
// any change is (Persistence); a grant made there before it is not.
//
// # Waiting
//
// Store implements lease.Notifier, with one subscription per Store to the
// namespace's release channel. A WaitChange marks the lease it waits for as
// wanted (one byte of the lease string, set in place so the expiry stays),
// and Release publishes the key only for a marked lease: a release nobody
// waits for costs no PUBLISH. The mark is set after the waiter listens, and
// tells it whether the lease is still there, so a release just before the
// mark is not missed. Expiry publishes nothing: the mark also reports the
// lease's remaining PX time, and WaitChange returns when it has passed. When
// the subscription drops, pending and new WaitChange calls fail (lease.Client
// then polls) until the store has resubscribed by itself.
//
// # Watching
//
// Store implements lease.Watcher (see Store.Watch). The acquire, renew and
// release scripts PUBLISH each change, without the secret ID, on the
// namespace's changes channel (NS:changes) in the same atomic step; a
// Store's watches share one subscription to it. Expired is timed on the
// server's clock and confirmed by expire.lua, which publishes it on the same
// channel, within a few milliseconds of the server's PX expiry.
//
// The PUBLISH is sent whether or not anybody watches: a script cannot know
// whether a client anywhere subscribes. A PUBLISH nobody receives costs
// the server a dictionary lookup, and the script a few more bytes.
// BenchmarkWatchPublishCost runs the acquire and release scripts with and
// without it, interleaved, on a durable server: on the 2-core test machine,
// under a load average of 15-20 from other work, the median pair took 1.3%
// to 1.7% longer with it at one client (three runs) and 4% to 15% longer
// at 32 clients, where the noise was as large.
package redisstore
