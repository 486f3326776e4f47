package boltstore

import "time"

// The floor from the host clock.
//
// Some damage no local check can tell from a crash: the log's last
// records zeroed, an older copy of the log put back, or both files copied
// back together (a VM snapshot, a backup tool, a file-system snapshot).
// Each loses records of tokens issued, and a store served from what is
// left would issue them again. So every Open of an existing store raises
// the floor to the host clock's Unix time in microseconds (clockFloor)
// plus the store's lead (below) before it serves: a token issued at any
// earlier time is below it, as long as
//
//   - the host clock at this Open is ahead of where it was when those
//     tokens were issued (it did not step back across the restart, and the
//     files were not moved to a host whose clock is behind), and
//   - no key is granted more than once per microsecond on average since
//     the Open before: each of a key's grants waits for its own fdatasync,
//     and a batch issues at most one token above what the store knew before
//     it for each key (two if a lease of the minimum TTL expired inside it).
//
// Every token issued since an Open is at most that Open's floor plus one
// per batch, so it stays below the clock of the moment it was issued plus
// the lead. The lead (meta "clock-lead") is how far the floor has ever been
// put above the clock: by a restore's bump, an accepted loss, or tokens
// found above it. It only grows, and every copy of the file holds the lead
// of its time, so a rollback's floor is still above every token issued
// after the copy was taken. A copy of it beside the file (lead.go) keeps
// it when the file is lost.
// A new store (no lease.db before this Open) starts at 1, as the seed's
// tokens did; the first restart moves its tokens to about 1.8 × 10^15,
// where they stay below lease.MaxToken (2^53) until the year 2255.
func clockFloor(now time.Time) uint64 {
	us := now.UnixMicro()
	if us < 0 {
		return 0
	}
	return uint64(us)
}
