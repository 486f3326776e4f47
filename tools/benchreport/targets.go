package main

import (
	"fmt"
	"runtime"
)

// MaxProcs as a Target's Clients means GOMAXPROCS of the run.
const MaxProcs = 0

// Target is a goal the report checks: Impl's Metric compared with Versus's
// in the same group and client count. With Versus empty, Ratio bounds Impl's
// Metric itself (e.g. allocs/op <= 0).
type Target struct {
	Group   string
	Clients int // MaxProcs: GOMAXPROCS
	Impl    string
	Versus  string
	Cmp     string // "<=" or ">="
	Ratio   float64
	Metric  string
	Note    string // where the target comes from, what it means
	// Floor, if set, names a row of the same group that does the least any
	// implementation of the target's work must do (a durable pair's two
	// fsynced writes, say), measured in the same run. If the floor itself
	// misses the target, no implementation can meet it on this machine, and
	// the report says so: the proof is in every run, not in a note.
	Floor string
}

// Targets are the issues' goals. Add a backend's targets here.
var Targets = []Target{
	{Group: "Memstore", Clients: 1, Impl: "memstore", Versus: "seed-node", Cmp: "<=", Ratio: 1.0, Metric: "ns/op", Floor: "backend-floor",
		Note: "issue 2: a pair no slower than the seed's; memstore reads the monotonic clock twice per pair, the seed reads none"},
	{Group: "Memstore", Clients: 1, Impl: "memstore-callerclock", Versus: "seed-node", Cmp: "<=", Ratio: 1.0, Metric: "ns/op",
		Note: "the same target under the seed's conditions: the caller passes the time in"},
	{Group: "Memstore", Clients: 1, Impl: "memstore", Cmp: "<=", Ratio: 0, Metric: "allocs/op",
		Note: "issue 2: no allocation on the hot path"},
	{Group: "Memstore", Clients: MaxProcs, Impl: "memstore", Versus: "seed-node", Cmp: ">=", Ratio: 1.8, Metric: "ops/s", Floor: "backend-floor",
		Note: "issue 2: distinct keys at GOMAXPROCS goroutines, real clock; the seed runs on Node's one thread"},
	{Group: "Memstore", Clients: MaxProcs, Impl: "memstore-callerclock", Versus: "seed-node", Cmp: ">=", Ratio: 1.8, Metric: "ops/s",
		Note: "the same target under the seed's conditions"},
	{Group: "Memstore", Clients: 1, Impl: "memstore", Versus: "clock-cas-floor", Cmp: "<=", Ratio: 1.6, Metric: "ns/op", Floor: "backend-floor",
		Note: "issue 33: a real-clock pair within 1.6× of the least work a real-clock pair needs (it was 2.67× on 2026-12-06); " +
			"backend-floor adds what the lease.Backend API imposes on every store (a key to find, a secret ID, a Lease by value), so if it misses 1.6× too, no store can meet it"},
	{Group: "Memstore", Clients: MaxProcs, Impl: "memstore-callerclock", Versus: "seed-node", Cmp: "<=", Ratio: 1.0, Metric: "ns/op",
		Note: "issue 33: at GOMAXPROCS goroutines under the seed's conditions, no slower per pair than the seed"},

	{Group: "Serve", Clients: 32, Impl: "serve-bolt", Versus: "etcd-mutex", Cmp: ">=", Ratio: 2.0, Metric: "ops/s", Floor: "fsync-floor",
		Note: "issue 3: acquire+release through lease serve (boltstore, fsync on) vs etcd concurrency.Mutex, one session per client"},
	{Group: "Serve", Clients: 1, Impl: "serve-bolt", Versus: "etcd-mutex", Cmp: "<=", Ratio: 1.5, Metric: "p50-µs",
		Note: "issue 3: one client's p50 within 1.5× of etcd's"},

	{Group: "SQL", Clients: 1, Impl: "pgstore", Versus: "select1-pair", Cmp: "<=", Ratio: 2.5, Metric: "ns/op", Floor: "durable-floor",
		Note: "issue 4: one client's durable acquire+release within 2.5× of two SELECT 1 round trips"},
	{Group: "SQL", Clients: 32, Impl: "pgstore", Versus: "advisory-lock-pair", Cmp: ">=", Ratio: 0.8, Metric: "ops/s",
		Note: "issue 4: 32 clients, at least 0.8× an advisory lock+unlock pair while issuing a durable token"},

	{Group: "FenceMariaDB", Clients: 1, Impl: "sqlfence", Versus: "plain-update", Cmp: "<=", Ratio: 1.1, Metric: "ns/op",
		Note: "issue 21: a guarded UpdateRow within 1.1× of the same UPDATE without the token condition"},
	{Group: "FenceMariaDB", Clients: 8, Impl: "sqlfence", Versus: "plain-update", Cmp: "<=", Ratio: 1.1, Metric: "ns/op",
		Note: "issue 21: the same with 8 clients, each on rows of its own"},
	{Group: "FenceSQLite", Clients: 1, Impl: "sqlfence", Versus: "plain-update", Cmp: "<=", Ratio: 1.1, Metric: "ns/op",
		Note: "issue 21: a guarded UpdateRow within 1.1× of the same UPDATE without the token condition"},

	{Group: "Redis", Clients: 1, Impl: "redisstore", Versus: "ping-pair", Cmp: "<=", Ratio: 2.2, Metric: "ns/op", Floor: "set-del-pair",
		Note: "issue 5: durable server (appendfsync always): one client within 2.2× of two PINGs"},
	{Group: "RedisVolatile", Clients: 1, Impl: "redisstore", Versus: "ping-pair", Cmp: "<=", Ratio: 2.2, Metric: "ns/op",
		Note: "issue 5: volatile server: one client within 2.2× of two PINGs"},
}

