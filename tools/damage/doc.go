// Package damage is the damage campaign of the default store (issue 28):
// it checks, from outside, as an operator and a failing disk would, that no
// damage to boltstore's files makes `lease serve` hand out a token again.
//
// It builds the real lease binary and serves a data directory under
// concurrent acquisitions on a few keys (crashtest.Drive over leasehttp),
// recording every token any client was given, and leaves it in each of four
// crash states (CrashPoints): killed with SIGKILL mid-load, killed right
// after a checkpoint, shut down cleanly, and killed after many grants since
// the last checkpoint. Copies of both files taken earlier, once under load
// and once right after a checkpoint, stand for backups and snapshots.
//
// A recipe (Recipes, enumerated from a seed) does one kind of damage
// (Classes) to a copy of one state: lease.db removed, emptied, cut (to
// 16384 bytes and other sizes), rolled back to an older copy, taken from
// another store, swapped with the log, a page of it zeroed, one bit of it
// flipped anywhere, in a key's name or in the 8 bytes after it (its
// high-water mark, or its lease's token); the log removed, emptied, cut
// inside its records, its last blocks or a page zeroed, a bit of it
// flipped, rolled back; both files removed, the lead's copy beside them
// left (lease.db-lead); the lead's copy removed; and both files, or all
// three, rolled back together (a VM or filesystem snapshot restored).
//
// Each start of the damaged store is judged (Judge):
//
//   - REFUSED: it exits non-zero before serving. Its stderr must hold, besides
//     the server's log records, exactly one line, "lease: …", naming the
//     store's file and the way out (--accept-log-loss): no goroutine dump,
//     no fault. It is then started again with --accept-log-loss, which must
//     serve, and be judged CLEAN.
//   - CLEAN: it serves, and two acquisitions of every key each get a token
//     above every token ever issued for the key (a floor may make tokens
//     jump: only going back fails).
//   - REISSUED: a token at or below one already issued — I1 broken, the
//     failure the campaign is for.
//   - BROKEN: it neither refuses nor serves (exits 0, hangs, or serves but
//     cannot grant).
//
// Both files rolled back together (a VM or file-system snapshot) leave a
// store no local check can tell from one that was simply not used since;
// its defence, a floor taken from the host clock at every Open, holds only
// while the clock is past every grant and no key is granted more than once
// a microsecond on average. RunTrial checks the first and Prepare the
// second, so a rollback is judged as strictly as any other damage: a run
// where either failed would prove nothing, and errors instead.
//
// The test (campaign_test.go) runs a short form in make test and a long one
// in make chaos (LEASE_CHAOS_LONG=1), and fails, listing the recipes, on
// any trial but a clean start or a clear refusal that --accept-log-loss
// gets past with tokens above all issued.
package damage
