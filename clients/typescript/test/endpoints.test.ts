// A LeaseClient given several servers: a server that cannot be connected to
// (a closed port, a name that does not resolve) or that answers 503 is
// passed over, and the client keeps to the one that answered; an acquire
// whose outcome is unknown (its answer lost, or a 503) is not sent again.
// The servers are real `lease serve` processes; the one answering 503 and
// the one resetting connections are plain Node servers in the test.

import assert from "node:assert/strict";
import { createServer as createHTTPServer } from "node:http";
import { createServer as createTCPServer, type AddressInfo, type Server } from "node:net";
import { after, test } from "node:test";

import { InvalidError, LeaseClient, UnavailableError } from "../src/index.js";
import { body, closedPort, postgresURL, startLease, unique } from "./harness.js";

const live = await startLease({ after });

/** listen starts srv on a free loopback port until the tests end, and returns its URL. */
async function listen(srv: Server | ReturnType<typeof createHTTPServer>): Promise<string> {
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  after(() => new Promise<void>((res) => {
    srv.close(() => res());
    if ("closeAllConnections" in srv) srv.closeAllConnections(); // keep-alive ones
  }));
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
}

/** A ".invalid" name never resolves (RFC 6761). */
const unresolvable = "http://lease-test.invalid:7420";

/** recorder is fetch that notes the method and URL of each request it sends. */
function recorder(): { fetch: typeof globalThis.fetch; sent: string[] } {
  const sent: string[] = [];
  const f = (input: Parameters<typeof globalThis.fetch>[0], init?: RequestInit) => {
    sent.push(`${init?.method ?? "GET"} ${String(input)}`);
    return globalThis.fetch(input, init);
  };
  return { fetch: f as typeof globalThis.fetch, sent };
}

/**
 * relay is a server in front of `to` that passes every request on, or,
 * once down() is called, answers each 503 as a lease server whose backend
 * is unavailable does, or, once hang() is called, takes each renewal and
 * never answers it, as a lease server cut from its engine by a link that
 * drops everything does, or, once slow(ms) is called, answers each
 * renewal only after ms.
 */
async function relay(to: string): Promise<{ url: string; down(): void; refused: string[]; hang(): void; hung: string[]; slow(ms: number): void }> {
  let unavailable = false;
  let hanging = false;
  let slowMs = 0;
  const refused: string[] = [];
  const hung: string[] = [];
  const srv = createHTTPServer(async (req, res) => {
    const b = await body(req);
    if (slowMs > 0 && req.url?.endsWith("/renew")) await new Promise((r) => setTimeout(r, slowMs));
    if (hanging && req.url?.endsWith("/renew")) {
      hung.push(`${req.method} ${req.url}`);
      return; // never answered; the client gives up, or the server closes at the end
    }
    if (unavailable) {
      refused.push(`${req.method} ${req.url}`);
      res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "1" });
      res.end(JSON.stringify({ error: { code: "unavailable", message: "relay: the backend is unavailable" } }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const h of ["content-type", "accept", "authorization"]) {
      const v = req.headers[h];
      if (typeof v === "string") headers[h] = v;
    }
    const init: RequestInit = { method: req.method ?? "GET", headers };
    if (b !== "") init.body = b;
    try {
      const r = await fetch(to + (req.url ?? "/"), init);
      res.writeHead(r.status, { "Content-Type": r.headers.get("Content-Type") ?? "application/json" });
      res.end(await r.text());
    } catch {
      res.destroy(); // `to` is gone (a request still passed on as the tests end): no answer
    }
  });
  const url = await listen(srv);
  return { url, down: () => (unavailable = true), refused, hang: () => (hanging = true), hung, slow: (ms: number) => (slowMs = ms) };
}

/** resetter is a server that reads each request and resets its connection without an answer. */
async function resetter(): Promise<{ url: string; requests: string[] }> {
  const requests: string[] = [];
  const srv = createTCPServer((sock) => {
    let got = "";
    sock.on("data", (b) => {
      got += b.toString();
      if (got.includes("\r\n\r\n")) {
        requests.push(got.slice(0, got.indexOf(" HTTP/")));
        sock.resetAndDestroy();
      }
    });
    sock.on("error", () => undefined);
  });
  return { url: await listen(srv), requests };
}

