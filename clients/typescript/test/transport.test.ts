// The transports the client sends its requests with: node:http's keep-alive
// agents in Node.js (node-transport.ts) and fetch elsewhere (fetch.ts). Both
// keep one contract — the answer read whole unless it is a stream's 200, the
// signal ending a request whether it waits or streams, and failures that say
// whether the request ever left — checked here on each against plain Node
// servers.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { after, test } from "node:test";

import { Api, notSent, retried } from "../src/api.js";
import { UnavailableError } from "../src/errors.js";
import { defaultTransport, fetchTransport, isNode } from "../src/fetch.js";
import { MAX_ANSWER_BYTES, type Transport } from "../src/transport.js";
import { Agents, defaultAgents, nodeTransport } from "../src/node-transport.js";
import { body, closedPort } from "./harness.js";

/** A test server: what it answers per path, and the connections it has seen. */
async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; connections: () => number }> {
  let connections = 0;
  const sockets = new Set<Socket>();
  const srv = createServer(handler);
  srv.on("connection", (s: Socket) => {
    connections++;
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  after(() => new Promise<void>((res) => {
    for (const s of sockets) s.destroy();
    srv.close(() => res());
  }));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, connections: () => connections };
}

/** hung holds the requests to /hang, never answered, so that the test can see them end. */
const hung: IncomingMessage[] = [];

const server = await serve((req, res) => {
  switch (req.url) {
    case "/echo":
      void body(req).then((body) => {
        res.writeHead(201, { "Content-Type": "application/json", "X-Seen": `${req.method} ${req.headers["content-type"]}` });
        res.end(JSON.stringify({ body, length: req.headers["content-length"] }));
      });
      return;
    case "/stream":
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write("data: one\n\n");
      return; // left open: the client ends it
    case "/refused":
      res.writeHead(503, { "Content-Type": "application/json" });
      res.end('{"error":{"code":"unavailable","message":"no"}}');
      return;
    case "/hang":
    case "/v1/leases/hang/release":
      hung.push(req);
      return;
    case "/huge":
    case "/huge?status=503": {
      // Valid JSON, one byte past the bound: spaces, then {}.
      res.writeHead(req.url === "/huge" ? 200 : 503, { "Content-Type": "application/json" });
      const spaces = Buffer.alloc(1 << 20, 0x20);
      for (let i = 0; i < MAX_ANSWER_BYTES >> 20; i++) res.write(spaces);
      res.end(" {}");
      return;
    }
    case "/huge-length":
      // Says more than the bound is coming: refused before any of it is read.
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": String(MAX_ANSWER_BYTES + 1) });
      res.write("{");
      return; // never ends
    case "/not-utf8":
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(Buffer.from([0x7b, 0x22, 0x6b, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d])); // {"k":"\xff"}
      return;
    case "/cut":
      req.socket.destroy(); // the request arrived; its answer is lost
      return;
  }
  res.writeHead(404);
  res.end();
});

const agents = new Agents();
after(() => agents.destroy());

const transports: [string, Transport][] = [
  ["node", nodeTransport(agents)],
  ["fetch", fetchTransport(globalThis.fetch.bind(globalThis))],
];

for (const [name, send] of transports) {
  test(`${name}: an answer comes whole, its headers in any case`, async () => {
    const a = await send({ method: "POST", url: `${server.url}/echo`, headers: { "Content-Type": "application/json" }, body: '{"é":1}', stream: false });
    assert.equal(a.status, 201);
    assert.equal(a.header("x-seen"), "POST application/json");
    assert.equal(a.header("Content-Type"), "application/json");
    assert.equal(a.header("X-Absent"), null);
    assert.deepEqual(JSON.parse(a.text), { body: '{"é":1}', length: "8" });
    assert.equal(a.body, null);
  });

  test(`${name}: a stream's 200 comes unread, and the signal ends it`, async () => {
    const ctl = new AbortController();
    const a = await send({ method: "GET", url: `${server.url}/stream`, headers: {}, signal: ctl.signal, stream: true });
    assert.equal(a.status, 200);
    assert.equal(a.text, "");
    assert.ok(a.body !== null);
    const reader = a.body.getReader();
    const first = await reader.read();
    assert.equal(new TextDecoder().decode(first.value), "data: one\n\n");
    const reason = new Error("enough");
    ctl.abort(reason);
    await assert.rejects(reader.read());
  });

  test(`${name}: an answer longer than MAX_ANSWER_BYTES fails the request, as the Go client's does`, { timeout: 30_000 }, async () => {
    // A 200, and a refusal of a stream (read whole, as any answer but a stream's 200).
    for (const [path, stream] of [["/huge", false], ["/huge-length", false], ["/huge?status=503", true]] as const) {
      await assert.rejects(
        send({ method: "GET", url: `${server.url}${path}`, headers: {}, stream, timeoutMs: 20_000 }),
        (err: unknown) => err instanceof TypeError && err.cause instanceof RangeError && /larger than 67108864 bytes/.test(err.cause.message),
        path,
      );
    }
  });

  test(`${name}: an answer that is not UTF-8 fails the request, not read with U+FFFD in place of its bytes`, async () => {
    await assert.rejects(
      send({ method: "GET", url: `${server.url}/not-utf8`, headers: {}, stream: false }),
      (err: unknown) => err instanceof TypeError && err.cause instanceof TypeError,
    );
  });

  test(`${name}: a stream asked for but refused comes read`, async () => {
    const a = await send({ method: "GET", url: `${server.url}/refused`, headers: {}, stream: true });
    assert.equal(a.status, 503);
    assert.match(a.text, /unavailable/);
    assert.equal(a.body, null);
  });

  test(`${name}: the signal ends a request waiting for its answer, with its reason, and the server sees it go`, async () => {
    const before = hung.length;
    const ctl = new AbortController();
    const p = send({ method: "GET", url: `${server.url}/hang`, headers: {}, signal: ctl.signal, stream: false });
    while (hung.length === before) await new Promise((r) => setTimeout(r, 5));
    const req = hung[hung.length - 1];
    const closed = new Promise<void>((r) => req?.socket.once("close", () => r()));
    const reason = new Error("gave up");
    ctl.abort(reason);
    await assert.rejects(p, (err: unknown) => err === reason);
    await closed;
  });

  test(`${name}: an aborted signal sends nothing`, async () => {
    const before = hung.length;
    const reason = new Error("already");
    await assert.rejects(
      send({ method: "GET", url: `${server.url}/hang`, headers: {}, signal: AbortSignal.abort(reason), stream: false }),
      (err: unknown) => err === reason,
    );
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(hung.length, before);
  });

  test(`${name}: a timeout signal ends the request with a TimeoutError`, async () => {
    await assert.rejects(
      send({ method: "GET", url: `${server.url}/hang`, headers: {}, signal: AbortSignal.timeout(30), stream: false }),
      (err: unknown) => err instanceof DOMException && err.name === "TimeoutError",
    );
  });

  test(`${name}: timeoutMs ends a request still unanswered, with a TimeoutError, and the server sees it go`, { timeout: 10_000 }, async () => {
    const before = hung.length;
    const t0 = performance.now();
    const p = send({ method: "GET", url: `${server.url}/hang`, headers: {}, stream: false, timeoutMs: 200 });
    while (hung.length === before) await new Promise((r) => setTimeout(r, 5));
    const closed = new Promise<void>((r) => hung[hung.length - 1]?.socket.once("close", () => r()));
    await assert.rejects(p, (err: unknown) => err instanceof DOMException && err.name === "TimeoutError");
    const took = performance.now() - t0;
    assert.ok(took >= 190 && took < 2_000, `ended after ${Math.round(took)} ms for a timeout of 200 ms`);
    await closed;
  });

  test(`${name}: an answer within timeoutMs comes as without it`, async () => {
    const a = await send({ method: "POST", url: `${server.url}/echo`, headers: {}, body: "x", stream: false, timeoutMs: 5_000 });
    assert.equal(a.status, 201);
  });

  test(`${name}: a refused connection and a name that does not resolve were never sent; a lost answer may have been`, async () => {
    const failure = async (url: string): Promise<unknown> => {
      try {
        await send({ method: "POST", url, headers: {}, body: "{}", stream: false });
      } catch (err) {
        return err;
      }
      assert.fail(`${url} answered`);
    };
    const refused = await failure(`${await closedPort()}/x`);
    assert.ok(notSent(refused), String(refused));
    const unresolved = await failure("http://lease-test.invalid:7420/x");
    assert.ok(notSent(unresolved), String(unresolved));
    const cut = await failure(`${server.url}/cut`);
    assert.ok(cut instanceof Error && cut.cause !== undefined, String(cut));
    assert.equal(notSent(cut), false, String(cut));
  });
}

test("node: concurrent callers share the agent's connections, and later ones reuse them", async () => {
  const s = await serve((req, res) => void body(req).then(() => res.end("{}")));
  const own = new Agents();
  after(() => own.destroy());
  const send = nodeTransport(own);
  const round = () =>
    Promise.all(Array.from({ length: 16 }, () => send({ method: "POST", url: `${s.url}/x`, headers: {}, body: "{}", stream: false })));
  await round();
  const opened = s.connections();
  assert.ok(opened >= 1 && opened <= 16, `${opened} connections for 16 callers`);
  for (let i = 0; i < 5; i++) await round();
  assert.equal(s.connections(), opened, "later rounds opened connections of their own");
  for (let i = 0; i < 20; i++) await send({ method: "POST", url: `${s.url}/x`, headers: {}, body: "{}", stream: false });
  assert.equal(s.connections(), opened, "one caller at a time opened connections of its own");
});

test("node: an idle connection closes after the agents' idle time, and an answer slower than that still comes", async () => {
  const closed: Promise<void>[] = [];
  const s = await serve((req, res) => {
    closed.push(new Promise((r) => req.socket.once("close", () => r())));
    void body(req).then(() => setTimeout(() => res.end("{}"), req.url === "/slow" ? 300 : 0));
  });
  const own = new Agents(100);
  after(() => own.destroy());
  const send = nodeTransport(own);
  const slow = await send({ method: "POST", url: `${s.url}/slow`, headers: {}, body: "{}", stream: false });
  assert.equal(slow.text, "{}");
  const started = performance.now();
  await closed[0];
  const idle = performance.now() - started;
  assert.ok(idle >= 50 && idle < 5_000, `the idle connection closed after ${idle} ms`);
});

test("in Node.js the default transport is node:http through the shared agents", async () => {
  assert.equal(isNode(), true);
  const a = await defaultTransport()({ method: "POST", url: `${server.url}/echo`, headers: {}, body: "x", stream: false });
  assert.equal(a.status, 201);
  await new Promise((r) => setImmediate(r)); // the socket goes back to the pool
  const free = Object.values(defaultAgents().http.freeSockets).flat();
  assert.equal(free.length, 1, "the request left no connection in the shared agent's pool");
  defaultAgents().destroy();
});

test("a deadline bounds a request and its retries: a release unanswered gives up at it with an UnavailableError", async () => {
  const api = new Api(server.url, undefined, undefined);
  const g = { key: "hang", owner: "o", token: 1, ttlMs: 60_000, expiresAt: new Date(), id: "0123456789abcdef0123456789abcdef" };
  const before = hung.length;
  const t0 = performance.now();
  const deadline = { until: t0 + 300, ms: 300 };
  await assert.rejects(retried(() => api.release(g, undefined, deadline), undefined, deadline.until), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /release "hang": unanswered within 300 ms/);
    return true;
  });
  const took = performance.now() - t0;
  // Each try given the whole 300 ms would take 3 tries and their pauses: over 1 s.
  assert.ok(took >= 290 && took < 700, `gave up after ${Math.round(took)} ms for a deadline of 300 ms`);
  assert.equal(hung.length - before, 1, "a try was sent with no time left");
});
