// The PostgreSQL guard (updateRow) on a real PostgreSQL, and the seed
// scenario through `lease serve` with it.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import pg from "pg";

import { HeldError, type Hold, InvalidError, LeaseClient, NotFoundError, StaleTokenError } from "../src/index.js";
import { updateRow, updateRowSQL, type PgQueryable } from "../src/pg.js";
import { postgresURL, startLease, unique, waitFor } from "./harness.js";

const server = await startLease({ after });
const pool = new pg.Pool({ connectionString: postgresURL(), max: 4 });
after(() => pool.end());

// pg's clients are what updateRow takes.
const asQueryable: PgQueryable[] = [pool, new pg.Client()];
void asQueryable;

let table = "";
before(async () => {
  table = unique("jobs").replaceAll("-", "_");
  await pool.query(`CREATE TABLE "${table}" (id int PRIMARY KEY, value text NOT NULL, fencing_token bigint)`);
});

async function row(id: number): Promise<{ value: string; fencing_token: string | null }> {
  const r = await pool.query(`SELECT value, fencing_token::text FROM "${table}" WHERE id = $1`, [id]);
  return r.rows[0];
}

async function newRow(id: number): Promise<void> {
  await pool.query(`INSERT INTO "${table}" (id, value) VALUES ($1, 'initial')`, [id]);
}

test("seed scenario through lease serve with the PostgreSQL guard", async () => {
  await newRow(1);
  const key = unique("seed-pg");
  const A = new LeaseClient({ server: server.url, owner: "worker-a" });
  const B = new LeaseClient({ server: server.url, owner: "worker-b" });
  const a = await A.tryAcquire(key, { ttlMs: 100 });
  // A pauses past its TTL (no renewal goes out meanwhile).
  const until = performance.now() + 150;
  while (performance.now() < until) {
    // busy
  }
  let b: Hold | undefined;
  await waitFor("B acquires after A's expiry", async () => {
    b = await B.tryAcquire(key, { ttlMs: 1000 }).catch((err: unknown) => {
      if (err instanceof HeldError) return undefined;
      throw err;
    });
    return b !== undefined;
  });
  assert.ok(b);
  assert.equal(a.token, 1);
  assert.equal(b.token, 2);

  await updateRow(pool, table, 1, { value: "written-by-b" }, b.token);
  await assert.rejects(updateRow(pool, table, 1, { value: "late-write-by-a" }, a.token), (err: unknown) => {
    assert.ok(err instanceof StaleTokenError, String(err));
    assert.equal(err.token, 1);
    assert.equal(err.highest, 2);
    assert.equal(err.resource, `${table}/1`);
    return true;
  });
  assert.deepEqual(await row(1), { value: "written-by-b", fencing_token: "2" });
  await b.release();
});

test("at-least admits the same token again, strict only a greater one; a rejected write changes nothing", async () => {
  await newRow(2);
  await updateRow(pool, table, 2, { value: "one" }, 5);
  await updateRow(pool, table, 2, { value: "two" }, 5);
  assert.deepEqual(await row(2), { value: "two", fencing_token: "5" });
  await assert.rejects(updateRow(pool, table, 2, { value: "three" }, 5, { mode: "strict" }), StaleTokenError);
  await assert.rejects(updateRow(pool, table, 2, { value: "three" }, 4), StaleTokenError);
  assert.deepEqual(await row(2), { value: "two", fencing_token: "5" });
  await updateRow(pool, table, 2, { value: "four" }, 6, { mode: "strict" });
  assert.deepEqual(await row(2), { value: "four", fencing_token: "6" });
  // No values: only the token is recorded, which fences older writers out.
  await updateRow(pool, table, 2, {}, 2 ** 53);
  assert.deepEqual(await row(2), { value: "four", fencing_token: String(2 ** 53) });
});

test("a missing row is NotFoundError; bad names and tokens are InvalidError", async () => {
  await assert.rejects(updateRow(pool, table, 999, { value: "x" }, 1), NotFoundError);
  await assert.rejects(updateRow(pool, table, 1, { value: "x" }, 0), InvalidError);
  await assert.rejects(updateRow(pool, table, 1, { value: "x" }, 2 ** 53 + 2), InvalidError);
  for (const t of [9007199254740993n, 5n, "5"] as unknown[]) {
    await assert.rejects(updateRow(pool, table, 1, { value: "x" }, t as number), InvalidError, `token ${String(t)} (${typeof t})`);
  }
  await assert.rejects(updateRow(pool, table, 1, { fencing_token: 3 }, 3), InvalidError);
  await assert.rejects(updateRow(pool, "x".repeat(64), 1, {}, 1), InvalidError);
  await assert.rejects(updateRow(pool, "a\u0000b", 1, {}, 1), InvalidError);
});

test("names are quoted, columns set in name order, values sent as parameters", () => {
  const s = updateRowSQL(["app", 'we"ird'], 7, { z: 1, a: "it's" }, 42, { idColumn: "job_id", mode: "strict" });
  assert.equal(
    s.text,
    `UPDATE "app"."we""ird" SET "a" = $1, "z" = $2, "fencing_token" = $3 WHERE "job_id" = $4 AND coalesce("fencing_token", 0) < $3::bigint`,
  );
  assert.deepEqual(s.values, ["it's", 1, 42, 7]);
});

test("a row whose token is past 2^53 (another writer's) rejects every token as stale, telling its token exactly", async () => {
  // JavaScript reads 9007199254740993 as 2^53: the row's token looked
  // equal to a token of 2^53, admitted in at-least mode, so updateRow took
  // the refusal for a row changing under it, asked twice more and threw
  // an UnavailableError.
  await newRow(3);
  await pool.query(`UPDATE "${table}" SET fencing_token = 9007199254740993 WHERE id = 3`);
  for (const mode of ["at-least", "strict"] as const) {
    for (const token of [2 ** 53, 7]) {
      await assert.rejects(updateRow(pool, table, 3, { value: "late" }, token, { mode }), (err: unknown) => {
        assert.ok(err instanceof StaleTokenError, `${mode} ${token}: ${String(err)}`);
        assert.equal(err.token, token);
        assert.equal(err.highest, undefined, "a highest no number holds exactly");
        assert.match(err.message, /the row has 9007199254740993/);
        return true;
      });
    }
  }
  assert.deepEqual(await row(3), { value: "initial", fencing_token: "9007199254740993" });
});
