// LeaseClient and Hold against a real `lease serve`.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";

import {
  ForbiddenError,
  HeldError,
  InvalidError,
  LeaseClient,
  LeaseLostError,
  LeaseReleasedError,
  NotHeldError,
  UnauthorizedError,
  UnavailableError,
} from "../src/index.js";
import { pause, runLease, startLease, unique, waitFor } from "./harness.js";

const server = await startLease({ after });

function client(owner: string, extra: Partial<{ token: string; server: string }> = {}): LeaseClient {
  return new LeaseClient({ server: extra.server ?? server.url, owner, ...(extra.token ? { token: extra.token } : {}) });
}

test("a hold renews itself past several TTLs, and release frees the key", async () => {
  const a = client("worker-a");
  const key = unique("renew");
  const hold = await a.tryAcquire(key, { ttlMs: 300 });
  const first = await a.get(key);
  assert.ok(first);
  assert.equal(first.token, hold.token);
  await new Promise((r) => setTimeout(r, 1000)); // only renewals keep it
  assert.equal(hold.held, true, `lost while the server was up: ${String(hold.signal.reason)}`);
  const later = await a.get(key);
  assert.ok(later);
  assert.equal(later.token, hold.token, "renewal changed the token");
  assert.ok(later.expiresAt > first.expiresAt, "renewal did not move the expiry");
  assert.equal(later.owner, "worker-a");

  await hold.release();
  assert.ok(hold.signal.reason instanceof LeaseReleasedError);
  assert.equal(await a.get(key), undefined);
  await hold.release(); // again: nothing
});

test("tryAcquire of a held key is a HeldError naming the holder", async () => {
  const key = unique("held");
  const hold = await client("worker-a").tryAcquire(key, { ttlMs: 60_000 });
  try {
    await assert.rejects(client("worker-b").tryAcquire(key, { ttlMs: 1000 }), (err: unknown) => {
      assert.ok(err instanceof HeldError, String(err));
      assert.equal(err.code, "held");
      assert.equal(err.status, 409);
      assert.equal(err.holder?.owner, "worker-a");
      assert.equal(err.holder?.token, hold.token);
      assert.ok(err.holder.expiresAt.getTime() > Date.now());
      return true;
    });
  } finally {
    await hold.release();
  }
});

test("acquire waits for the holder, first come first served, and tokens rise", async () => {
  const key = unique("wait");
  const first = await client("worker-a").tryAcquire(key, { ttlMs: 60_000 });
  const waiting = client("worker-b").acquire(key, { ttlMs: 60_000, waitMs: 10_000 });
  await new Promise((r) => setTimeout(r, 200));
  await first.release();
  const second = await waiting;
  assert.ok(second.token > first.token, `token ${second.token} after ${first.token}`);
  assert.equal(second.owner, "worker-b");
  await second.release();
});

test("acquire gives up after waitMs with a HeldError", async () => {
  const key = unique("giveup");
  const hold = await client("worker-a").tryAcquire(key, { ttlMs: 60_000 });
  const t0 = performance.now();
  await assert.rejects(client("worker-b").acquire(key, { ttlMs: 1000, waitMs: 300 }), HeldError);
  assert.ok(performance.now() - t0 >= 290, "gave up before its wait ran out");
  await hold.release();
});

test("acquire ends when its signal aborts, with the signal's reason", async () => {
  const key = unique("abort");
  const hold = await client("worker-a").tryAcquire(key, { ttlMs: 60_000 });
  const why = new Error("caller gave up");
  const signal = AbortSignal.timeout(100);
  const ctl = new AbortController();
  signal.addEventListener("abort", () => ctl.abort(why));
  await assert.rejects(client("worker-b").acquire(key, { ttlMs: 1000, signal: ctl.signal }), (err) => err === why);
  await hold.release();
});

test("keys travel as one path segment: slashes, dots and non-ASCII", async () => {
  const c = client("worker-a");
  const base = unique("seg");
  for (const key of [`${base}/a/b`, "/", `${base}/./..`, `${base}/ü/日本`, `${base}/%2F?#`]) {
    const hold = await c.tryAcquire(key, { ttlMs: 60_000 });
    const got = await c.get(key);
    assert.equal(got?.key, key);
    await hold.release();
  }
});