// The Redis targets: ops/s at least the faster of redsync and redislock, in
// every configuration and client count — two targets each.
func init() {
	for _, group := range []string{"Redis", "RedisVolatile"} {
		for _, c := range []int{1, 32} {
			for _, rival := range []string{"redsync", "redislock"} {
				Targets = append(Targets, Target{Group: group, Clients: c, Impl: "redisstore", Versus: rival, Cmp: ">=", Ratio: 1.0, Metric: "ops/s",
					Note: "issue 5: at least the faster rival's ops/s, while also issuing a fencing token"})
			}
		}
	}
	Targets = append(Targets,
		Target{Group: "Etcd", Clients: 1, Impl: "etcdstore", Versus: "mutex", Cmp: "<=", Ratio: 1.0, Metric: "p50-µs",
			Note: "issue 6: one client's acquire+release no slower than concurrency.Mutex Lock+Unlock (session reused)"},
		Target{Group: "Etcd", Clients: 32, Impl: "etcdstore", Versus: "mutex", Cmp: ">=", Ratio: 1.2, Metric: "ops/s",
			Note: "issue 6: 32 clients, at least 1.2× the Mutex's ops/s"},
		Target{Group: "BoltLogServe", Clients: 32, Impl: "serve-bolt", Versus: "serve-bolt-nolog", Cmp: ">=", Ratio: 1.15, Metric: "ops/s",
			Note: "issue 23: boltstore's write-ahead log, a second on-disk format, earns its keep: at least 1.15× the store without it through lease serve at 32 clients"},
		Target{Group: "BoltLogServe", Clients: 1, Impl: "serve-bolt", Versus: "serve-bolt-nolog", Cmp: "<=", Ratio: 1.0, Metric: "ns/op",
			Note: "issue 23: and one client's pair is no slower with the log than without"},
	)
}

// Outcome is a Target evaluated on a run's results.
type Outcome struct {
	Target
	Clients  int     // resolved client count
	Measured float64 // Impl's metric ÷ Versus's, or Impl's metric when Versus is empty
	Status   string  // "met", "NOT met", or why it could not be judged
	// FloorMeasured is the Floor row's metric judged as Measured is;
	// Unreachable is set when it misses the target too.
	FloorMeasured float64
	Unreachable   bool
	// OverFloor is Impl's metric ÷ the Floor row's, for a target with
	// Versus and Floor where both were measured, met or not; else 0.
	OverFloor float64
}

// Met reports whether the target was measured and met.
func (o Outcome) Met() bool { return o.Status == "met" }

// Evaluate judges each target on results; procs resolves MaxProcs.
func Evaluate(targets []Target, results []Result, procs int) []Outcome {
	out := make([]Outcome, 0, len(targets))
	for _, t := range targets {
		o := Outcome{Target: t, Clients: t.Clients}
		if o.Clients == MaxProcs {
			o.Clients = procs
		}
		o.Measured, o.Status = evaluate(t, o.Clients, results)
		if t.Floor != "" && o.Status == "NOT met" {
			floor := t
			floor.Impl = t.Floor
			var status string
			o.FloorMeasured, status = evaluate(floor, o.Clients, results)
			o.Unreachable = status == "NOT met"
		}
		if t.Floor != "" && t.Versus != "" {
			over := t
			over.Versus = t.Floor
			if v, status := evaluate(over, o.Clients, results); status == "met" || status == "NOT met" {
				o.OverFloor = v
			}
		}
		out = append(out, o)
	}
	return out
}

