// client.watch against a real `lease serve`: the events in order, the
// connection closed by break, await using and abort (the server sees the
// watcher leave), a stream broken by the server's death, and refusals.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";

import {
  ForbiddenError,
  InvalidError,
  LeaseClient,
  TooManyWatchersError,
  UnauthorizedError,
  UnavailableError,
  UnexpectedAnswerError,
  UnsupportedError,
  type Watch,
  type WatchEvent,
} from "../src/index.js";
import { EventStreamParser } from "../src/sse.js";
import { metric, pause, postgresURL, startLease, strandingProxy, unique, waitFor } from "./harness.js";

// Heartbeats every 10 ms: the stream is mostly comments between the events.
const server = await startLease({ after }, { args: ["--watch-heartbeat", "10ms"] });

/** step returns the watch's next event, failing after 10 s. */
async function step(w: Watch): Promise<WatchEvent | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, rej) => {
    timer = setTimeout(() => rej(new Error("no event within 10 s")), 10_000);
  });
  try {
    const r = await Promise.race([w.next(), late]);
    return r.done ? undefined : r.value;
  } finally {
    clearTimeout(timer);
  }
}

/** rawAcquire acquires key without a client, so nothing renews or releases it. */
async function rawAcquire(url: string, key: string, ttlMs: number): Promise<number> {
  const res = await fetch(`${url}/v1/leases/${encodeURIComponent(key)}/acquire`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ owner: "raw", ttl_ms: ttlMs, wait_ms: 0 }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { token: number }).token;
}

/** describe makes an event comparable: its kind, key, owner and token. */
function describe(ev: WatchEvent | undefined): string {
  if (ev === undefined) return "end";
  if (ev.kind === "synced") return "synced";
  return `${ev.kind} ${ev.lease.key} ${ev.lease.owner} ${ev.lease.token}`;
}

test("held leases in key order, synced, then acquired, renewed, released and expired in order", async () => {
  const c = new LeaseClient({ server: server.url, owner: "watcher" });
  const p = unique("watch") + "/";
  const tb = await rawAcquire(server.url, p + "b", 60_000);
  const ta = await rawAcquire(server.url, p + "a", 60_000);
  await rawAcquire(server.url, unique("elsewhere"), 60_000);

  await using w = c.watch(p);
  const first = await step(w);
  assert.equal(describe(first), `held ${p}a raw ${ta}`);
  assert.ok(first?.kind === "held" && first.lease.ttlMs === 60_000 && first.lease.expiresAt.getTime() > Date.now());
  assert.equal(describe(await step(w)), `held ${p}b raw ${tb}`);
  assert.equal(describe(await step(w)), "synced");

  // Across many heartbeats: a hold of 600 ms renews itself at about 200 ms.
  const hold = await c.tryAcquire(p + "c", { ttlMs: 600 });
  assert.equal(describe(await step(w)), `acquired ${p}c watcher ${hold.token}`);
  const renewed = await step(w);
  assert.equal(describe(renewed), `renewed ${p}c watcher ${hold.token}`);
  await hold.release();
  // Renewals may have come before the release did.
  let ev = await step(w);
  while (ev?.kind === "renewed" && ev.lease.key === p + "c") ev = await step(w);
  assert.equal(describe(ev), `released ${p}c watcher ${hold.token}`);

  const td = await rawAcquire(server.url, p + "d", 50);
  assert.equal(describe(await step(w)), `acquired ${p}d raw ${td}`);
  const expired = await step(w);
  assert.equal(describe(expired), `expired ${p}d raw ${td}`);
  assert.ok(expired?.kind === "expired" && expired.lease.expiresAt.getTime() <= Date.now());
});

test("a watch refused 429 by a rate limit in front of the server is an UnavailableError: a break, watch again later", async (t) => {
  const srv = createServer((_req, res) => {
    res.writeHead(429, { "Content-Type": "text/plain", "Retry-After": "3" });
    res.end("Too Many Requests");
  });
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  t.after(() => new Promise<void>((res) => srv.close(() => res())));
  const c = new LeaseClient({ server: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, owner: "watcher" });
  await assert.rejects(c.watch("jobs/").next(), (err: unknown) =>
    err instanceof UnavailableError && err.status === 429 && err.cause instanceof UnexpectedAnswerError);
});

