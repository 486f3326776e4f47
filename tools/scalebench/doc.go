// Package scalebench measures lease at scale (bench_test.go, `make bench`'s
// Scale groups): what a million idle leases cost in memory and on disk, how
// much they slow an acquire+release pair on other keys, how long boltstore
// takes to open them after a kill -9, what lease.db keeps of a million
// keys each used once (BenchmarkCompareScaleBoltDisk), and how many held
// leases one `lease
// serve` keeps alive against etcd's own lease keep-alive.
//
// Run with `cd tools && go test -run '^$' -bench CompareScale ./scalebench`.
// LEASE_SCALE_LEASES sets the number of idle leases (default 1,000,000) for
// a quicker look; the report's figures are at the default.
//
// To look into the ordinary Client's ScaleRenew row (serve-bolt-client):
// LEASE_SCALE_CLIENT_TRACE=1 logs, for each of its turns, the sizes of the
// batches its Clients sent, their round trips, the time between two sends of
// a hold, and whether each hold lost waited in its Client's queue or was
// answered too late; BenchmarkScaleRenewClientAt holds the row at fixed
// TTLs (LEASE_SCALE_CLIENT_TTLS), traced or not, with the CPU per renewal, the
// batch row's CPU per renewal at a paced rate (LEASE_SCALE_BATCH_RATE) and
// CPU profiles (LEASE_SCALE_CPUPROFILE). LEASE_SCALE_CLIENT_HOLDS sets the
// row's holds per Client (2,048).
//
// Tried on that row and not enough for issue 31's 2× of etcd (each
// measured with BenchmarkScaleRenewClientAt, 131,072 holds at TTL 1 s,
// interleaved with main's binary; the row spends 5.0–7.4 µs of CPU a
// renewal, server and Clients together, at 1.7–1.8 cores, and 2× needs
// about 390,000 renewals a second on the machine of 2026-12-07, where
// etcd's keep-alive made 194,000: about 4.6 µs):
//   - the server's lease tracker and the Client's validation off: 5.1 →
//     4.8 µs (the cache misses moved to the next reader of the memory);
//   - GOGC=300: about 5%;
//   - boltstore keeping quiet renewals in a map beside the open
//     transaction and putting them into bbolt at each checkpoint (one
//     B-tree walk a renewal instead of two): slower, 7.0–7.5 µs against
//     6.4, and the checkpoint's put of some 100,000 records at once
//     stalled the commit loop long enough to lose holds;
//   - no answer to parse or encode at all (the Client making each result
//     from its request: the bound of any compact answer): 5.2–5.5 µs
//     against 6.0–7.4, 345–378k renewals a second against 272–351k, the
//     cores then less busy (1.72);
//   - (2026-12-07, w3l; the machine was shared, at a load of 6–15 on its
//     2 cores, and the row lost holds even at TTL 6 s, main's binary as
//     much as the levers', so the levers were held to the CPU a renewal
//     of their own parts in-process, interleaved with main's, and none
//     showed above that noise; they are kept on the branch
//     w3l-scale-levers for a quiet machine):
//     a Hold's ended flag, an atomic beside its lock, read on the renewal
//     path instead of ctx.Err() (BenchmarkRenewBookkeeping's loop at
//     131,072 holds, CPU ns a renewal, main → flag, 11 pairs: 828 → 836,
//     749 → 681, 760 → 683, 974 → 979, 929 → 878, 931 → 1,149,
//     1,347 → 1,278, 1,128 → 1,284, 1,153 → 982, 937 → 908, 926 → 963);
//     the Client's scheduler requeueing an answered batch's holds under
//     the one lock batchAnswered takes, instead of two a hold (same loop,
//     flag → flag and one lock, 5 pairs: 836 → 914, 681 → 721,
//     683 → 927, 979 → 792, 878 → 736); boltstore applying a batch in
//     the order of its keys (RenewBatch of 256 keys in random order over
//     65,536 leases from 8 callers, CPU ns a renewal, main → sorted, 5
//     pairs: 2,590 → 2,832, 3,957 → 4,590, 5,659 → 4,478,
//     3,851 → 4,804, 3,812 → 4,121; in that benchmark a batch's commit
//     and log record weigh more than its walks). The three together in
//     the row, beside main's turns below: at TTL 2 s 5.92 µs (0 lost),
//     8.91 (47,252), 7.57 (1,570); at TTL 1 s, with a load of 2–4, two
//     turns a process, by process: 9.96 and 8.54, 11.64 and 7.84, 8.30
//     and 6.12 (0 lost, 340,292 renewals a second; every other turn
//     lost holds), where main's were 25.47 and 17.83, 17.98 and 51.76,
//     10.12 and 7.63 and the kept allocations' 11.54 and 8.44, 31.16 and
//     10.30, 26.03 and 6.44 (256 lost, 352,360 a second): worth timing
//     again, with the allocations, on a quiet machine. Timed again on
//     2026-12-07 at a load of 1–2, rebased on the allocations, and merged:
//     BenchmarkScaleRenewClientAt at TTLs 900 and 800 ms, the turns without
//     a loss, interleaved with main's binary (µs of CPU a renewal,
//     thousands of renewals a second): main 6.21, 6.23, 5.81, 5.87, 5.93,
//     6.36, 5.99, 6.30, 6.01, 6.46, 6.52, 6.55 (317–374k); the three levers
//     5.81, 5.67, 5.74, 5.63, 5.67, 5.96, 5.84, 5.66, 5.49, 5.77, 5.44,
//     5.53, 5.21, 5.63, 5.82, 5.71 (355–426k); the ended flag alone and
//     with the key order between the two (5.95–6.49 and 5.71–6.34). The
//     row itself (benchreport -bench '^BenchmarkCompareScaleRenew$', three
//     rounds) then kept 3.71M, 4.06M and 3.13M leases against etcd's
//     keep-alive's 1.74M, 1.90M and 1.56M: 2.13×, 2.13×, 2.01×; but in
//     `make bench` at bd4a5a5 an hour later, 3.98M, 3.59M and 2.65M
//     against 2.06M, 1.86M and 1.54M: 1.93×, 1.94×, 1.72× by round, and
//     1.93× counted (the fastest of each row), against 1.86× before the
//     levers. etcd's row varies as much as ours from run to run;
//   - kept, as allocations fewer whatever the load: leasehttp's reading
//     of a lease no longer allocates the target of errors.As for each of
//     its members (six allocations a renewal in the Client's reading of a
//     batch's answer; the wire codec's batch of 256, BenchmarkWireRenewBatch,
//     1,842 → 306 allocations and 162 → 149 KB; its ns at that load too
//     noisy to tell), and boltstore's reading of a record no longer
//     allocates the key's bytes for its checksum (one a renewal). The
//     row with both, against main, as the load fell to 2–4 (µs of CPU a
//     renewal and holds lost, main → these): at TTL 2 s, by process,
//     7.07 (1,972) → 6.28 (0), 8.03 (2,240) → 7.20 (680), 7.02 (0) →
//     6.85 (0), 14.01 (84,793) and 9.61 (34,698) → 10.08 (28,009) and
//     8.20 (0), 8.67 (0) and 8.13 (0) → 7.69 (4,054) and 6.92 (0), 7.54
//     (0) and 9.06 (23,275) → 8.74 (151) and 8.48 (0); at TTL 1 s every
//     process but two of these lost holds, main's in every turn (the two:
//     6.26 µs at 297,644 renewals a second, 8.12 at 252,913). The losses
//     raise the CPU a renewal, so these say less than the allocations;
//   - pooling the slices of a batch's renewals (the Client's, the
//     server's decoded ones), not done: a BatchRenewer may read them
//     after it returns (tools/sim's batch is applied on delivery, after
//     its caller gave up), and its results and the leasehttp request body
//     belong to the caller and the transport.
//
// Where the CPU goes (a profile of 2026-12-07, TTL 900 ms without a loss,
// 380k renewals a second, 5.7 µs of CPU a renewal; the batch row paced to
// 390k spent 3.4 µs): boltstore's two B-tree walks a renewal (the Seek
// that reads the record, the Put's own) 22%; the Client's scheduler (a
// hold's lock, context and deadline touched again when its batch is
// answered, the two heaps) 18%, most of it cache misses on 131,072 holds'
// memory rather than instructions; the HTTP client's encoding, parsing and
// validation 14%; the GC and allocation about 20%, spread over some 750
// bytes a renewal in a dozen places (each batch's slices of requests and
// results on both sides, its body, bbolt's cursor stacks), none above 9%.
// No one of them is the 10–15% that would put the row at 2× in every run;
// the batches are already full (256), and the holds lost at the edge are
// lost to the server's queue (round trips of 350–500 ms at p99).
//
// What is left is the working set (a B-tree walk, a map lookup and a
// hold's memory for each of 131,072 leases) and HTTP; etcd's model, one
// expiry shared by the leases of a session and renewed once, would change
// the per-lease expiry of I3 and I5.
//
// The lever that put the row past 2× (2026-12-07): POST /v1/renew asked
// with Prefer: return=minimal answers each renewed lease with its TTL and
// expiry only, and the Client makes the rest of the lease from its request
// (leasehttp, the TypeScript and Python clients ask for it). The wire codec
// alone (BenchmarkWireRenewBatch, 256 renewals written and read, both
// ends): 225–250 µs in full, 156–220 µs minimal. BenchmarkScaleRenewClientAt
// at TTLs 900 and 800 ms on a quiet machine, interleaved with the binary
// before it, the turns without a loss: 5.85 and 5.46 µs of CPU a renewal at
// 376k and 387k renewals a second before, 4.97 and 4.84 µs at 412k and
// 426k with it. The ScaleRenew group alone (benchreport, three rounds) then
// kept 4.91M, 4.32M and 3.29M leases against etcd keep-alive's 2.52M, 2.43M
// and 1.61M (1.95×, 1.78×, 2.04×: etcd's row the fastest it has been);
// `make bench` at 877008c, 4.10M, 3.36M and 3.86M against 1.90M, 1.61M and
// 1.56M: 2.16×, 2.09×, 2.47× by round, 2.16× counted. The harness's own
// copy of each batch (the renewals asked for 10 minutes) is reused since
// then, not allocated: its row's collector paid for 24 KB a batch that no
// program makes (not measurable apart in the row's noise).
package scalebench
