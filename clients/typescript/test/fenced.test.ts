// FencedResource: the seed's guard grown up.

import assert from "node:assert/strict";
import { test } from "node:test";

import { FencedResource, InvalidError, StaleTokenError } from "../src/index.js";

test("at-least (the default) admits the same token again and rejects an older one", () => {
  const r = new FencedResource("initial", { name: "job" });
  assert.equal(r.mode, "at-least");
  r.write(2, "b1");
  r.write(2, "b2");
  assert.throws(() => r.write(1, "late"), (err: unknown) => {
    assert.ok(err instanceof StaleTokenError);
    assert.equal(err.code, "stale_token");
    assert.equal(err.resource, "job");
    assert.equal(err.token, 1);
    assert.equal(err.highest, 2);
    assert.match(err.message, /^lease: stale token 1 for "job": highest accepted is 2 \(mode at-least\)$/);
    return true;
  });
  assert.deepEqual(r.read(), { value: "b2", lastToken: 2 });
});

test("strict admits each token once, as the seed's FencedResource", () => {
  const r = new FencedResource("initial", { mode: "strict" });
  r.write(1, "a");
  assert.throws(() => r.write(1, "again"), StaleTokenError);
  r.write(3, "c");
  assert.deepEqual(r.read(), { value: "c", lastToken: 3 });
});

test("a rejected or failed write changes nothing", () => {
  const r = new FencedResource({ n: 1 });
  r.write(5, { n: 5 });
  assert.throws(() => r.update(4, () => ({ n: 4 })), StaleTokenError);
  assert.throws(() => r.update(6, () => {
    throw new Error("write failed");
  }), /write failed/);
  assert.deepEqual(r.read(), { value: { n: 5 }, lastToken: 5 });
  r.update(6, (old) => ({ n: old.n + 1 }));
  assert.deepEqual(r.read(), { value: { n: 6 }, lastToken: 6 });
});

test("tokens a server cannot have issued are InvalidError, and change nothing", () => {
  const r = new FencedResource("v");
  for (const t of [0, -1, 1.5, Number.NaN, 2 ** 53 + 2, Number.POSITIVE_INFINITY]) {
    assert.throws(() => r.write(t, "x"), InvalidError, `token ${t}`);
  }
  // A bigint or a string, even of a token past 2^53, is not a token: refused, not compared.
  for (const t of [9007199254740993n, 5n, "5", "9007199254740993"] as unknown[]) {
    assert.throws(() => r.write(t as number, "x"), InvalidError, `token ${String(t)} (${typeof t})`);
  }
  r.write(2 ** 53, "max");
  assert.deepEqual(r.read(), { value: "max", lastToken: 2 ** 53 });
  assert.throws(() => new FencedResource("v", { mode: "loose" as "strict" }), InvalidError);
  assert.throws(() => r.update(2 ** 53, (() => Promise.resolve("p")) as unknown as () => string), InvalidError);
  assert.deepEqual(r.read(), { value: "max", lastToken: 2 ** 53 });
});

test("an update run from inside another update's function is refused, so the mark never goes back", () => {
  // Go's Resource and Python's hold a lock across f; JavaScript runs a
  // nested call at once, and the outer update then recorded its older token
  // over the newer one the nested call had recorded.
  const r = new FencedResource("initial");
  r.write(5, "five");
  assert.throws(() => r.update(6, () => {
    r.write(10, "ten");
    return "six";
  }), InvalidError);
  assert.deepEqual(r.read(), { value: "five", lastToken: 5 });
  // The resource is usable again after the refused nested call.
  r.write(7, "seven");
  assert.deepEqual(r.read(), { value: "seven", lastToken: 7 });
});