test("break, await using and return close the stream: the server counts the watcher gone", async (t) => {
  const own = await startLease(t, { args: ["--max-watchers", "1"] });
  const c = new LeaseClient({ server: own.url, owner: "watcher" });
  const p = unique("leave") + "/";
  let seen = 0;
  for await (const ev of c.watch(p)) {
    assert.equal(ev.kind, "synced");
    seen++;
    // One watcher is all the server allows: another is refused while this one is open.
    await assert.rejects(c.watch(p).next(), (err: unknown) => err instanceof TooManyWatchersError && err.status === 429);
    break;
  }
  assert.equal(seen, 1);
  await waitFor("the server counts no watcher after break", async () => (await metric(own, "lease_watchers")) === 0);
  {
    await using w = c.watch(p);
    assert.equal(describe(await step(w)), "synced"); // let in: the first watcher's slot was freed
    assert.equal(await metric(own, "lease_watchers"), 1);
  }
  await waitFor("the server counts no watcher after await using", async () => (await metric(own, "lease_watchers")) === 0);

  // return() while a next() waits for an event ends that next() too.
  const w = c.watch(p);
  assert.equal(describe(await step(w)), "synced");
  const waiting = w.next();
  assert.deepEqual(await w.return(), { done: true, value: undefined });
  assert.deepEqual(await waiting, { done: true, value: undefined });
  await waitFor("the server counts no watcher after return", async () => (await metric(own, "lease_watchers")) === 0);
});

test("the signal ends the watch without an error, and closes the stream", async (t) => {
  const own = await startLease(t);
  const c = new LeaseClient({ server: own.url, owner: "watcher" });
  const ctl = new AbortController();
  const w = c.watch("", { signal: ctl.signal });
  assert.equal(describe(await step(w)), "synced");
  const waiting = w.next();
  ctl.abort(new Error("caller gave up"));
  assert.deepEqual(await waiting, { done: true, value: undefined });
  assert.deepEqual(await w.next(), { done: true, value: undefined });
  await waitFor("the server counts no watcher after abort", async () => (await metric(own, "lease_watchers")) === 0);
  // Aborted before it began: no request, no error.
  assert.deepEqual(await c.watch("", { signal: AbortSignal.abort() }).next(), { done: true, value: undefined });
});

test("a server killed mid-stream: the watch throws UnavailableError", async (t) => {
  for (const signal of ["SIGKILL", "SIGTERM"] as const) {
    const own = await startLease(t);
    const c = new LeaseClient({ server: own.url, owner: "watcher" });
    const p = unique("break") + "/";
    const w = c.watch(p);
    assert.equal(describe(await step(w)), "synced");
    const token = await rawAcquire(own.url, p + "x", 60_000);
    assert.equal(describe(await step(w)), `acquired ${p}x raw ${token}`, signal);
    own.proc.kill(signal);
    await assert.rejects(step(w), (err: unknown) => {
      assert.ok(err instanceof UnavailableError, `${signal}: ${String(err)}`);
      // SIGTERM: the server says why in its error event.
      if (signal === "SIGTERM") assert.match(err.message, /shutting down/);
      return true;
    });
    assert.deepEqual(await w.next(), { done: true, value: undefined });
  }
});