test("list shows the leases under a prefix, in key order, without ids", async () => {
  const c = client("worker-a");
  const prefix = unique("list") + "/";
  const holds = [await c.tryAcquire(prefix + "b", { ttlMs: 60_000 }), await c.tryAcquire(prefix + "a", { ttlMs: 60_000 })];
  const other = await c.tryAcquire(unique("elsewhere"), { ttlMs: 60_000 });
  const listed = await c.list(prefix);
  assert.deepEqual(listed.leases.map((l) => l.key), [prefix + "a", prefix + "b"]);
  assert.equal(listed.next, "");
  for (const l of listed.leases) assert.equal("id" in l, false);
  for (const h of [...holds, other]) await h.release();
  assert.deepEqual(await c.list(prefix), { leases: [], next: "" });
});

test("list pages with limit and after, and all walks every page once", async () => {
  const c = client("worker-a");
  const prefix = unique("pages") + "/";
  // Byte order, not UTF-16 order: U+FF61 comes before the emoji in UTF-8.
  const names = ["a", "b", "c", "d", "e", "\uff61", "\u{1f512}"];
  const holds = [];
  for (const n of names) holds.push(await c.tryAcquire(prefix + n, { ttlMs: 60_000 }));
  const want = names.map((n) => prefix + n);
  for (let limit = 1; limit <= names.length + 1; limit++) {
    const seen: string[] = [];
    let cursor = "";
    let pages = 0;
    for (;;) {
      const page = await c.list(prefix, { limit, after: cursor });
      pages++;
      assert.ok(page.leases.length <= limit, `page of ${page.leases.length} for limit ${limit}`);
      seen.push(...page.leases.map((l) => l.key));
      if (page.next === "") break;
      cursor = page.next;
    }
    assert.deepEqual(seen, want, `walk with limit ${limit}`);
    assert.equal(pages, Math.ceil(names.length / limit), `pages with limit ${limit}`);
  }
  const all = [];
  for await (const l of c.all(prefix, { limit: 2 })) all.push(l.key);
  assert.deepEqual(all, want);
  await assert.rejects(c.list(prefix, { limit: 10_001 }), InvalidError);
  await assert.rejects(c.list(prefix, { limit: -1 }), InvalidError);
  await assert.rejects(c.list(prefix, { after: "not a cursor" }), InvalidError);
  // A cursor of the right alphabet that no page gave: the server refuses it.
  await assert.rejects(c.list(prefix, { after: "YR" }), InvalidError);
  for (const h of holds) await h.release();
});

test("await using releases the lease at the end of the scope", async () => {
  const c = client("worker-a");
  const key = unique("using");
  let signal: AbortSignal;
  {
    await using hold = await c.tryAcquire(key, { ttlMs: 60_000 });
    signal = hold.signal;
    assert.ok(await c.get(key));
  }
  assert.ok(signal.reason instanceof LeaseReleasedError);
  assert.equal(await c.get(key), undefined);
});

test("arguments the server would refuse are refused before anything is sent", async () => {
  const c = client("worker-a");
  for (const ttlMs of [5, 86_400_001, 1.5, Number.NaN]) {
    await assert.rejects(c.tryAcquire("k", { ttlMs }), InvalidError, `ttlMs ${ttlMs}`);
  }
  // "." and ".." are keys the server takes, but fetch's URLs resolve them away.
  for (const key of ["", "a\u0001b", "a\u0085", "x".repeat(513), "ü".repeat(257), "\uD800", ".", ".."]) {
    await assert.rejects(c.tryAcquire(key, { ttlMs: 1000 }), InvalidError, `key ${JSON.stringify(key)}`);
  }
  await assert.rejects(c.acquire("k", { ttlMs: 1000, waitMs: -1 }), InvalidError);
  assert.throws(() => new LeaseClient({ server: server.url, driftMargin: { fraction: 0.5, minMs: 0 } }), InvalidError);
  assert.throws(() => new LeaseClient({ server: "127.0.0.1:7420" }), InvalidError);
  assert.throws(() => new LeaseClient({ server: server.url, owner: "" }), InvalidError);
  // 10 ms with a margin of 20 ms + 0%: more than half the TTL.
  const wide = new LeaseClient({ server: server.url, driftMargin: { fraction: 0, minMs: 20 } });
  await assert.rejects(wide.tryAcquire("k", { ttlMs: 10 }), InvalidError);
});

