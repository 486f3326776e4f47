// The README's example, as written there but for the server's address.

import assert from "node:assert/strict";
import { after, test } from "node:test";

import { FencedResource, LeaseClient, StaleTokenError } from "../src/index.js";
import { startLease } from "./harness.js";

const server = await startLease({ after });

test("the README's example runs as it says", async () => {
  const logged: unknown[] = [];
  const console = { log: (v: unknown) => logged.push(v) };
  {
    const client = new LeaseClient({ server: server.url, owner: "worker-a" });
    const resource = new FencedResource("initial", { mode: "strict" }); // the seed's rule; default "at-least"

    await using hold = await client.acquire("job", { ttlMs: 10_000 }); // waits; tryAcquire tries once
    // hold.signal aborts (reason: LeaseLostError) as soon as the lease may be gone.
    try {
      resource.write(hold.token, "written-by-a"); // a later holder's write would make ours stale
    } catch (err) {
      if (!(err instanceof StaleTokenError)) throw err;
      console.log("superseded: our write did not land, and changed nothing");
    }
    console.log(resource.read()); // { value: "written-by-a", lastToken: 1 }
  }
  assert.deepEqual(logged, [{ value: "written-by-a", lastToken: 1 }]);
  assert.equal(await new LeaseClient({ server: server.url }).get("job"), undefined, "await using did not release");
});

test("the README's form without await using runs and releases", async () => {
  const client = new LeaseClient({ server: server.url, owner: "worker-a" });
  const resource = new FencedResource("initial", { mode: "strict" });
  const hold = await client.acquire("job-portable", { ttlMs: 10_000 });
  try {
    resource.write(hold.token, "written-by-a");
  } finally {
    await hold.release().catch(() => undefined); // what `await using` does; drop the catch to see a loss
  }
  assert.deepEqual(resource.read(), { value: "written-by-a", lastToken: hold.token });
  assert.equal(await client.get("job-portable"), undefined, "the finally block did not release");
});
