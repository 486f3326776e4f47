// One LeaseClient keeps many holds alive with few requests: its holds'
// renewals go out together, up to 256 in one POST /v1/renew.

import assert from "node:assert/strict";
import { after, test } from "node:test";

import { type Hold, LeaseClient } from "../src/index.js";
import { startLease, unique, waitFor } from "./harness.js";

const server = await startLease({ after });

/** renewRequests counts the renew requests the server has answered, one lease's and batches alike. */
async function renewRequests(): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  let n = 0;
  for (const m of text.matchAll(/^lease_http_request_duration_seconds_count\{([^}]*)\} (\S+)$/gm)) {
    if (/route="POST \/v1\/(renew|leases\/\{key\}\/renew)"/.test(m[1] ?? "")) n += Number(m[2]);
  }
  return n;
}

test("1,000 holds at TTL 3 s are kept alive for 9 s with at most 200 renew requests", async (t) => {
  const c = new LeaseClient({ server: server.url, owner: "worker-a" });
  const prefix = unique("shard");
  const holds: Hold[] = [];
  for (let i = 0; i < 1000; i += 50) {
    const chunk = await Promise.all(
      Array.from({ length: 50 }, (_, j) => c.tryAcquire(`${prefix}/${String(i + j).padStart(4, "0")}`, { ttlMs: 3000 })),
    );
    holds.push(...chunk);
  }
  try {
    const before = await renewRequests();
    await new Promise((r) => setTimeout(r, 9000));
    const sent = (await renewRequests()) - before;
    t.diagnostic(`${sent} renew requests in 9 s`);
    const lost = holds.filter((h) => !h.held);
    assert.equal(lost.length, 0, `${lost.length} holds lost, the first: ${String(lost[0]?.signal.reason)}`);
    assert.ok(sent > 0 && sent <= 200, `${sent} renew requests in 9 s for 1,000 holds; want 1 to 200`);
  } finally {
    await Promise.all(holds.map((h) => h.release().catch(() => undefined)));
  }
});

test("batches ask lease serve for the minimal answer, get it, and keep the holds", async () => {
  // What each POST /v1/renew asked for and was answered, seen through the client's fetch.
  const seen: { prefer: string | null; applied: string | null; results: unknown[] }[] = [];
  const watched: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (String(input).endsWith("/v1/renew")) {
      const { results } = (await res.clone().json()) as { results: unknown[] };
      seen.push({ prefer: new Headers(init?.headers).get("Prefer"), applied: res.headers.get("Preference-Applied"), results });
    }
    return res;
  };
  const c = new LeaseClient({ server: server.url, owner: "worker-m", fetch: watched });
  const prefix = unique("minimal");
  const holds = await Promise.all(["a", "b", "c"].map((k) => c.tryAcquire(`${prefix}/${k}`, { ttlMs: 600 })));
  try {
    await waitFor("four batches", () => seen.length >= 4);
    for (const h of holds) {
      assert.ok(h.held, `${h.key} lost: ${String(h.signal.reason)}`);
      const got = await c.get(h.key);
      assert.ok(got, `${h.key} is not held on the server`);
      assert.equal(got.token, h.token);
      assert.equal(got.owner, "worker-m");
      // The hold's expiry is one a minimal answer gave: the server's, within a TTL of it.
      assert.ok(Math.abs(got.expiresAt.getTime() - h.expiresAt.getTime()) <= 600, `${h.key}: server ${got.expiresAt.toISOString()}, hold ${h.expiresAt.toISOString()}`);
    }
    for (const b of seen) {
      assert.equal(b.prefer, "return=minimal");
      assert.equal(b.applied, "return=minimal");
      for (const r of b.results) {
        assert.deepEqual(Object.keys(r as object).sort(), ["expires_at", "ttl_ms"], JSON.stringify(r));
        assert.equal((r as { ttl_ms: number }).ttl_ms, 600);
      }
    }
  } finally {
    await Promise.all(holds.map((h) => h.release().catch(() => undefined)));
  }
});