test("servers that cannot be reached are passed over, and the client keeps to the one that answered", async () => {
  const rec = recorder();
  const c = new LeaseClient({ server: [await closedPort(), unresolvable, live.url], owner: "worker-a", fetch: rec.fetch });
  const key = unique("down");
  // An acquire that never reached a server is sent to the next.
  const hold = await c.tryAcquire(key, { ttlMs: 600 });
  assert.equal(c.server.href, `${live.url}/`);
  assert.equal(rec.sent.filter((s) => s.endsWith("/acquire")).length, 3, rec.sent.join("\n"));
  rec.sent.length = 0;
  assert.equal((await c.get(key))?.token, hold.token);
  assert.deepEqual((await c.list(key)).leases.map((l) => l.key), [key]);
  await new Promise((r) => setTimeout(r, 1500)); // renewals, past two TTLs
  assert.equal(hold.held, true, String(hold.signal.reason));
  await hold.release();
  {
    await using w = c.watch(key);
    assert.deepEqual((await w.next()).value, { kind: "synced" });
  }
  // Every request since the first went straight to the server that answered.
  assert.ok(rec.sent.length >= 5, rec.sent.join("\n"));
  for (const s of rec.sent) assert.ok(s.includes(live.url), s);

  // None can be reached: the acquire says it was not sent.
  const none = new LeaseClient({ server: [await closedPort(), unresolvable], owner: "worker-a" });
  await assert.rejects(none.tryAcquire(key, { ttlMs: 1000 }), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /not sent/);
    assert.match(err.message, /ECONNREFUSED/);
    assert.match(err.message, /ENOTFOUND|EAI_AGAIN/);
    return true;
  });
  await assert.rejects(none.get(key), UnavailableError);
});

test("a 503 moves renewals, releases and reads to the next server; an acquire answered 503 is not sent again", async () => {
  const front = await relay(live.url);
  const rec = recorder();
  const c = new LeaseClient({ server: [front.url, live.url], owner: "worker-a", fetch: rec.fetch });
  const observer = new LeaseClient({ server: live.url, owner: "observer" });
  const key = unique("503");
  const hold = await c.tryAcquire(key, { ttlMs: 600 }); // through the relay
  assert.equal(c.server.href, `${front.url}/`);
  front.down();
  // The renewals the relay refuses go to the live server: the hold lives on.
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(hold.held, true, String(hold.signal.reason));
  assert.ok(front.refused.some((r) => r.endsWith("/renew")), front.refused.join("\n"));
  assert.ok(rec.sent.some((s) => s.startsWith(`POST ${live.url}`) && s.endsWith("/renew")), rec.sent.join("\n"));
  assert.equal(c.server.href, `${live.url}/`);
  assert.equal((await c.get(key))?.token, hold.token);
  await hold.release();
  assert.equal(await observer.get(key), undefined);

  // An acquire the relay answers 503 is not sent to the live server.
  const fresh = new LeaseClient({ server: [front.url, live.url], owner: "worker-b" });
  const other = unique("503-acquire");
  const before = front.refused.length;
  await assert.rejects(fresh.tryAcquire(other, { ttlMs: 60_000 }), (err: unknown) => {
    assert.ok(err instanceof UnavailableError && err.status === 503, String(err));
    assert.match(err.message, /outcome is unknown: relay: the backend is unavailable/);
    return true;
  });
  assert.deepEqual(front.refused.slice(before), [`POST /v1/leases/${other}/acquire`]);
  assert.equal(await observer.get(other), undefined, "the acquire was sent again to the next server");
  // The next request starts at the next server.
  assert.equal(fresh.server.href, `${live.url}/`);
  const h = await fresh.tryAcquire(other, { ttlMs: 60_000 });
  await h.release();
});

