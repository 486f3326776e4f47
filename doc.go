// Package lease hands out leases (expiring locks) that carry fencing tokens,
// so that the resource a lease protects can itself refuse the late write of a
// holder whose lease has already expired.
//
// # The failure a TTL lock cannot stop
//
//  1. Worker A acquires the lease on "job" with a TTL of 100 ms.
//  2. A pauses — a long GC, swap, a stalled network — for longer than the TTL.
//  3. The lease expires; worker B acquires "job" and writes its result.
//  4. A wakes up, still believing it holds the lease, and overwrites B's write.
//
// No client-side check closes the gap between A's last check and A's write:
// the pause can fall exactly there. Only the resource can decide, at the
// moment of the write, whether the writer is still current.
//
// # The cure: tokens and guards
//
// Every successful acquisition returns a [Token] that is strictly greater
// than every token issued before for that key (invariant I1). The holder
// sends its token with every write, and the resource — through a guard from
// package fence — accepts a write only if its token is not older than the
// newest token it has already accepted, comparing and recording in one atomic
// step. In the scenario above A holds token 1 and B token 2; once B's write
// with token 2 is accepted, A's late write with token 1 is rejected with
// [ErrStaleToken], whenever it arrives.
//
// # Pieces
//
// A [Backend] is the store that serialises contenders and mints tokens
// (packages memstore, boltstore, pgstore, redisstore, etcdstore, and the
// remote leasehttp.Client). Backends perform single atomic operations; a
// [Client] adds what applications need on top: [Client.Acquire] waits for a
// lease, [Client.TryAcquire] tries once, and the returned [Hold] renews itself
// in the background and cancels its [Hold.Context] with cause [ErrLost] as
// soon as the client can no longer be sure it holds the lease (invariant I5):
// the deadline is the send time of the last successful acquire or renew plus
// the TTL minus a drift margin, so the client gives up before the backend can
// hand the lease to someone else.
//
// Invariants I1–I7 are stated in the repository's docs/DESIGN.md and checked
// for every backend by package leasetest.
package lease