func evaluate(t Target, clients int, results []Result) (float64, string) {
	v, err := lookup(results, t.Group, clients, t.Impl, t.Metric)
	if err != nil {
		return 0, err.Error()
	}
	measured := v
	if t.Versus != "" {
		base, err := lookup(results, t.Group, clients, t.Versus, t.Metric)
		if err != nil {
			return 0, err.Error()
		}
		if base == 0 {
			return 0, fmt.Sprintf("%s's %s is zero", t.Versus, t.Metric)
		}
		measured = v / base
	}
	var ok bool
	switch t.Cmp {
	case "<=":
		ok = measured <= t.Ratio
	case ">=":
		ok = measured >= t.Ratio
	default:
		return measured, fmt.Sprintf("bad comparison %q", t.Cmp)
	}
	if ok {
		return measured, "met"
	}
	return measured, "NOT met"
}

func lookup(results []Result, group string, clients int, impl, metric string) (float64, error) {
	for _, r := range results {
		if r.Group == group && r.Clients == clients && r.Impl == impl {
			if v, ok := r.Value(metric); ok {
				return v, nil
			}
			return 0, fmt.Errorf("not measured: %s has no %s", impl, metric)
		}
	}
	return 0, fmt.Errorf("not measured: no %s/c=%d/%s in this run", group, clients, impl)
}

// defaultProcs is the GOMAXPROCS the benchmarks run with: the report's own,
// since `go test` inherits its environment.
func defaultProcs() int { return runtime.GOMAXPROCS(0) }