test("a server that no longer has the lease makes the hold lost at once, not at its deadline", async (t) => {
  const own = await startLease(t);
  const c = new LeaseClient({ server: own.url, owner: "worker-a" });
  const ttlMs = 3000;
  const t0 = performance.now();
  const hold = await c.tryAcquire(unique("forgotten"), { ttlMs });
  // The server restarts on the same address on its store restored from a
  // backup, which releases every lease: the same store (its Lease-Store
  // kept; an empty store would be another, its answers refused), but the
  // next renewal is answered not_held.
  await own.stop();
  const backup = join(own.dataDir, "..", "backup.db");
  runLease(["backup", "--data-dir", own.dataDir, backup]);
  const restored = join(own.dataDir, "..", "restored");
  runLease(["restore", backup, "--data-dir", restored]);
  await startLease(t, { port: own.port, dataDir: restored });
  await waitFor("the hold is lost", () => hold.signal.aborted, 10_000);
  const lostAt = performance.now();
  const reason: unknown = hold.signal.reason;
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.ok(reason.cause instanceof NotHeldError, `cause: ${String(reason.cause)}`);
  assert.ok(lostAt < t0 + ttlMs * 0.95, `lost ${Math.round(lostAt - t0)} ms after acquiring: only at the deadline`);
  await assert.rejects(hold.release(), LeaseLostError);
});

test("credentials: no token is 401, a key outside the token's prefixes 403", async (t) => {
  const all = "tok-all-0123456789abcdef";
  const reports = "tok-reports-0123456789ab";
  const own = await startLease(t, { tokens: [`${all} *`, `${reports} reports/`] });
  await assert.rejects(client("w", { server: own.url }).tryAcquire("k", { ttlMs: 1000 }), UnauthorizedError);
  await assert.rejects(client("w", { server: own.url, token: "tok-unknown-0123456789" }).get("k"), UnauthorizedError);
  const r = client("w", { server: own.url, token: reports });
  await assert.rejects(r.tryAcquire("jobs/x", { ttlMs: 1000 }), ForbiddenError);
  const hold = await r.tryAcquire("reports/x", { ttlMs: 1000 });
  const seen = await client("w", { server: own.url, token: all }).list();
  assert.deepEqual(seen.leases.map((l) => l.key), ["reports/x"]);
  await hold.release();
});

test("a wait re-sent at the server's wait cap keeps its place in line", async (t) => {
  // A cap of 30 ms: each wait below is re-sent about fifty times.
  const capped = await startLease(t, { args: ["--max-wait", "30ms"] });
  const key = unique("line");
  const at = (owner: string) => client(owner, { server: capped.url });
  const holder = await at("holder").tryAcquire(key, { ttlMs: 60_000 });
  const served: string[] = [];
  const waits: Promise<void>[] = [];
  for (const who of ["w1", "w2", "w3", "w4", "w5"]) {
    waits.push(
      at(who)
        .acquire(key, { ttlMs: 60_000, waitMs: 20_000 })
        .then(async (h) => {
          served.push(who);
          await h.release();
        }),
    );
    await new Promise((r) => setTimeout(r, 60));
  }
  await new Promise((r) => setTimeout(r, 1500));
  await holder.release();
  await Promise.all(waits);
  assert.deepEqual(served, ["w1", "w2", "w3", "w4", "w5"]);
});

test("a hold's signal first asked for after the hold ended is aborted with the end's reason", async () => {
  const a = client("worker-a");
  const hold = await a.tryAcquire(unique("late-signal"), { ttlMs: 60_000 });
  await hold.release();
  assert.equal(hold.held, false);
  const signal = hold.signal;
  assert.equal(signal.aborted, true);
  assert.ok(signal.reason instanceof LeaseReleasedError, String(signal.reason));
  assert.equal(hold.signal, signal, "a second signal");
  assert.throws(() => hold.throwIfLost(), (err: unknown) => err === signal.reason);
});

/**
 * child runs body (a module's code, with LeaseClient and the server's URL
 * in scope as `c`) in a node process of its own and returns it and what
 * it writes.
 */
