// The seed article's scenario, replayed through a real `lease serve`:
// A acquires (token 1), stalls past its TTL, B acquires (token 2) and
// writes, A wakes and writes late — and the guard rejects A's write. The
// seed's final state is { value: "written-by-b", lastToken: 2 }.

import assert from "node:assert/strict";
import { after, test, type TestContext } from "node:test";

import {
  FencedResource,
  fencedFetch,
  HeldError,
  type Hold,
  LeaseClient,
  LeaseLostError,
  readError,
  StaleTokenError,
} from "../src/index.js";
import { pause, startFencedService, startLease, unique, waitFor } from "./harness.js";

const server = await startLease({ after });

/**
 * stall blocks this process's event loop for ms, as a GC pause or a swapped
 * out process would: no timer runs, no renewal is sent.
 */
function stall(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy
  }
}

/**
 * scenario runs the seed's timeline on key and returns A's and B's holds. It
 * starts a store of its own: a fresh store's first token is 1, as in the
 * seed, while one that has released keys issues new keys' tokens above the
 * floor those releases raised (docs/SERVE.md).
 */
async function scenario(t: TestContext, key: string): Promise<{ a: Hold; b: Hold }> {
  const own = await startLease(t);
  const A = new LeaseClient({ server: own.url, owner: "worker-a" });
  const B = new LeaseClient({ server: own.url, owner: "worker-b" });
  const a = await A.tryAcquire(key, { ttlMs: 100 });
  assert.equal(a.token, 1);
  stall(150); // A pauses past its TTL; the server's clock runs on
  // A's hold notices when asked, even before its timers have run.
  assert.equal(a.held, false);
  assert.ok(a.signal.reason instanceof LeaseLostError);
  let b: Hold | undefined;
  await waitFor("B acquires after A's expiry", async () => {
    b = await B.tryAcquire(key, { ttlMs: 1000 }).catch((err: unknown) => {
      if (err instanceof HeldError) return undefined;
      throw err;
    });
    return b !== undefined;
  });
  assert.ok(b);
  assert.equal(b.token, 2);
  return { a, b };
}

for (const mode of ["strict", "at-least"] as const) {
  test(`seed scenario with FencedResource (${mode})`, async (t) => {
    const { a, b } = await scenario(t, unique(`seed-${mode}`));
    const resource = new FencedResource("initial", { mode });
    resource.write(b.token, "written-by-b");
    assert.throws(
      () => resource.write(a.token, "late-write-by-a"),
      (err: unknown) => err instanceof StaleTokenError && err.token === 1 && err.highest === 2 && err.mode === mode,
    );
    assert.deepEqual(resource.read(), { value: "written-by-b", lastToken: 2 });
    await b.release();
  });
}

test("seed scenario against a service guarded by fence.Middleware, through fencedFetch", async (t) => {
  const service = await startFencedService(t);
  const { a, b } = await scenario(t, unique("seed-http"));
  const url = `${service.url}/job`;

  const ok = await fencedFetch(b)(url, { method: "PUT", body: "written-by-b" });
  assert.equal(ok.status, 200, await ok.text());

  // A's own fencedFetch knows its hold is lost and sends nothing.
  await assert.rejects(fencedFetch(a)(url, { method: "PUT", body: "late-write-by-a" }), LeaseLostError);
  // A that ignores its loss and sends its token anyway is rejected by the guard.
  const late = await fetch(url, { method: "PUT", body: "late-write-by-a", headers: { "Fencing-Token": String(a.token) } });
  assert.equal(late.status, 409);
  const err = await readError(late);
  assert.ok(err instanceof StaleTokenError, String(err));
  assert.equal(err.token, 1);
  assert.equal(err.highest, 2);

  const read = await fetch(url);
  assert.equal(await read.text(), "written-by-b");
  assert.equal(read.headers.get("Fencing-Token"), "2");
  await b.release();
});

test("fencedFetch stamps the token, replaces the caller's, and aborts a request in flight when the hold ends", async (t) => {
  const service = await startFencedService(t);
  const c = new LeaseClient({ server: server.url, owner: "writer" });
  const hold = await c.tryAcquire(unique("fetch"), { ttlMs: 60_000 });
  const put = fencedFetch(hold);
  const res = await put(`${service.url}/stamped`, { method: "PUT", body: "v", headers: { "fencing-token": "999999" } });
  assert.equal(res.status, 200, await res.text());
  assert.equal((await fetch(`${service.url}/stamped`)).headers.get("Fencing-Token"), String(hold.token));

  await pause(service.proc); // the write hangs
  try {
    const inFlight = put(`${service.url}/stamped`, { method: "PUT", body: "w" }).then(
      () => new Error("the write went through"),
      (err: unknown) => err,
    );
    await new Promise((r) => setTimeout(r, 100));
    await hold.release();
    assert.equal(await inFlight, hold.signal.reason);
  } finally {
    service.proc.kill("SIGCONT");
  }
  await assert.rejects(put(`${service.url}/stamped`, { method: "PUT", body: "x" }), (err: unknown) => err === hold.signal.reason);
});