// groupNotes say what each group measures; they are printed above its table.
var groupNotes = map[string]string{
	"Memstore": "One op = one acquire+release pair; every client cycles through its own 1024 keys, so clients never contend. " +
		"seed-node: the seed's LeaseStore under Node.js, `now` passed in; Node runs one thread, so its c=N is N callers interleaved on it. " +
		"memstore: the real clock, read on each call. memstore-callerclock: a clock returning a time the caller set (the seed's conditions). " +
		"map-mutex: the seed's logic in plain Go (one map, one mutex, time.Now, crypto/rand ID). " +
		"clock-cas-floor: the least a real-clock store must do per pair and nothing else — a monotonic clock read in acquire (expiry = now + TTL) and in release " +
		"(I4: releasing an expired lease fails), one atomic compare-and-swap per call, each client on its own cache line; no index, no ID. " +
		"backend-floor: clock-cas-floor plus what the lease.Backend API imposes on every store and nothing else (memstore/floor_internal_test.go) — " +
		"the key hashed and found in a table built once, the owner and TTL checked, a token above the key's last, a fresh 128-bit secret ID from the processor's own AES-CTR batch, " +
		"the 88-byte Lease returned by value and passed back to Release, which finds the key from the lease's key bytes and compares token and ID; " +
		"no lock, no index upkeep, no expiry order, no waiters or watchers (the floor of the real-clock targets).",
	"Serve": "One op = one acquire+release through leasehttp over boltstore (fsync on) on the client's own key; etcd-mutex = concurrency.Mutex " +
		"Lock+Unlock on an embedded single-node etcd, one session per client; http-noop = two POST round trips to a no-op handler (the HTTP path's limit); " +
		"fsync-floor = the same two round trips where the acquire's handler also waits for a 64-byte record's fdatasync, shared with the acquisitions that arrived meanwhile (group commit), " +
		"and the release's handler answers at once: the least a durable lease server on this HTTP stack and disk must do per pair (the floor of the c=32 target); " +
		"serve-mem = the same server over memstore, nothing durable (what the HTTP API itself costs; serve-bolt's excess over it is the durable commit path's).",
	"SQL": "PostgreSQL started by the harness with fsync=on, synchronous_commit=on, commit_delay=0 (defaults). One op = one pair on the client's own key. " +
		"select1-pair: two SELECT 1 round trips (the limit); advisory-lock-pair: pg_advisory_lock+unlock (no token, nothing durable); " +
		"naive-lease: INSERT … ON CONFLICT + DELETE, durable; pgstore: acquire (durable) + release (committed with synchronous_commit=off: a lost release only delays the successor).",
	"SQLOneKey":     "32 clients race for one key; one op = one successful acquire+release. writing-xacts/op counts transactions that wrote per success.",
	"Redis":         "Redis with appendonly yes + appendfsync always, one go-redis client (PoolSize 64) shared by all contenders, distinct keys. ping-pair = two PINGs (the limit for two round trips); set-del-pair = SET PX + DEL, the fewest writes a lease pair can make, each fsynced before its reply (the limit for a durable pair).",
	"RedisVolatile": "The same on a Redis without persistence (which redisstore refuses unless AllowVolatile: tokens can go backwards after a restart).",
	"Etcd": "One embedded etcd node, distinct keys per client. put-pair = Put + Delete (the limit for a write pair); mutex = concurrency.Mutex Lock+Unlock with a session per client, reused; etcdstore = acquire+release; " +
		"bare-txns (c=1) = the two Txns etcdstore sends for a pair, built once and sent straight through clientv3: etcd's share of etcdstore's pair, without the Store's own work. " +
		"The rows are measured interleaved (benchutil.Interleave), so that a slow spell of the disk falls on all of them alike: at c=1 each round runs one pair of every row, starting from the next row each round, " +
		"at least 2,000 rounds; at c=32 each round runs a slice of 2,048 pairs of every row in turn, at least 12 rounds, and a row's ops/s is its pairs over its slices' wall time. " +
		"Measured one after another instead, the rows' ratios moved by up to ±10% (c=1) and ±15% (c=32) between runs. " +
		"allocs/op and B/op, which would cover a round of all rows together, are not shown.",
	"EtcdOneKey": "32 clients queue for one key on the same embedded etcd; one op = one acquisition and release, so ops/s is the rate at which the key changes hands " +
		"(ANCHORS.md: the Mutex's ~316/s). mutex = concurrency.Mutex with a session per client; etcdstore = AcquireWait (FIFO) + Release.",
	"Bolt": "bbolt with fsync. bbolt-update-pair = two db.Update calls (the limit for a durable pair); bbolt-batch-default = a naive lease pair with db.Batch defaults (the 10 ms trap); boltstore = acquire+release.",
	"BoltLog": "What boltstore's write-ahead log gains. One op = one acquire+release on the Store on the client's own key, fsync on. " +
		"bbolt-only = the same store without its log (a benchmark-only switch): the same commit loop and group commit, each batch made durable by committing " +
		"the bbolt transaction (two fdatasyncs and a write of every touched page); boltstore = the store as it is, each batch made durable by one log record " +
		"and one fdatasync, checkpointed into bbolt about once a second. pairs/batch = pairs per batch made durable (per fdatasync with the log, per bbolt commit without). " +
		"Interleaved (benchutil.Interleave) as the Etcd rows are, so that a slow spell of the disk falls on both rows alike; allocs/op and B/op, which would cover both rows together, are not shown.",
	"BoltLogServe": "The BoltLog rows through lease serve's HTTP stack: leasehttp's server over each store on a loopback socket, and its client. " +
		"serve-bolt-nolog = the store without its log, serve-bolt = as it is. Interleaved.",
	"FenceMariaDB": "sqlfence's cost on one row write, MariaDB from the test harness (InnoDB, innodb_flush_log_at_trx_commit=1), autocommit, each client on rows of its own, a new value each write. " +
		"plain-update = UPDATE jobs SET value = ?, fencing_token = ? WHERE id = ?; sqlfence = the same write through sqlfence.UpdateRow, which adds AND coalesce(fencing_token, 0) <= ? and assigns the token through LAST_INSERT_ID(?) " +
		"(how it tells a matched row from a stale one whatever the connection's found-rows flag). Measured interleaved (benchutil.Interleave): at c=1 one write of each row per round, at c=8 slices of 512 writes.",
	"FenceSQLite": "The same on SQLite (modernc.org/sqlite, WAL, synchronous=FULL: an fsync per commit), one client: SQLite takes one writer at a time. " +
		"sqlfence's statement differs from plain-update only by the token condition.",
	"HTTPOverhead": "The HTTP API's own cost: two GET /healthz round trips vs acquire+release through leasehttp over memstore.",
	"MemstoreOneKey": "One op = one successful acquire+release pair on a single key all clients race for with try-acquire; " +
		"a try that finds the key held is retried at once and counted in held/op. This is the rate at which one key changes hands.",
}
