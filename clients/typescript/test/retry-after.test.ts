// An answer's Retry-After: read into the error's retryAfterMs as the Go
// client's leasehttp reads it (delay-seconds or an HTTP date, at most a
// minute), and waited for by the client's own retries — get, a watch's
// opening, a hold's renewals — which the signal or a close cuts short. The
// servers are plain Node servers in the test: a rate limit in front of a
// lease server, and a lease server whose backend is unavailable.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { LeaseClient, UnavailableError, UnexpectedAnswerError } from "../src/index.js";
import { body, waitFor } from "./harness.js";

/** T is the part of node:test's context these tests need. */
interface T {
  after(fn: () => unknown): void;
}

/** A request the test server received: its method and path, and when (performance.now()). */
interface Seen {
  readonly what: string;
  readonly at: number;
}

/**
 * serve answers each request with answer(req, its text, n counting the
 * requests from 1) until the test ends, and returns its URL and the
 * requests seen.
 */
async function serve(t: T, answer: (req: IncomingMessage, text: string, res: ServerResponse, n: number) => void): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const srv = createServer((req, res) => {
    seen.push({ what: `${req.method} ${req.url}`, at: performance.now() });
    const n = seen.length;
    void body(req).then((text) => answer(req, text, res, n));
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => {
    srv.closeAllConnections();
    srv.close(() => r());
  }));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, seen };
}

/** rateLimited answers every request 429 without the API's error body, with the Retry-After given. */
function rateLimited(retryAfter: string) {
  return (_req: IncomingMessage, _text: string, res: ServerResponse) => {
    res.writeHead(429, { "Content-Type": "text/plain", "Retry-After": retryAfter });
    res.end("Too Many Requests");
  };
}

/** unavailable answers res as a lease server whose backend is unavailable, with the Retry-After given. */
function unavailable(res: ServerResponse, retryAfter: string): void {
  res.writeHead(503, { "Content-Type": "application/json", "Retry-After": retryAfter });
  res.end(JSON.stringify({ error: { code: "unavailable", message: "test: the backend is unavailable" } }));
}

/** refusedWatch opens a watch against a rate limit saying retryAfter and returns the error it throws. */
async function refusedWatch(t: T, retryAfter: string): Promise<UnavailableError> {
  const srv = await serve(t, rateLimited(retryAfter));
  const c = new LeaseClient({ server: srv.url, owner: "watcher" });
  const err = await c.watch("jobs/").next().then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof UnavailableError && err.status === 429 && err.cause instanceof UnexpectedAnswerError, String(err));
  assert.equal(srv.seen.length, 1, "a 429 is not asked again by the watch itself");
  return err;
}

/**
 * pending reports whether p is still unsettled once the macrotasks queued
 * before this call have run.
 */
async function pending(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  p.then(() => (settled = true), () => (settled = true));
  await new Promise((r) => setImmediate(r));
  return !settled;
}

test("a watch refused 429 with Retry-After: 2 by a rate limit is an UnavailableError whose retryAfterMs is 2000", async (t) => {
  const err = await refusedWatch(t, "2");
  assert.equal(err.retryAfterMs, 2000);
  assert.equal((err.cause as UnexpectedAnswerError).retryAfterMs, 2000);
  assert.match(err.message, /watch again after 2 s/);
});

test("a Retry-After that is an HTTP date is counted from now", async (t) => {
  // toUTCString writes IMF-fixdate, whole seconds: 5 s ahead is 4 to 5 s
  // ahead once truncated, and less by the time the answer takes.
  const err = await refusedWatch(t, new Date(Date.now() + 5000).toUTCString());
  assert.ok(err.retryAfterMs !== undefined && err.retryAfterMs > 3000 && err.retryAfterMs <= 5000, String(err.retryAfterMs));
  assert.equal((await refusedWatch(t, "Thu, 01 Jan 2015 00:00:00 GMT")).retryAfterMs, 0, "a date past is no wait");
});

test("a Retry-After that is neither delay-seconds nor an HTTP date is no retryAfterMs", async (t) => {
  for (const v of ["soon", "-1", "+2", "1.5", "2 s", "Thu, 31 Feb 2030 00:00:00 GMT", "4294967296"]) {
    assert.equal((await refusedWatch(t, v)).retryAfterMs, undefined, v);
  }
  // The control: a value that is one, spaces around it, is read.
  assert.equal((await refusedWatch(t, " 7 ")).retryAfterMs, 7000);
});

