// Package pgstore is a lease.Backend on PostgreSQL (pgx v5, pgxpool), with
// lease.Notifier on LISTEN/NOTIFY so that a waiting lease.Client.Acquire
// wakes when the lease is released instead of polling, and lease.Watcher on
// LISTEN/NOTIFY too.
//
//	s, err := pgstore.Open(ctx, "postgres://app@db/app?pool_max_conns=32")
//	c, err := lease.NewClient(s)
//
// # Model
//
// One table, public.lease_leases by default (WithSchema, WithTablePrefix),
// holds one row per key ever acquired: token, secret ID, owner, TTL and
// expires_at; a one-row table beside it, public.lease_meta, holds the
// schema version, the token floor (see Restores) and the store id
// (Store.StoreID). Every operation is one SQL statement in one round trip (no
// BEGIN/COMMIT; pgx prepares each statement once per connection and then
// only binds and executes it; pgxpool adds a ping only for a connection that
// sat idle for over a second):
//
//   - Acquire reads the key's row and, in the same statement, updates it in
//     place if it is expired (UPDATE … WHERE expires_at <= clock_timestamp()
//     … RETURNING) or inserts it if there is none (INSERT … ON CONFLICT DO
//     NOTHING). If the key is held neither write is attempted: a try on a
//     held key is read-only — no row lock, no transaction ID, no WAL, no
//     commit flush — so a contended key does not collapse under the failed
//     tries of its waiters (ANCHORS.md: a naive upsert manages 223
//     hand-overs/s with 17 WAL flushes each). A successful acquire writes
//     one WAL record (a HOT update) besides its commit. When the key is
//     free, contenders first try an in-memory advisory lock on a hash of the
//     key, so that all but one give up at once, read-only, instead of
//     queueing for the winner's row lock and then writing; the row's own
//     expiry, checked again on its latest version under its row lock, stays
//     the judge of a race. (The advisory lock uses the two-int4 form with a
//     class derived from the table name, so it cannot meet an application's
//     single-bigint advisory locks; a hash collision costs a spurious
//     "held", which callers retry.)
//   - Renew and Release are single conditional UPDATEs keyed by key, token
//     and secret ID, valid only while the lease is unexpired.
//   - Expiry is judged by clock_timestamp(), the database server's clock,
//     never the client's (I5). Expiries have microsecond resolution.
//
// # Group commit
//
// Concurrent operations of one kind (acquire, renew, release) on distinct
// keys share statements. An operation is sent at once, alone, by the
// goroutine that asked, when nothing is queued and no batch is in flight —
// up to two side by side — so a lone client never waits for company. Else
// it queues, and when a statement ends the queue leaves as one statement
// over arrays (unnest) for up to 64 keys, with the same body as the lone
// statement: each operation gets exactly the answer it would have got
// alone, N acquisitions share one round trip, one transaction and one WAL
// flush, and one batch is in flight at a time. Operations on one key never
// share a statement. A statement that fails fails every operation in it
// with an error matching lease.ErrUnavailable (for an acquire: outcome
// unknown, and settled: below). A batch locks its rows in key order (keys
// are sorted before sending), so batches from several processes do not
// deadlock on one another.
//
// # An acquire nobody hears
//
// An acquire statement that grants a lease whose answer never reaches its
// caller would leave the key held by nobody until the TTL: PostgreSQL
// commits a statement whose connection pgx has closed, as long as it is
// waiting on a lock or committing when the connection goes (a cancel
// request does not stop a commit). So no caller's context cancels an
// acquire statement: a caller whose context ends gets its error at once
// (matching the context's, not lease.ErrUnavailable: it holds nothing),
// the statement runs on (for at most 30 s, or until Close), and a lease it
// grants to a caller that left is released when its answer comes. A
// statement whose answer is lost (its connection broken, the server
// restarted, the 30 s reached) is settled in the background: the backend
// that ran it is ended if it still runs it (pg_terminate_backend, waiting
// for it to exit, so its transaction has committed or aborted), then the
// leases granted under the statement's secret IDs, chosen before it was
// sent, are released, so the release can only end what that statement
// granted. Settling is retried while the server cannot be reached, for the
// longest TTL in the statement; a grant outlives it only if the server
// went on running a statement it could not be asked to stop. The role
// needs no privilege for this beyond ending its own sessions. Close
// abandons the statements and settling still under way: what they grant
// is held until its TTL. TestAcquireGivenUpMidCommit checks both paths on
// a commit slowed by commit_delay (5 trials each, every one committed);
// before, each left the lease held by nobody.
//
// # Tokens never regress (I1)
//
// Release and expiry never delete the row: Release marks it free
// (expires_at = -infinity), and the next Acquire sets token = token + 1 on
// it. The row is the key's high-water mark, so a key's tokens rise across
// release, expiry, restarts of the application and of the server. The cost
// is one small row per key ever used; do not delete rows by hand, or that
// key's tokens start again above the floor, which may be below them.
//
// # Tables dropped under a running Store
//
// Tables dropped while a Store serves them (DROP TABLE, DROP SCHEMA …
// CASCADE) take every key's row and the token floor with them, and tables
// made in their place issue tokens from 1 again, below ones the Store
// issued (I1). Whoever makes them gives them a new store id: the Store
// itself, when an operation meets them missing (42P01) and its next one
// prepares them again; or anyone else first (another Store's first use, a
// second lease serve, an operator restoring an empty schema), which leaves
// the running Store nothing missing to meet. So a grant reads the token
// floor only where <prefix>meta holds the Store's own store id, and
// otherwise ends its statement with an error: every grant, on a key with a
// row (on new tables, another Store's, its tokens from 1) as on a key
// without, at the cost of one read of that one-row table in the grant's
// own statement (no round trip more; a try on a held key does not run it,
// as EXPLAIN ANALYZE shows); Bump checks the id too. (Tables made
// anew at schema version 2, without the store id, fail that grant, and the
// next operation migrates them, which gives them a new id.) Either way
// the Store then answers that operation and every later one (Acquire,
// Renew, RenewBatch, Release, Get, List, WaitChange, Bump, a new Watch;
// watches running end) with an error matching lease.ErrUnavailable that
// says so and names the way out: restore the old tables and run Bump
// (`lease bump`), or restart what serves them to serve the new ones under
// their new store id (Store.StoreID; clients that knew the old one refuse
// the new until they are restarted). TestTablesMadeAnewUnderARunningStore
// drops the tables or the schema, makes them anew through another Store
// (which grants the key, or not) or by hand (at schema version 3 and 2),
// and tries a lone grant, a batch and a Bump; before, every grant came out
// after token 3, at token 1 (at 2 where the other Store had granted the
// key once), and the Bump raised the new tables' floor.
//
// What a running Store cannot tell apart. Until it first grants a free key
// on new tables (or runs Bump), it reads them as its own: a try on a held
// key answers lease.ErrHeld, Renew and Release of a lease
// it granted answer lease.ErrNotHeld, and Get, List and Watch show the new
// tables' leases, none or the other Store's, all true of the tables in
// place; a watch running sees the other Store's changes as this Store's
// (the channel is the tables' names) until the refusal ends it. A key's
// row deleted by hand, with <prefix>meta kept, is a key never granted: its
// tokens start again above the floor, which may be below them. The row of
// <prefix>meta deleted, or its store id changed, is tables made anew: the
// Store refuses. Tables restored from a dump of the same store keep its
// store id and are served as they are: a restore to an earlier point
// needs Bump before anything serves them (Restores).
//
// # Restores
//
// A restore to an earlier point (a pg_dump restored, a point-in-time
// recovery stopped short) brings older rows back, and with them older
// tokens; and a key created after the backup has no row in it at all.
// Store.Bump (`lease bump`) is run after such a restore, before serving: it
// raises the token floor in <prefix>meta to the highest token plus a bump,
// raises every row to it, and ends every lease, in one transaction with the
// leases table locked against writes. A key without a row starts at the
// floor + 1, and a key with a row goes on from it, so every key, known to the
// backup or not, is then issued tokens above any the tables could have
// issued after the backup (unless one key was granted more than the bump
// times since). Every row stays at or above the floor, which only Bump
// raises, and only with the rows. BenchmarkFloorCost runs Acquire+Release
// with the floor and without it, interleaved, on the 2-core test machine
// under a load average of 2-5 from other work. When it was measured a
// grant read the floor only when it inserted a row: on a key with a row
// (no floor read then) the median pair was 633 against 634, 635 against
// 629 and 633 against 633 µs at one client; on a new key each time, which
// read it, 976 against 983, 963 against 972 and 783 against 772 µs: no
// cost resolved above the noise. Every grant has read it since, with the
// store id check (Tables dropped under a running Store); not measured
// again.
//
// # Durability
//
// Acquire and Renew commit synchronously: a token is durable once it is
// returned, and a renewal that returns has really moved the expiry. Where the
// session has synchronous_commit = off (set for the server, database, role
// or connection, often for speed), their statements raise it to on for
// their own transaction (set_config in the statement, so no extra round
// trip); stronger settings (remote_write, remote_apply) and local are kept.
// TestServerCrashKeepsTokens crashes a server configured that way under
// load and checks that no acknowledged token is issued again; its negative
// control, without the raise, finds tokens issued twice. Release
// alone commits with synchronous_commit = off for its own transaction (set
// inside the statement with set_config): if the server crashes before the
// release reaches disk, the key comes back as held until its TTL — late, but
// safe for I1 and I3, because releasing mints no token and the holder had
// already stopped. Any later durable commit on the server flushes the
// release with it. This halves the WAL flushes of an acquire/release pair
// and keeps the release short while it holds PostgreSQL's global NOTIFY
// lock, which a notifying transaction holds until its commit is done.
//
// All of this rests on the server flushing what it commits. With fsync =
// off a crash of the server's machine can lose commits that were reported
// flushed, and with full_page_writes = off it can leave pages torn beyond
// what recovery repairs: either way a key's row can come back older, and
// its tokens go backwards (I1). Before it serves anything, a Store reads
// both settings with current_setting and refuses, with an error matching
// ErrVolatile that names them, unless both are on; AllowVolatile runs
// anyway (tests, throwaway databases). A grant checks both again, in its
// statement (current_setting, where a free key is written; a held key's
// try and a renewal do not): a server reconfigured since (ALTER SYSTEM SET
// fsync = off and a reload) is refused every grant, with an error matching
// ErrVolatile and lease.ErrUnavailable, until they are on again
// (TestGrantRefusedOnceNotDurable). Renewals are not refused: a holder
// keeps its lease while an operator mends the server.
//
// Replication: with asynchronous streaming replication a promoted replica
// may lack the most recent commits, so after a failover it can hand out a
// token that was already issued by the old primary, breaking I1 (and it may
// resurrect or forget leases, breaking I3 until their TTLs pass). Guards
// that saw the lost token reject the duplicate's writes only if it is not
// newer, so do not rely on that: run the lease tables on a primary with
// synchronous replication (synchronous_standby_names set and
// synchronous_commit = on, or remote_apply so that a promoted standby has
// also applied every returned token), or accept that a failover needs all
// holders to stop for one TTL.
//
// # Waiting without polling
//
// WaitChange marks the current generation of the key as wanted (one
// asynchronous write by the first waiter of a generation) and asks the server
// how long the lease has left. A release of a wanted generation notifies a
// channel derived from the schema and table names (pg_notify in the release
// statement, delivered on commit) with the key as payload; keys are at most
// 512 bytes, well under NOTIFY's 8000. Releases nobody waits for send
// nothing on this channel (every change still NOTIFYs the watch channel:
// see Watching). Each Store keeps one
// connection, taken out of its pool, listening on the channel and fans
// notifications out to WaitChange calls for their key; WaitChange also
// returns when the lease expires. If the listening connection breaks —
// or stays silent for 5 s and then does not answer a SELECT 1 within 5 s
// more, as over a link that drops everything without closing (the watch
// channel's listener alike) —
// notifications may have been missed: pending and new WaitChange
// calls fail with an error matching lease.ErrUnavailable (lease.Client then
// polls) until the listener has reconnected.
//
// # Watching
//
// Store implements lease.Watcher (see Store.Watch). Every acquire, renew
// and release sends one NOTIFY with its change on a second channel derived
// from the table names, from the statement that makes the change, so it is
// delivered if and only if the change commits, in commit order. A Store's
// watches share one more connection taken out of its pool. Expired is timed
// on the server's clock and checked with one statement, within a few
// milliseconds of the server's expiry.
//
// The NOTIFY is sent whether or not anybody watches: a statement cannot
// know whether a session anywhere listens. It costs the notifying
// transaction an entry in the server's notification queue and the global
// NOTIFY lock from its commit until the commit is done, but no WAL
// (notifications are not logged). That lock is the cost: commits of
// notifying transactions take it in turn, each through its WAL flush, so
// acquisitions from different sessions no longer share flushes (group
// commit). BenchmarkWatchNotifyCost runs Acquire+Release with and without
// the NOTIFYs, interleaved, on the 2-core test machine under a load average
// of 15-20 from other work: through one Store, whose batches put concurrent
// operations in one statement, the two differed by -10% to +7% in pairs/s
// at one client and -38% to +11% at 32, both ways round from run to run (no
// cost resolved above the noise); through 32 Stores, as 32 processes would
// run, the NOTIFYs cut pairs/s by 56% and 68% in two runs (2408 against
// 5515, 1429 against 4405) and raised the median pair 2.4-2.8 times. WAL
// bytes and writing transactions per pair are unchanged (287 B and 2 at one
// client). Telling statements whether anybody watches, so that only watched
// changes notify, would need the check to see a watch that registered after
// the statement's snapshot was taken (a function reading a registry with a
// fresh snapshot after a shared advisory lock the watch waits out): not
// done.
//
// # Schema and versions
//
// The tables are created on first use (CREATE … IF NOT EXISTS, serialised
// across processes by an advisory lock), by a preparation in the Store's
// background on a deadline of its own (30 s): an operation waits for it
// only while its own context lasts, and one that gives up leaves it to
// finish for the next. They carry a schema version in
// <prefix>meta. A release of pgstore migrates older versions forward in
// place and refuses tables of a newer version with ErrSchemaVersion.
// Version 2 added the token floor to <prefix>meta (a catalogue change, at
// floor 0: tables of version 1 go on issuing the tokens they did), version
// 3 the store id (store_id, a random id set in the migration's
// transaction; like every migration it needs the role that owns the
// tables once). Once the tables
// exist at the current version no DDL is run, so the application's role
// then needs only SELECT, INSERT and UPDATE on them. Schema and prefix are
// quoted identifiers (pgx.Identifier.Sanitize); keys, owners and all other
// values are only ever statement parameters.
package pgstore
