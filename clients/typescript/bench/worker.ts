// The TypeScript side of BenchmarkCompareTypeScript (bench_test.go): a
// long-lived process that runs what the Go benchmark asks, one JSON line per
// request on stdin, and answers the elapsed time on stdout:
//
//	{"impl":"ts","server":"http://…","clients":32,"n":1000}  →  {"ns":123456789}
//
// One op is one acquire+release pair on a key of the caller's own, so callers
// never contend. impl is one of
//
//	http-pair   the same two round trips through node:http with a keep-alive Agent: the floor
//	fetch-pair  the same two round trips through fetch
//	ts          LeaseClient.tryAcquire + Hold.release (background renewal armed and stopped)
//	ts-fetch    the same with the client given fetch: its transport before issue 33
//	redlock     redlock 4 lock + unlock on one ioredis client ("redis": host:port)

import { Agent, request } from "node:http";
import { createInterface } from "node:readline";

import { Redis } from "ioredis";
import Redlock from "redlock";

import { LeaseClient } from "../src/index.js";

interface Job {
  impl: "http-pair" | "fetch-pair" | "ts" | "ts-fetch" | "redlock";
  server?: string;
  redis?: string;
  clients: number;
  n: number;
}

const TTL_MS = 30_000;

type Op = (worker: number) => Promise<void>;

const clients = new Map<string, LeaseClient>();
const redlocks = new Map<string, { r: Redlock; c: Redis }>();

/** agent keeps the http-pair connections open between requests, shared by its callers. */
const agent = new Agent({ keepAlive: true });

/** post sends body to url through agent and resolves to the answer's status and text. */
function post(url: string, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const headers = { "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(body)) };
    const req = request(url, { method: "POST", headers, agent }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

function op(job: Job): Op {
  switch (job.impl) {
    case "http-pair": {
      const base = job.server ?? "";
      const body = JSON.stringify({ owner: "bench", ttl_ms: TTL_MS, wait_ms: 0 });
      return async (w) => {
        const key = encodeURIComponent(`bench/${w}`);
        const acq = await post(`${base}/v1/leases/${key}/acquire`, body);
        if (acq.status !== 200) throw new Error(`acquire: HTTP ${acq.status}`);
        const l = JSON.parse(acq.text) as { id: string; token: number };
        const rel = await post(`${base}/v1/leases/${key}/release`, JSON.stringify({ id: l.id, token: l.token }));
        if (rel.status !== 200) throw new Error(`release: HTTP ${rel.status}`);
        JSON.parse(rel.text);
      };
    }
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
    case "ts":
    case "ts-fetch": {
      const server = job.server ?? "";
      let c = clients.get(`${job.impl} ${server}`);
      if (!c) {
        c = job.impl === "ts" ? new LeaseClient({ server, owner: "bench" }) : new LeaseClient({ server, owner: "bench", fetch: globalThis.fetch });
        clients.set(`${job.impl} ${server}`, c);
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
agent.destroy();