function child(body: string): { exited: Promise<number | null>; out: () => string; proc: ReturnType<typeof spawn> } {
  const index = new URL("../src/index.js", import.meta.url).href;
  const code = `import { LeaseClient } from ${JSON.stringify(index)};
const c = new LeaseClient({ server: ${JSON.stringify(server.url)}, owner: "exit" });
${body}`;
  const proc = spawn(process.execPath, ["--input-type=module", "-e", code], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  after(() => void proc.kill());
  return { exited, out: () => out, proc };
}

test("a client keeps its process alive while it holds a lease, and not once it holds none", async () => {
  // Held: the renewal timer keeps the process running, also for a hold
  // taken after every earlier one was released.
  const held = child(`const a = await c.tryAcquire(${JSON.stringify(unique("alive"))}, { ttlMs: 30_000 });
await a.release();
await c.tryAcquire(${JSON.stringify(unique("alive"))}, { ttlMs: 30_000 });
console.log("holding");`);
  await waitFor("the child holds its lease", () => held.out().includes("holding"));
  const early = await Promise.race([held.exited.then(() => "exited"), new Promise((r) => setTimeout(() => r("running"), 1_500))]);
  assert.equal(early, "running", "the process ended while it held a lease");
  held.proc.kill();

  // Released: nothing of the client's keeps it running (its next renewal
  // would have been 10 s away).
  const released = child(`const a = await c.tryAcquire(${JSON.stringify(unique("alive"))}, { ttlMs: 30_000 });
await a.release();
console.log("released");`);
  await waitFor("the child released its lease", () => released.out().includes("released"));
  const t0 = performance.now();
  assert.equal(await released.exited, 0);
  const took = performance.now() - t0;
  assert.ok(took < 3_000, `the process ran ${Math.round(took)} ms after its last release`);
});

test("a wait aborted between two of its requests leaves the line: the next waiter gets the key at once, and no token goes to nobody", async (t) => {
  // A server whose waits end at 50 ms: a wait is many requests, and the
  // server keeps its place in line between them (for its 2 s grace). Each
  // abort below comes just after a request was answered, while no request
  // of the wait is at the server: the server kept the place, and, without
  // word from the client, granted the key to it when freed and held it
  // for nobody until the grace ended (the next waiter got it some 2.4 s
  // after the release, with the token after the one the dead wait took).
  const capped = await startLease(t, { args: ["--max-wait", "50ms"] });
  for (let round = 0; round < 3; round++) {
    const key = unique("leave");
    const holder = await client("holder", { server: capped.url }).tryAcquire(key, { ttlMs: 60_000 });
    const ctl = new AbortController();
    const why = new Error("gave up");
    let answers = 0;
    // A fetch that aborts the wait just after its third request is answered.
    const watching: typeof globalThis.fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (String(input).endsWith("/acquire") && ++answers === 3) setImmediate(() => ctl.abort(why));
      return res;
    };
    const leaving = new LeaseClient({ server: capped.url, owner: "leaving", fetch: watching });
    const gaveUp = leaving.acquire(key, { ttlMs: 60_000, signal: ctl.signal });
    await assert.rejects(gaveUp, (err: unknown) => err === why);
    const next = client("next", { server: capped.url }).acquire(key, { ttlMs: 60_000, waitMs: 10_000 });
    await new Promise((r) => setTimeout(r, 100)); // next is in line
    const freed = performance.now();
    await holder.release();
    const h = await next;
    const took = performance.now() - freed;
    assert.equal(h.token, holder.token + 1, "a token went to the wait that gave up");
    assert.ok(took < 1_500, `the next waiter got the key ${Math.round(took)} ms after its release`);
    await h.release();
  }
});

test("a wait whose answer is lost with its connection leaves the line: the next waiter gets the key at once", async (t) => {
  // As above, but the wait ends as an answer of the server that waited
  // (its max wait, after which it keeps the wait in line for its grace)
  // is lost with the connection: the acquire fails (UnavailableError). The
  // next waiter got the key some 2 s after the release, with the token
  // after the one the dead wait took.
  const capped = await startLease(t, { args: ["--max-wait", "600ms"] });
  const key = unique("leave-lost");
  const holder = await client("holder", { server: capped.url }).tryAcquire(key, { ttlMs: 60_000 });
  let answers = 0;
  const cutting: typeof globalThis.fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (String(input).endsWith("/acquire") && ++answers === 2) {
      await res.body?.cancel();
      throw new TypeError("fetch failed", { cause: new Error("other side closed") });
    }
    return res;
  };
  const leaving = new LeaseClient({ server: capped.url, owner: "leaving", fetch: cutting });
  await assert.rejects(leaving.acquire(key, { ttlMs: 60_000 }), UnavailableError);
  const next = client("next", { server: capped.url }).acquire(key, { ttlMs: 60_000, waitMs: 10_000 });
  await new Promise((r) => setTimeout(r, 100)); // next is in line
  const freed = performance.now();
  await holder.release();
  const h = await next;
  const took = performance.now() - freed;
  assert.equal(h.token, holder.token + 1, "a token went to the wait that gave up");
  assert.ok(took < 1_500, `the next waiter got the key ${Math.round(took)} ms after its release`);
  await h.release();
});