test("refusals: a backend that cannot watch is 501, credentials 401 and 403, a bad prefix never sent", async (t) => {
  // Every engine of lease serve watches (PostgreSQL among them)...
  const pg = await startLease(t, { backend: postgresURL() });
  await using onPg = new LeaseClient({ server: pg.url, owner: "watcher" }).watch("jobs/");
  assert.equal(describe(await step(onPg)), "synced");
  // ...but a leasehttp server over a backend of one's own may not: it
  // answers 501 with the API's error body, as this plain Node server does.
  const srv = createServer((_req, res) => {
    res.writeHead(501, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: { code: "unsupported", message: "leasehttp: this server's backend cannot watch" } }));
  });
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  t.after(() => new Promise<void>((res) => srv.close(() => res())));
  const addr = srv.address() as AddressInfo;
  const none = new LeaseClient({ server: `http://127.0.0.1:${addr.port}`, owner: "watcher" });
  await assert.rejects(none.watch("jobs/").next(), (err: unknown) => err instanceof UnsupportedError && err.status === 501);

  const reports = "tok-reports-0123456789ab";
  const own = await startLease(t, { tokens: [`${reports} reports/`] });
  await assert.rejects(new LeaseClient({ server: own.url }).watch("reports/").next(), UnauthorizedError);
  const scoped = new LeaseClient({ server: own.url, token: reports });
  await assert.rejects(scoped.watch("jobs/").next(), ForbiddenError);
  await using w = scoped.watch("reports/");
  assert.equal(describe(await step(w)), "synced");

  assert.throws(() => scoped.watch("a\u0001"), InvalidError);
});

test("a stream no lease server sends throws UnexpectedAnswerError, and is closed", async () => {
  // A plain Node server that sends one good event, then one no lease server
  // sends, and keeps the stream open: the client must close it.
  let closed!: () => void;
  const gone = new Promise<void>((res) => (closed = res));
  const srv = createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    res.write("retry: 1000\n\nid: 1\nevent: synced\ndata: {}\n\nid: 2\nevent: adopted\ndata: {}\n\n");
    req.socket.once("close", closed);
  });
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  after(() => new Promise<void>((res) => {
    srv.close(() => res());
    srv.closeAllConnections();
  }));
  const c = new LeaseClient({ server: `http://127.0.0.1:${(srv.address() as AddressInfo).port}` });
  const w = c.watch("");
  assert.equal(describe(await step(w)), "synced");
  await assert.rejects(step(w), UnexpectedAnswerError);
  let isGone = false;
  void gone.then(() => (isGone = true));
  await waitFor("the client closes the stream", () => isGone, 5_000);
  assert.deepEqual(await w.next(), { done: true, value: undefined });
});

test("a server that stops delivering without closing (SIGSTOP): the watch throws UnavailableError within the silence limit", async (t) => {
  const own = await startLease(t, { args: ["--watch-heartbeat", "50ms"] });
  const c = new LeaseClient({ server: own.url, owner: "watcher" });
  const w = c.watch("");
  assert.equal(describe(await step(w)), "synced");
  own.proc.kill("SIGSTOP"); // the harness's stop sends SIGCONT first
  const frozen = Date.now();
  await assert.rejects(step(w), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /silent/);
    return true;
  });
  // 2 × 50 ms + 250 ms; the bound is generous for a shared machine.
  const took = Date.now() - frozen;
  assert.ok(took < 2_000, `the break came ${took} ms after SIGSTOP, want under 2 s`);
  own.proc.kill("SIGCONT");
});

for (const transport of ["node:http", "fetch"] as const) {
  const via = transport === "fetch" ? { fetch: globalThis.fetch.bind(globalThis) } : {};

  test(`a server that accepts but never answers (SIGSTOP before the watch opens): the opening throws UnavailableError within the silence limit of the heartbeat it assumes (${transport})`, async (t) => {
    const own = await startLease(t);
    const c = new LeaseClient({ server: own.url, owner: "watcher", ...via });
    await pause(own.proc); // the kernel still accepts the connection; nothing answers it
    const w = c.watch("", { heartbeatMs: 50 });
    const asked = Date.now();
    await assert.rejects(step(w), (err: unknown) => {
      assert.ok(err instanceof UnavailableError, String(err));
      assert.match(err.message, /unanswered within 350 ms/);
      return true;
    });
    // 2 × 50 ms + 250 ms; the bound is generous for a shared machine.
    const took = Date.now() - asked;
    assert.ok(took < 2_000, `the opening failed ${took} ms after it began, want under 2 s`);
    own.proc.kill("SIGCONT");
    // The server answers again: a new watch opens.
    const again = c.watch("");
    assert.equal(describe(await step(again)), "synced");
    await again.return();
  });

  test(`the bound of the opening does not cut the stream it opened (${transport})`, async () => {
    const c = new LeaseClient({ server: server.url, owner: "watcher", ...via });
    const p = unique("outlast/");
    const w = c.watch(p, { heartbeatMs: 50 }); // opening bound 350 ms; the server's heartbeat is 10 ms
    assert.equal(describe(await step(w)), "synced");
    // real time: past the opening's bound of 350 ms, on the stream it bounded.
    await new Promise((r) => setTimeout(r, 700));
    const token = await rawAcquire(server.url, `${p}x`, 60_000);
    assert.equal(describe(await step(w)), `acquired ${p}x raw ${token}`);
    await w.return();
  });
}