test("a server that takes renewals and never answers them is passed over in time: the hold lives on", async () => {
  const front = await relay(live.url);
  const c = new LeaseClient({ server: [front.url, live.url], owner: "worker-a" });
  const key = unique("hang");
  const hold = await c.tryAcquire(key, { ttlMs: 900 }); // through the relay
  assert.equal(c.server.href, `${front.url}/`);
  front.hang();
  // Each renewal it takes is given a third of the TTL there, then sent to
  // the live server; it used to wait there until the safe deadline.
  await new Promise((r) => setTimeout(r, 2500)); // renewals, past two TTLs
  assert.equal(hold.held, true, String(hold.signal.reason));
  assert.ok(front.hung.some((r) => r.endsWith("/renew")), front.hung.join("\n"));
  assert.equal(c.server.href, `${live.url}/`);
  await hold.release();
});

test("renewals every server answers slowly, after 40% of the TTL, still renew: the first request is not cut short", async () => {
  const a = await relay(live.url);
  const b = await relay(live.url);
  const c = new LeaseClient({ server: [a.url, b.url], owner: "worker-a" });
  const hold = await c.tryAcquire(unique("slow"), { ttlMs: 1500 });
  a.slow(600);
  b.slow(600);
  await new Promise((r) => setTimeout(r, 4000)); // renewals, past two TTLs
  assert.equal(hold.held, true, String(hold.signal.reason));
  await hold.release();
});

test("an acquire whose answer is lost is not sent again; a read is", async () => {
  const rst = await resetter();
  const observer = new LeaseClient({ server: live.url, owner: "observer" });
  const key = unique("lost");
  const c = new LeaseClient({ server: [rst.url, live.url], owner: "worker-a" });
  await assert.rejects(c.tryAcquire(key, { ttlMs: 60_000 }), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /outcome is unknown/);
    return true;
  });
  assert.deepEqual(rst.requests, [`POST /v1/leases/${key}/acquire`]);
  assert.equal(await observer.get(key), undefined, "the acquire was sent again to the next server");

  const reader = new LeaseClient({ server: [rst.url, live.url], owner: "worker-a" });
  assert.equal(await reader.get(key), undefined); // answered by the live server
  assert.deepEqual(rst.requests.slice(1), [`GET /v1/leases/${key}`]);
});

test("two servers over one PostgreSQL: a hold outlives the server it was acquired through", async (t) => {
  const a = await startLease(t, { backend: postgresURL() });
  const b = await startLease(t, { backend: postgresURL() });
  const c = new LeaseClient({ server: [a.url, b.url], owner: "worker-a" });
  const key = unique("failover");
  const hold = await c.tryAcquire(key, { ttlMs: 800 });
  assert.equal(c.server.href, `${a.url}/`);
  a.proc.kill("SIGKILL");
  await new Promise((r) => setTimeout(r, 2000)); // renewals through b, past two TTLs
  assert.equal(hold.held, true, String(hold.signal.reason));
  assert.equal(c.server.href, `${b.url}/`);
  const seen = await new LeaseClient({ server: b.url, owner: "observer" }).get(key);
  assert.equal(seen?.token, hold.token);
  assert.equal(seen.owner, "worker-a");
  await hold.release();
});

test("two servers over two embedded stores: the second's answers are refused, a key held through the first is not granted again", async (t) => {
  const a = await startLease(t);
  const b = await startLease(t); // a data dir of its own: another store
  const c = new LeaseClient({ server: [a.url, b.url], owner: "worker-a" });
  const key = unique("two-stores");
  const hold = await c.tryAcquire(key, { ttlMs: 60_000 });
  assert.equal(c.server.href, `${a.url}/`);
  a.proc.kill("SIGKILL");
  const another = (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, new RegExp(`${b.url} serves another store than ${a.url} \\(Lease-Store "bolt:[0-9a-f]{32}", not "bolt:[0-9a-f]{32}"\\)`));
    return true;
  };
  await assert.rejects(c.get(key), another, "get through the other store's server took the key for free");
  await assert.rejects(c.tryAcquire(key, { ttlMs: 60_000 }), another, "the key held through the first store was granted again through the second");
  await assert.rejects(hold.release(), another);
});

