// The loss of a lease: a server paused (SIGSTOP) past the TTL answers no
// renewal, and the hold's signal must abort — with a LeaseLostError — at the
// safe deadline, before the server could give the lease to anyone else.

import assert from "node:assert/strict";
import { test } from "node:test";

import { fencedFetch, type Hold, LeaseClient, LeaseLostError } from "../src/index.js";
import { startLease, unique, waitFor } from "./harness.js";

test("a server paused past the TTL: the signal aborts before the server's expiry", async (t) => {
  const server = await startLease(t);
  // A wide margin (20% of the TTL) so that a timer delayed by a busy
  // machine still fires before the server's expiry; the default is 1% + 2 ms.
  const margin = { fraction: 0.2, minMs: 0 };
  const a = new LeaseClient({ server: server.url, owner: "worker-a", driftMargin: margin });
  const ttlMs = 2000;
  const key = unique("paused");

  const t0 = performance.now(); // at or before the acquire's send time
  const hold = await a.tryAcquire(key, { ttlMs });
  let abortedAt = 0;
  hold.signal.addEventListener("abort", () => {
    abortedAt = performance.now();
  });
  // The first renewal is due at about ttl/3 (600 ms): pause before it.
  assert.ok(performance.now() - t0 < 500, "acquire took too long for the test to pause before the first renewal");
  server.proc.kill("SIGSTOP");
  try {
    await waitFor("the hold is lost", () => hold.signal.aborted, 3 * ttlMs);
  } finally {
    server.proc.kill("SIGCONT");
  }
  const reason: unknown = hold.signal.reason;
  assert.ok(reason instanceof LeaseLostError, String(reason));
  assert.equal(reason.code, "lost");
  assert.equal(reason.key, key);
  assert.equal(reason.token, hold.token);
  // The server's expiry is at least its receive time + TTL, which is after
  // t0 + TTL: the client gave up before anyone else could have the lease.
  assert.ok(abortedAt < t0 + ttlMs, `aborted ${Math.round(abortedAt - t0)} ms after t0, not before the TTL of ${ttlMs} ms`);
  // And not before its own deadline: send time + TTL − margin.
  assert.ok(abortedAt >= t0 + ttlMs * (1 - margin.fraction) - 1, `aborted early, ${Math.round(abortedAt - t0)} ms after t0`);
  assert.equal(hold.held, false);
  await assert.rejects(fencedFetch(hold)(server.url + "/healthz"), LeaseLostError);

  // The server, awake again, lets the next holder in with a greater token.
  const b = new LeaseClient({ server: server.url, owner: "worker-b" });
  let next: Hold | undefined;
  await waitFor("worker-b acquires", async () => {
    next = await b.tryAcquire(key, { ttlMs: 60_000 }).catch(() => undefined);
    return next !== undefined;
  });
  const won = next as Hold | undefined;
  assert.ok(won);
  assert.ok(won.token > hold.token);
  await won.release();
  await assert.rejects(hold.release(), LeaseLostError);
});