test("heartbeatMs outside [10, 3600000] or not whole is an InvalidError before anything is sent", () => {
  const c = new LeaseClient({ server: server.url });
  for (const hb of [9, 3_600_001, 12.5, Number.NaN]) {
    assert.throws(() => c.watch("", { heartbeatMs: hb }), InvalidError, String(hb));
  }
});

test("a watch refused 429 after the client gave a stream up for silence is an UnavailableError: the server counts the dead stream until its connection fails", async (t) => {
  const own = await startLease(t, { args: ["--watch-heartbeat", "50ms", "--max-watchers", "1"] });
  const px = await strandingProxy(t, own.port);
  const c = new LeaseClient({ server: px.url, owner: "watcher" });
  const first = c.watch("");
  assert.equal(describe(await step(first)), "synced");
  px.strand();
  await assert.rejects(step(first), (err: unknown) => {
    assert.ok(err instanceof UnavailableError && /silent/.test(err.message), String(err));
    return true;
  });
  // Watched again, as the README says: the server still counts the
  // stranded stream, and the 429 is the client's own doing.
  await assert.rejects(step(c.watch("")), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.ok(err.cause instanceof TooManyWatchersError, String(err.cause));
    return true;
  });
  px.cutStranded(); // as TCP ends it at last
  await waitFor("the server lets the stranded stream go", async () => (await metric(own, "lease_watchers")) === 0);
  const again = c.watch("");
  assert.equal(describe(await step(again)), "synced");
  await again.return();
});

/**
 * EventSourceLike dispatches a stream's messages by event name as a
 * browser's EventSource does, and fires its own "error" (with no data) when
 * the connection ends: what a page listening with addEventListener sees.
 */
class EventSourceLike {
  readonly seen: { type: string; data: string | undefined }[] = [];
  readonly done: Promise<void>;
  constructor(url: string) {
    this.done = (async () => {
      const res = await fetch(url, { headers: { Accept: "text/event-stream" } });
      const parser = new EventStreamParser();
      const reader = res.body!.getReader();
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          for (const m of parser.push(value)) this.seen.push({ type: m.event, data: m.data });
        }
      } catch {
        // a connection error, told as the "error" below
      }
      this.seen.push({ type: "error", data: undefined }); // EventSource's own, with no reason
    })();
  }
}

test("an EventSource-style reader gets the server's reason in an event apart from its own connection error", async (t) => {
  const own = await startLease(t);
  const es = new EventSourceLike(`${own.url}/v1/watch`);
  await waitFor("the stream is open", async () => (await metric(own, "lease_watchers")) === 1);
  own.proc.kill("SIGTERM");
  await es.done;
  const ends = es.seen.filter((e) => e.type === "end");
  assert.equal(ends.length, 1, JSON.stringify(es.seen));
  assert.match(ends[0]!.data ?? "", /"code":"unavailable".*shutting down/);
  // What an onerror handler gets is only the connection's end: no data to confuse with the server's.
  assert.deepEqual(es.seen.filter((e) => e.type === "error"), [{ type: "error", data: undefined }]);
});

test("exact: a watch of one key is told nothing of the keys that start with it", async (t) => {
  const own = await startLease(t);
  const c = new LeaseClient({ server: own.url, owner: "watcher" });
  const k = unique("svc");
  await rawAcquire(own.url, k + "-cache/x", 60_000);
  await using w = c.watch(k, { exact: true });
  assert.equal(describe(await step(w)), "synced");
  await rawAcquire(own.url, k + "2", 60_000);
  const token = await rawAcquire(own.url, k, 60_000);
  assert.equal(describe(await step(w)), `acquired ${k} raw ${token}`);
});