test("a watch answered 503 is opened again, as a get is asked again", async () => {
  let refuse = 0;
  const asked: string[] = [];
  const srv = createHTTPServer((req, res) => {
    asked.push(`${req.method} ${req.url}`);
    if (refuse > 0) {
      refuse--;
      res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "1" });
      res.end(JSON.stringify({ error: { code: "unavailable", message: "flaky: the backend is unavailable" } }));
      return;
    }
    if (req.url?.startsWith("/v1/watch")) {
      res.writeHead(200, { "Content-Type": "text/event-stream", "Lease-Heartbeat-Ms": "15000" });
      res.write("retry: 1000\n\nid: 1\nevent: synced\ndata: {}\n\n");
      return; // open until the client closes it
    }
    res.writeHead(404, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: { code: "not_found", message: "flaky: no lease" } }));
  });
  const c = new LeaseClient({ server: await listen(srv), owner: "worker-a" });
  refuse = 1;
  assert.equal(await c.get("k"), undefined);
  refuse = 1;
  {
    await using w = c.watch("");
    assert.deepEqual((await w.next()).value, { kind: "synced" });
  }
  assert.deepEqual(asked, ["GET /v1/leases/k", "GET /v1/leases/k", "GET /v1/watch", "GET /v1/watch"]);
});

test("a list of servers must be URLs, not empty, each once", () => {
  assert.throws(() => new LeaseClient({ server: [] }), InvalidError);
  assert.throws(() => new LeaseClient({ server: [live.url, `${live.url}/`] }), InvalidError);
  assert.throws(() => new LeaseClient({ server: [live.url, "127.0.0.1:7420"] }), InvalidError);
  const c = new LeaseClient({ server: [live.url, new URL("http://127.0.0.1:1/base")] });
  assert.deepEqual(c.servers.map(String), [`${live.url}/`, "http://127.0.0.1:1/base/"]);
  assert.equal(c.server.href, `${live.url}/`);
});

test("a server that takes requests and never answers is given up after timeoutMs: reads move on to the next, an acquire's outcome is unknown", async () => {
  // Nothing bounded a request but the caller's signal: a hung first server
  // (a stopped process, a blackholed path) held every get, list and
  // acquire for good, and none moved on to the server that would answer,
  // where the Go and Python clients give up after their timeout (10 s).
  const socks = new Set<import("node:net").Socket>();
  const mute = createTCPServer((sock) => {
    socks.add(sock);
    sock.on("error", () => undefined);
    sock.resume();
  });
  after(() => {
    for (const s of socks) s.destroy();
  });
  const hung = await listen(mute);
  const c = new LeaseClient({ server: [hung, live.url], owner: "worker-a", timeoutMs: 300 });
  const key = unique("hung");
  let start = performance.now();
  assert.equal(await c.get(key), undefined);
  assert.ok(performance.now() - start < 2_000, `get took ${Math.round(performance.now() - start)} ms`);
  assert.equal(c.server.href, `${live.url}/`, "the client did not move on from the hung server");
  const hold = await c.tryAcquire(key, { ttlMs: 60_000 });
  await hold.release();

  const alone = new LeaseClient({ server: hung, owner: "worker-a", timeoutMs: 300 });
  start = performance.now();
  await assert.rejects(alone.tryAcquire(key, { ttlMs: 60_000 }), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /the outcome is unknown/);
    return true;
  });
  // A wait is given the wait it asks for on top.
  await assert.rejects(alone.acquire(key, { ttlMs: 60_000, waitMs: 500 }), UnavailableError);
  const took = performance.now() - start;
  assert.ok(took >= 800 && took < 3_000, `a try and a wait of 500 ms took ${Math.round(took)} ms`);
  assert.throws(() => new LeaseClient({ server: hung, timeoutMs: 0 }), InvalidError);
});
