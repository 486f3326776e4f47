// bench.mjs times the seed's TypeScript LeaseStore under Node.js on the work
// of memstore's Compare benchmarks and prints Go benchmark lines, so that
// tools/benchreport reads both with one parser. The seed is not part of
// this repository: benchreport transpiles ../shared/seed/fencing-token.ts in
// a throwaway folder, appends `export { LeaseStore as SeedLeaseStore }` to
// that copy, and passes the resulting module's path here.
//
//   node bench.mjs MODULE.mjs [--benchtime 1s|1000x] [--count 1] [--clients 1,2] [--procs 2]
//
// One op is one acquire+release pair, with `now` passed in as the seed's API
// wants (the seed reads no clock). Node runs JavaScript on one thread, so
// c=N means N logical clients interleaved call by call on that thread (which
// is what N concurrent callers of one Node process get): on distinct keys it
// costs what c=1 costs; on one key a client that finds the key held counts
// it in held/op and tries again on its next turn, like the Go benchmark.

import { pathToFileURL } from "node:url";

const TTL_MS = 60_000;
const NOW = 1_000_000;
const KEYS_PER_CLIENT = 1024;

function parseArgs(argv) {
  const opts = { benchtime: { secs: 1 }, count: 1, clients: [1], procs: 1 };
  const rest = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`seedbench: ${a} needs a value`);
      return argv[++i];
    };
    if (a === "--benchtime") opts.benchtime = parseBenchtime(val());
    else if (a === "--count") opts.count = positiveInt(val(), a);
    else if (a === "--clients") opts.clients = val().split(",").map((s) => positiveInt(s, a));
    else if (a === "--procs") opts.procs = positiveInt(val(), a);
    else rest.push(a);
  }
  if (rest.length !== 1) throw new Error("seedbench: usage: node bench.mjs MODULE.mjs [--benchtime 1s] [--count N] [--clients 1,2] [--procs P]");
  opts.module = rest[0];
  return opts;
}

function positiveInt(s, flag) {
  const n = Number(s);
  if (!Number.isInteger(n) || n < 1) throw new Error(`seedbench: ${flag} ${s}: not a positive integer`);
  return n;
}

// parseBenchtime accepts Go's -benchtime forms: a duration (500ms, 1s,
// 1.5s) or a fixed number of ops (1000x).
function parseBenchtime(s) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|x)$/.exec(s);
  if (!m) throw new Error(`seedbench: --benchtime ${s}: want a duration like 500ms or 1s, or a count like 1000x`);
  const v = Number(m[1]);
  if (m[2] === "x") {
    if (!Number.isInteger(v) || v < 1) throw new Error(`seedbench: --benchtime ${s}: want a positive count`);
    return { ops: v };
  }
  const secs = v / (m[2] === "ms" ? 1000 : 1);
  if (secs <= 0) throw new Error(`seedbench: --benchtime ${s} is not positive`);
  return { secs };
}

// loadStore imports the transpiled seed. Its top-level scenario runs on
// import and logs its result: that output is dropped so only benchmark lines
// reach stdout.
async function loadStore(path) {
  const log = console.log;
  console.log = () => {};
  let mod;
  try {
    mod = await import(pathToFileURL(path).href);
  } finally {
    console.log = log;
  }
  if (typeof mod.SeedLeaseStore !== "function") {
    throw new Error(`seedbench: ${path} does not export SeedLeaseStore`);
  }
  return mod.SeedLeaseStore;
}

function clientKeys(w, oneKey) {
  if (oneKey) return ["bench/one"];
  return Array.from({ length: KEYS_PER_CLIENT }, (_, i) => `bench/${w}/${i}`);
}

// runPairs does n successful pairs from c logical clients and returns the
// elapsed nanoseconds and the number of tries that found the key held.
function runPairs(LeaseStore, n, c, oneKey) {
  const store = new LeaseStore();
  const keys = Array.from({ length: c }, (_, w) => clientKeys(w, oneKey));
  const next = new Array(c).fill(0);
  const holding = new Array(c).fill(null);
  let done = 0;
  let held = 0;
  const t0 = process.hrtime.bigint();
  if (c === 1) {
    const ks = keys[0];
    for (let i = 0; i < n; i++) {
      const k = ks[i % ks.length];
      const l = store.acquire(k, "bench", NOW, TTL_MS);
      if (l === null) throw new Error(`seedbench: ${k} found held`);
      if (!store.release(k, l)) throw new Error(`seedbench: release of ${k} failed`);
    }
    done = n;
  } else {
    for (let w = 0; done < n; w = (w + 1) % c) {
      const ks = keys[w];
      const k = ks[next[w] % ks.length];
      if (holding[w] !== null) {
        if (!store.release(k, holding[w])) throw new Error(`seedbench: release of ${k} failed`);
        holding[w] = null;
        next[w]++;
        done++;
        continue;
      }
      const l = store.acquire(k, "bench", NOW, TTL_MS);
      if (l === null) {
        if (!oneKey) throw new Error(`seedbench: distinct key ${k} found held`);
        held++;
        continue;
      }
      holding[w] = l;
    }
  }
  const ns = Number(process.hrtime.bigint() - t0);
  return { ns, held };
}

// bench grows n as Go's testing package does until a run lasts benchtime.
function bench(LeaseStore, c, oneKey, benchtime) {
  if (benchtime.ops !== undefined) {
    return { n: benchtime.ops, ...runPairs(LeaseStore, benchtime.ops, c, oneKey) };
  }
  const goal = benchtime.secs * 1e9;
  let n = 1;
  let r = runPairs(LeaseStore, n, c, oneKey);
  while (r.ns < goal && n < 1e9) {
    const perOp = Math.max(r.ns / n, 1);
    let next = Math.floor((goal * 1.2) / perOp);
    next = Math.min(Math.max(next, n + 1), 100 * n);
    n = next;
    r = runPairs(LeaseStore, n, c, oneKey);
  }
  return { n, ...r };
}

function fmt(x) {
  return x >= 100 ? x.toFixed(1) : x.toFixed(3).replace(/\.?0+$/, "") || "0";
}

const opts = parseArgs(process.argv.slice(2));
const LeaseStore = await loadStore(opts.module);
const suffix = opts.procs > 1 ? `-${opts.procs}` : "";
for (const [group, oneKey] of [["Memstore", false], ["MemstoreOneKey", true]]) {
  for (const c of opts.clients) {
    for (let i = 0; i < opts.count; i++) {
      const r = bench(LeaseStore, c, oneKey, opts.benchtime);
      const nsPerOp = r.ns / r.n;
      let line = `BenchmarkCompare${group}/c=${c}/seed-node${suffix}\t${r.n}\t${fmt(nsPerOp)} ns/op\t${fmt(1e9 / nsPerOp)} ops/s`;
      if (oneKey) line += `\t${fmt(r.held / r.n)} held/op`;
      console.log(line);
    }
  }
}
