// Package boltstore is the durable embedded lease.Backend: leases and token
// high-water marks in one bbolt file, the default store of `lease serve`.
//
// # Durability
//
// Every write (a granted acquire, a renew that lengthens its TTL, a
// release, a hand-over to a waiter) is made durable before it is answered,
// by a write-ahead log kept
// beside the bbolt file (PATH-wal): the commit loop appends each batch's
// writes to it as one checksummed record and fdatasyncs it, one flush of
// space the log has already allocated. A token is therefore never returned
// before the record of it is on disk, and neither a killed process nor a
// lost machine can make a later token smaller than one already handed out
// (I1), nor shorten a lease its holder was told it has. The same writes go
// into a bbolt write transaction that stays open; a checkpoint commits it
// to the bbolt file (bbolt's own fsyncs: NoSync is never set) about once a
// second while writes arrive, when the log passes 4 MiB, and at Close, and
// the log starts over. Open replays the records left since the last
// checkpoint, stopping at the first torn or missing one, so a batch is kept
// whole or not at all, zeroes the rest of the log, and checkpoints. The
// two files are one store: wal.go and walblock.go have the format and the
// rules, and the next section what Open refuses.
//
// # Damage, and files that vouch for each other
//
// The log is written in checksummed 512-byte blocks, each naming its
// record, so Open tells what a crash leaves (the last record cut short,
// its blocks each new or as they were) from damage: a block that fails its
// checksum, anywhere, or a record missing before one written after it.
// Every value in the bbolt file is sealed with the CRC-32C of its key and
// bytes (record.go), and Open reads each once. The file records the log's
// size, which does not change after Open (a batch that does not fit is
// checkpointed instead), and the epoch its log's records carry, which
// only rises. So Open refuses, with a *CorruptError (ErrCorrupt) whose one
// line names the file, what is wrong and the way out: a damaged log block;
// a log missing, emptied, cut or of another size than recorded; a bbolt
// file missing or empty beside its log, shorter than its meta pages say,
// or with a page element (an offset, a size, a child's page) that reaches
// outside its page, where bbolt would read outside the file (both checked
// before bbolt maps it, dbfile.go), holding a value that fails its
// checksum or a bucket under another name than the store's (a bit flipped
// in the meta or leases bucket's name, whose leases a new, empty bucket
// would forget), or older than its log (a record of a later epoch). Serving on
// could issue again tokens that the lost writes issued. AcceptLogLoss drops
// what cannot be read or trusted and raises a floor, kept in the file,
// above every token it could have issued, for every key, known or not
// (recover.go). A bbolt file it cannot open is moved aside for a new one,
// floored at the host clock plus the lead (floor.go): the larger of what
// the damaged file's bytes hold of it (salvage) and the copy of the lead
// every Open keeps beside the file (PATH-lead, lead.go), so that a
// restored store's tokens, a bump ahead of the clock, stay ahead of it
// when the file is missing, emptied or cut short before the page that
// holds its lead. The bbolt file and its log both missing beside that
// copy is refused too: a store issued tokens there, and a new one would
// start again at 1.
//
// What no local check can tell from a crash (the log's last records
// zeroed, an older copy of the log, both files copied back together) is
// covered by the floor each Open of an existing store takes from the host
// clock (floor.go): a rollback can issue a token again only if the host
// clock at the reopen reads earlier than when that token was issued.
//
// A renewal that keeps (or shortens) its lease's TTL, the common one, is
// quiet: applied and answered with its batch but not logged, so a batch of
// them costs no fdatasync, as etcd's lease keep-alives never reach its log.
// What a crash can undo of it is the later expiry it answered, and the
// store keeps that promise another way: before answering a quiet renewal
// the log holds, durably, a mark saying until when it may answer them (a
// second ahead, written once a second while they arrive, deleted by each
// checkpoint, which writes them to the file), and Open after a crash keeps
// every lease that may have been renewed quietly until at least the mark
// plus its TTL (quiet.go). So a lease is never shortened by a crash. Open
// cannot tell which leases were renewed, so it keeps every lease live
// when the first mark since the last checkpoint was written: a lease may
// be held longer than its holder was last told, up to its TTL plus a
// second past the crash, and one that expired after that mark, in the
// second or so before the crash, is held again until then.
// TestQuietRenewalsSurviveSIGKILL kills a renewing process at random
// moments and checks every answered expiry after the reopen.
//
// A release is the other exception: it is answered as soon as the commit loop has
// applied it, before its batch's record is durable. A release lost in a
// crash leaves the lease held until its TTL, exactly as if the holder had
// never released, which no invariant forbids; in return the releaser waits
// for no fsync, and its next request reaches the next batch. Get and List
// read the applied state and wait until every batch it includes is durable,
// so they never show state a crash could undo (a quiet renewal's expiry,
// which a crash can only lengthen, they show at once; a lease they show
// expired in the second before a crash may be held again after it, as
// above). An Acquire that finds the
// key held answers from such a read, writing nothing and causing no fsync;
// like them it waits if a batch it read is still being synced (a crash
// could issue again a token it names), and not at all otherwise.
//
// If a log write or a checkpoint fails (a write or fsync error, a full
// disk), the state on disk is no longer known, so the store fails every
// later operation with an error matching lease.ErrUnavailable until it is
// closed and reopened, which recovers from what is on disk. Close returns
// that error too, as it does when its own last checkpoint fails.
//
// # Why a log
//
// bbolt commits are durable too, but each costs two fdatasyncs and a write
// of every page it touched, where a log record costs one fdatasync. The
// log is kept because that is measured to pay: against the same store
// making each batch durable by a bbolt commit instead, interleaved in one
// run (BenchmarkCompareBoltLog and BenchmarkCompareBoltLogServe; 2 vCPUs,
// 22 rounds, medians), the log gave lease serve 1.37 times the
// acquire+release pairs per second at one client (1.28 to 2.0 between
// rounds) and 1.20 times at 32 (1.03 to 1.61), and the Store itself 1.7
// times at both (12 rounds).
// `make bench` measures it again (issue 23's targets).
//
// # Group commit
//
// One goroutine, the commit loop, is the only writer. It takes every write
// waiting for it, applies them in arrival order (each outcome decided as if
// they ran one by one, so serialisation is exact), makes them durable with
// one log record, and then answers them all. A lone caller's write is
// made durable at once, with no batching delay; writes that arrive while a
// record is being synced share the next one, so throughput is not bounded
// by one fsync per operation. A batch in which every operation failed
// writes no record and costs no fsync.
//
// # Watching
//
// Store is a lease.Watcher. The commit loop tells watchers of a batch's
// changes once its log record is durable, never of one a crash could undo,
// and takes a new watch's snapshot between two batches, so the state and
// the changes after it fit exactly. An expiry writes nothing: a timer on
// the store's clock sends a watched lease's key to the commit loop, which
// tells watchers of its expiry unless it was renewed. They hear of it
// within the timer's delay plus two batches (each at most one fdatasync)
// of the expiry. Watchers, like waiters, live in memory: Close, or a
// failure that stops the store, cuts them off with an error matching
// lease.ErrUnavailable, and a watch of the reopened store starts from its
// state. See Store.Watch.
//
// # What survives a restart
//
// Every lease with its owner, token, secret ID, TTL and expiry, and a
// floor below which no token is issued again: a key's lease record is its
// high-water mark, and releasing the key, or sweeping its lease a minute
// after it expired (sweep.go), folds its token into the floor. Expiry is stored as absolute time on the store's clock, so a lease
// keeps expiring while the server is down and is still held after a restart
// if its time has not come. The store's clock (unless WithClock is given) is
// the wall clock read at Open plus the monotonic time since: while the
// process runs, stepping the wall clock changes no lease; across a restart,
// the stored expiry is compared with the wall clock, so a clock stepped
// between runs shifts leases by that step. Waiters (AcquireWait) live in
// memory and are not kept: Close fails them, as does, at once, a failure
// that stops the store.
//
// A released lease's record is deleted; an expired one stays until its key
// is next written or the sweep comes to it. The file grows with the leases
// held, not with the keys ever used: a million distinct keys, each
// acquired and released once, leave a file of 256 KiB. A new store's
// tokens start at 1; each later Open raises them above the host clock's
// microseconds.
//
// # Its files
//
// Beside the bbolt file and its log is the copy of the store's lead,
// path with "-lead" after it (lead.go), written at every Open before the
// store answers anything: 28 bytes, replaced whole by a rename.
//
// Open refuses a bbolt file, log or lead copy that is a symbolic link, has another
// name (a hard link), belongs to another user or is not a regular file,
// before it writes to, zeroes or chmods it, and a directory that other
// users may write to (AllowSharedDir allows it), as they could remove the
// files and with them every token issued. An Open that fails, on a full
// disk say, removes the files it created: a bbolt file cut short would not
// open again.
//
// # Backups
//
// Store.Backup copies the store while it serves, as of one instant between
// two batches (right after a checkpoint, so the copy needs no log).
// Restore makes a store of such a copy whose tokens, for every key, start
// above the copy's highest plus a bump (DefaultBump, 2^40), and which holds
// no leases: a copy served as it was would issue again the tokens issued
// after it was taken, so Open refuses one (its log is missing), and a copy
// of both files, served, is floored at the host clock. backup.go.
//
// # Its id
//
// The file keeps a random store id (Store.StoreID), written with the store
// and read by every later Open, which lease serve names in every answer
// (leasehttp WithStoreID) so that a client given several servers' URLs
// finds one serving another store. Backup and Restore keep it: a restored
// store replaces the one backed up. An id that fails its checksum is
// damage, refused like any; AcceptLogLoss then gives the store a new one,
// as it does a store whose file it moves aside: clients that saw the old
// one refuse the store's answers until they are restarted. (The id is not
// read back out of a damaged file's bytes, as the floor and the lead are:
// a forged one there, in a key or an owner, could be another store's.)
//
// # One process per file
//
// bbolt locks the file (flock) for the process that opened it; the log is
// opened only under that lock. Open fails
// after WithLockTimeout (default one second) with an error naming the file if
// another process holds it, fails with a clear error if the file is corrupt
// (it runs bbolt's consistency check over every page on Open, so its cost
// grows with the file) or carries a schema version newer than this build's.
package boltstore