test("a Retry-After over a minute is taken as a minute", async (t) => {
  assert.equal((await refusedWatch(t, "120")).retryAfterMs, 60_000);
  assert.equal((await refusedWatch(t, "4294967295")).retryAfterMs, 60_000);
  assert.equal((await refusedWatch(t, new Date(Date.now() + 3_600_000).toUTCString())).retryAfterMs, 60_000);
});

test("a 503 with Retry-After is an UnavailableError with its retryAfterMs; an acquire so answered is not sent again", async (t) => {
  const srv = await serve(t, (_req, _text, res) => unavailable(res, "3"));
  const c = new LeaseClient({ server: srv.url, owner: "o" });
  await assert.rejects(c.tryAcquire("k", { ttlMs: 60_000 }), (err: unknown) => {
    assert.ok(err instanceof UnavailableError && err.status === 503, String(err));
    assert.match(err.message, /the outcome is unknown/);
    assert.equal(err.retryAfterMs, 3000);
    assert.equal((err.cause as UnavailableError).retryAfterMs, 3000);
    return true;
  });
  assert.deepEqual(srv.seen.map((s) => s.what), ["POST /v1/leases/k/acquire"]);
});

test("a get answered 503 is asked again no sooner than its Retry-After", async (t) => {
  // lease serve's own 503: Retry-After: 1. The get was asked again 25 ms
  // and then 100 ms later.
  const srv = await serve(t, (_req, _text, res, n) => {
    if (n <= 2) return unavailable(res, "1");
    res.writeHead(404, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: { code: "not_found", message: "test: no lease" } }));
  });
  const c = new LeaseClient({ server: srv.url, owner: "o" });
  assert.equal(await c.get("k"), undefined);
  assert.equal(srv.seen.length, 3);
  for (let i = 1; i < srv.seen.length; i++) {
    const gap = (srv.seen[i]?.at ?? 0) - (srv.seen[i - 1]?.at ?? 0);
    // Less a few ms: a Node.js timer measures from its loop's cached time.
    assert.ok(gap >= 950, `request ${i + 1} came ${Math.round(gap)} ms after the one before`);
  }
});

test("a get answered 503 by one of several servers asks the next at once, not after the Retry-After", async (t) => {
  // One call tries every server in turn until one answers other than 5xx;
  // the Retry-After is for the call's next round, not for the next server
  // (a failover does not wait for the server it leaves).
  const down = await serve(t, (_req, _text, res) => unavailable(res, "60"));
  const up = await serve(t, (_req, _text, res) => {
    res.writeHead(404, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: { code: "not_found", message: "test: no lease" } }));
  });
  const c = new LeaseClient({ server: [down.url, up.url], owner: "o" });
  const t0 = performance.now();
  assert.equal(await c.get("k"), undefined);
  const took = performance.now() - t0;
  assert.equal(down.seen.length, 1);
  assert.equal(up.seen.length, 1);
  assert.ok(took < 10_000, `the get took ${Math.round(took)} ms: it waited for the Retry-After of 60 s of the server it left`);
});

test("a get pausing for a Retry-After ends at once with its signal", async (t) => {
  const srv = await serve(t, (_req, _text, res) => unavailable(res, "60"));
  const c = new LeaseClient({ server: srv.url, owner: "o" });
  const stop = new AbortController();
  const got = c.get("k", { signal: stop.signal });
  got.catch(() => undefined);
  await waitFor("the first request", () => srv.seen.length === 1);
  // real time: the pause must outlast the client's own (25 ms, then 100)
  // for the get to be seen waiting on the Retry-After.
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(await pending(got), "the get ended before its Retry-After");
  const aborted = performance.now();
  stop.abort(new Error("test: given up"));
  await assert.rejects(got, /test: given up/);
  assert.ok(performance.now() - aborted < 1000, `the get ended ${Math.round(performance.now() - aborted)} ms after its signal`);
  assert.equal(srv.seen.length, 1);
});