test("a wait the server ends at its max wait asks again at once, not after a growing pause", async (t) => {
  // A server whose waits end at 600 ms: it waited, and keeps the wait's
  // place only for its grace. The client took each such answer for a
  // server that does not wait and paused before asking again, 5 ms
  // doubling to 500 ms: a key freed in the pause waited for it (as the Go
  // client asks again at once when the server took half the wait or 500 ms).
  const capped = await startLease(t, { args: ["--max-wait", "600ms"] });
  const key = unique("pace");
  const holder = await client("holder", { server: capped.url }).tryAcquire(key, { ttlMs: 60_000 });
  const gaps: number[] = [];
  let answered = 0;
  const timing: typeof globalThis.fetch = async (input, init) => {
    if (answered > 0) gaps.push(performance.now() - answered);
    const res = await fetch(input, init);
    answered = performance.now();
    return res;
  };
  const ctl = new AbortController();
  const waiting = new LeaseClient({ server: capped.url, owner: "waiting", fetch: timing }).acquire(key, { ttlMs: 60_000, signal: ctl.signal });
  await waitFor("eight requests of the wait", () => gaps.length >= 8, 30_000);
  ctl.abort(new Error("enough"));
  await assert.rejects(waiting, /enough/);
  await holder.release();
  assert.ok(gaps.every((g) => g < 150), `pauses between the requests of the wait: ${gaps.map(Math.round).join(", ")} ms`);
});

test("a credential narrowed under held leases: the hold on a key it no longer covers is lost, the others renewed in its batches are not", async (t) => {
  // A batch whose one key the credential does not cover is refused whole
  // (403): every hold in it failed its renewal, and all were lost at
  // their deadlines, those on keys still covered too.
  const tok = "tok-narrow-0123456789abcdef";
  const own = await startLease(t, { tokens: [`${tok} a/ b/`] });
  const c = new LeaseClient({ server: own.url, owner: "worker-a", token: tok });
  const ttlMs = 600;
  const kept = await c.tryAcquire(unique("a/kept"), { ttlMs });
  const dropped = await c.tryAcquire(unique("b/dropped"), { ttlMs });
  writeFileSync(join(own.dataDir, "..", "tokens"), `${tok} a/\n`);
  own.proc.kill("SIGHUP");
  await waitFor("the server reloads its credentials", () => c.get(dropped.key).then(() => false, (err) => err instanceof ForbiddenError));
  await waitFor("the hold on the key no longer covered is lost", () => !dropped.held, 4 * ttlMs);
  await new Promise((r) => setTimeout(r, 2 * ttlMs)); // renewals of kept, alone now
  assert.ok(kept.held, `the hold on a key still covered was lost: ${String(kept.signal.reason)}`);
  await kept.release();
});

test("a process whose body throws after its server died or hung disposes of its hold and exits on its own", async (t) => {
  // The README's form of await using (Node.js 20 cannot run the syntax):
  // the body throws, the finally disposes, the process must then end with
  // the body's error, nothing of the client's keeping it alive.
  // hung-held: the body throws while the hold is held, and the release
  // waits for a stopped server: for as long as the lease would live (1 s),
  // no longer (it waited 10 s).
  for (const fault of ["killed", "hung", "hung-held"] as const) {
    const own = await startLease(t);
    const index = new URL("../src/index.js", import.meta.url).href;
    const code = `import { LeaseClient } from ${JSON.stringify(index)};
const c = new LeaseClient({ server: ${JSON.stringify(own.url)}, owner: "exit" });
const hold = await c.tryAcquire("body-throws", { ttlMs: 1_000 });
console.log("holding");
try {
  await new Promise((r) => process.stdin.once("data", r)); // the test has killed or stopped the server
  if (${JSON.stringify(fault)} === "hung") await new Promise((r) => hold.signal.addEventListener("abort", r));
  throw new Error("the body failed");
} finally {
  await hold[Symbol.asyncDispose]();
}`;
    const proc = spawn(process.execPath, ["--input-type=module", "-e", code], { stdio: ["pipe", "pipe", "pipe"] });
    after(() => void proc.kill());
    let out = "";
    let err = "";
    proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    proc.stderr?.on("data", (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => proc.once("exit", (c) => r(c)));
    await waitFor("the child holds its lease", () => out.includes("holding"));
    if (fault === "killed") own.proc.kill("SIGKILL");
    else await pause(own.proc);
    const start = performance.now();
    proc.stdin?.end("go\n");
    const code_ = await exited;
    const took = performance.now() - start;
    own.proc.kill("SIGCONT");
    assert.equal(code_, 1, `${fault}: exit code (stderr: ${err})`);
    assert.match(err, /the body failed/, fault);
    // hung: the hold is lost at its deadline (under 1 s); its release then sends nothing.
    assert.ok(took < 3_000, `${fault}: the process ran ${Math.round(took)} ms after its body ended`);
  }
});
