// The TypeScript side of BenchmarkCompareTypeScript (bench_test.go): a
// long-lived process that runs what the Go benchmark asks, one JSON line per
// request on stdin, and answers the elapsed time on stdout:
//
//	{"impl":"ts","server":"http://…","clients":32,"n":1000}  →  {"ns":123456789}
//
// One op is one acquire+release pair on a key of the caller's own, so callers
// never contend. impl is one of
//
//	fetch-pair  two raw fetch round trips: acquire and release, JSON parsed, nothing checked
//	ts          LeaseClient.tryAcquire + Hold.release (background renewal armed and stopped)
//	redlock     redlock 4 lock + unlock on one ioredis client ("redis": host:port)

import { createInterface } from "node:readline";

import { Redis } from "ioredis";
import Redlock from "redlock";

import { LeaseClient } from "../src/index.js";

interface Job {
  impl: "fetch-pair" | "ts" | "redlock";
  server?: string;
  redis?: string;
  clients: number;
  n: number;
}

const TTL_MS = 30_000;

type Op = (worker: number) => Promise<void>;

const clients = new Map<string, LeaseClient>();
const redlocks = new Map<string, { r: Redlock; c: Redis }>();

function op(job: Job): Op {
  switch (job.impl) {
    case "fetch-pair": {
      const base = job.server ?? "";
      const body = JSON.stringify({ owner: "bench", ttl_ms: TTL_MS, wait_ms: 0 });
      const headers = { "Content-Type": "application/json" };
      return async (w) => {
        const key = encodeURIComponent(`bench/${w}`);
        const res = await fetch(`${base}/v1/leases/${key}/acquire`, { method: "POST", headers, body });
        const l = (await res.json()) as { id: string; token: number };
        if (res.status !== 200) throw new Error(`acquire: HTTP ${res.status}`);
        const rel = await fetch(`${base}/v1/leases/${key}/release`, {
          method: "POST",
          headers,
          body: JSON.stringify({ id: l.id, token: l.token }),
        });
        await rel.arrayBuffer();
        if (rel.status !== 200) throw new Error(`release: HTTP ${rel.status}`);
      };
    }
    case "ts": {
      const server = job.server ?? "";
      let c = clients.get(server);
      if (!c) {
        c = new LeaseClient({ server, owner: "bench" });
        clients.set(server, c);
      }
      const client = c;
      return async (w) => {
        const h = await client.tryAcquire(`bench/${w}`, { ttlMs: TTL_MS });
        await h.release();
      };
    }
    case "redlock": {
      const addr = job.redis ?? "";
      let rl = redlocks.get(addr);
      if (!rl) {
        const [host, port] = addr.split(":");
        const c = new Redis({ host: host ?? "127.0.0.1", port: Number(port) });
        rl = { r: new Redlock([c], { retryCount: 0 }), c };
        redlocks.set(addr, rl);
      }
      const redlock = rl.r;
      return async (w) => {
        const lock = await redlock.lock(`bench/${w}`, TTL_MS);
        await lock.unlock();
      };
    }
  }
}

/** run does n ops from `clients` concurrent callers and returns the elapsed nanoseconds. */
async function run(job: Job): Promise<number> {
  const f = op(job);
  await f(0); // connections up, code warm
  let next = 0;
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: job.clients }, async (_, w) => {
      while (next < job.n) {
        next++;
        await f(w);
      }
    }),
  );
  return Number(process.hrtime.bigint() - start);
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line.trim() === "") continue;
  try {
    const ns = await run(JSON.parse(line) as Job);
    process.stdout.write(JSON.stringify({ ns }) + "\n");
  } catch (err) {
    process.stdout.write(JSON.stringify({ error: String(err) }) + "\n");
  }
}
for (const { c } of redlocks.values()) c.disconnect();