test("a watch whose opening was answered 503 pauses for its Retry-After, and a close ends the pause at once", async (t) => {
  // 20 s: within the opening's bound (30.25 s, two of the heartbeats
  // assumed), past which the watch would give up at once instead.
  const srv = await serve(t, (_req, _text, res) => unavailable(res, "20"));
  const c = new LeaseClient({ server: srv.url, owner: "watcher" });
  const w = c.watch("jobs/");
  const first = w.next();
  first.catch(() => undefined);
  await waitFor("the first request", () => srv.seen.length === 1);
  // real time: as above, past the client's own pauses.
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(await pending(first), "the watch's opening ended before its Retry-After");
  const closed = performance.now();
  await w.return();
  assert.deepEqual(await first, { done: true, value: undefined });
  assert.ok(performance.now() - closed < 1000, `the watch ended ${Math.round(performance.now() - closed)} ms after its close`);
  assert.equal(srv.seen.length, 1);
});

/** leaseText is a granted lease as a server writes it. */
function leaseText(key: string, token: number, ttlMs: number, id: string): string {
  return JSON.stringify({ key, owner: "o", token, id, ttl_ms: ttlMs, expires_at: new Date(Date.now() + ttlMs).toISOString() });
}

/**
 * renewing is a lease server that grants every acquire and answers renew
 * batch n with refuse(n) as a 503's Retry-After, or renews when that is
 * undefined; batches lists when each came.
 */
async function renewing(t: T, refuse: (n: number) => string | undefined): Promise<{ url: string; batches: number[] }> {
  const batches: number[] = [];
  const { url } = await serve(t, (req, text, res) => {
    const path = req.url ?? "";
    const json = (s: string) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(s);
    };
    if (path.endsWith("/acquire")) {
      const key = decodeURIComponent(path.split("/")[3] ?? "");
      return json(leaseText(key, 7, (JSON.parse(text) as { ttl_ms: number }).ttl_ms, "a".repeat(32)));
    }
    if (path === "/v1/renew") {
      batches.push(performance.now());
      const after = refuse(batches.length);
      if (after !== undefined) return unavailable(res, after);
      const { renewals } = JSON.parse(text) as { renewals: { key: string; id: string; token: number; ttl_ms: number }[] };
      return json(JSON.stringify({ results: renewals.map((r) => ({ lease: JSON.parse(leaseText(r.key, r.token, r.ttl_ms, r.id)) as unknown })) }));
    }
    json("{}"); // a release
  });
  return { url, batches };
}

test("a hold whose renewal was answered 503 renews again no sooner than its Retry-After", async (t) => {
  // A renewal of a 6 s lease is retried about 600 ms after a failure; the
  // answer asked for 2 s, which the deadline (about 4 s after it) leaves room for.
  const srv = await renewing(t, (n) => (n === 1 ? "2" : undefined));
  const c = new LeaseClient({ server: srv.url, owner: "o" });
  const h = await c.tryAcquire("k", { ttlMs: 6000 });
  await waitFor("the renewal after the refused one", () => srv.batches.length >= 2, 10_000);
  const gap = (srv.batches[1] ?? 0) - (srv.batches[0] ?? 0);
  assert.ok(gap >= 1950, `renewed again ${Math.round(gap)} ms after a 503 that asked for 2 s`);
  assert.ok(h.held, String(h.signal.reason));
  await h.release();
});

test("a hold waits for a renewal's Retry-After only as long as its safe deadline leaves room for another renewal", async (t) => {
  // A minute is past a 3 s lease's deadline: the hold renews again about a
  // tenth of its TTL before it instead (not 300 ms after the failure, as
  // without the Retry-After), and keeps the lease.
  const srv = await renewing(t, (n) => (n === 1 ? "60" : undefined));
  const c = new LeaseClient({ server: srv.url, owner: "o" });
  const h = await c.tryAcquire("k", { ttlMs: 3000 });
  await waitFor("the renewal after the one renewed again", () => srv.batches.length >= 3, 10_000);
  const gap = (srv.batches[1] ?? 0) - (srv.batches[0] ?? 0);
  assert.ok(gap >= 1000 && gap < 2500, `renewed again ${Math.round(gap)} ms after a 503 that asked for a minute`);
  assert.ok(h.held, String(h.signal.reason));
  await h.release();
});
