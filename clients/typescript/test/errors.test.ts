// Error answers become the class of their code; answers without the API's
// error body never become "not found" or a 409 class.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  errorFromBody,
  ForbiddenError,
  HeldError,
  InvalidError,
  LeaseError,
  MAX_TOKEN,
  NotFoundError,
  NotHeldError,
  StaleTokenError,
  TooManyWatchersError,
  UnauthorizedError,
  UnavailableError,
  UnexpectedAnswerError,
  UnsupportedError,
} from "../src/index.js";
// A namespace import: a name this module lacks fails the test that uses it, not the file.
import * as errors from "../src/errors.js";
import { errorCodeValues } from "../src/openapi.js";
import { repoRoot } from "./harness.js";

const classes = {
  held: HeldError,
  not_held: NotHeldError,
  stale_token: StaleTokenError,
  not_found: NotFoundError,
  invalid: InvalidError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  too_many_watchers: TooManyWatchersError,
  unsupported: UnsupportedError,
  unavailable: UnavailableError,
} as const;

test("every code of the document has its class", () => {
  for (const code of errorCodeValues) {
    const err = errorFromBody(409, { error: { code, message: `lease: ${code}` } }, "");
    assert.ok(err instanceof classes[code], `${code}: ${err.name}`);
    assert.ok(err instanceof LeaseError);
    assert.equal(err.code, code);
    assert.equal(err.message, `lease: ${code}`);
    assert.equal(err.status, 409);
  }
});

test("held carries the holder; stale_token the guard's detail", () => {
  const held = errorFromBody(409, {
    error: { code: "held", message: "m", holder: { key: "k", owner: "o", token: 7, expires_at: "2026-12-02T10:00:00.000Z" } },
  }, "");
  assert.ok(held instanceof HeldError);
  assert.deepEqual(held.holder, { key: "k", owner: "o", token: 7, expiresAt: new Date("2026-12-02T10:00:00.000Z") });
  const stale = errorFromBody(409, { error: { code: "stale_token", message: "m", resource: "r", token: 1, highest: 2 } }, "");
  assert.ok(stale instanceof StaleTokenError);
  assert.equal(stale.resource, "r");
  assert.equal(stale.token, 1);
  assert.equal(stale.highest, 2);
});

test("stale_token keeps the edge tokens: MAX_TOKEN (2^53, not a safe integer) is a token like any other", () => {
  const stale = errorFromBody(409, {
    error: { code: "stale_token", message: "m", resource: "r", token: MAX_TOKEN - 1, highest: MAX_TOKEN },
  }, "");
  assert.ok(stale instanceof StaleTokenError);
  assert.equal(stale.token, MAX_TOKEN - 1);
  assert.equal(stale.highest, MAX_TOKEN);
  // What no server can have accepted is left out, as for token.
  for (const highest of [0, -1, 1.5, MAX_TOKEN + 2, "5"]) {
    const e = errorFromBody(409, { error: { code: "stale_token", message: "m", resource: "r", token: 1, highest } }, "");
    assert.ok(e instanceof StaleTokenError);
    assert.equal(e.highest, undefined, `highest ${String(highest)}`);
  }
});

test("answers without the API's error body go by their status, never to not_found or 409", () => {
  const page = "<html>bad gateway</html>";
  assert.ok(errorFromBody(502, undefined, page) instanceof UnavailableError);
  assert.ok(errorFromBody(404, undefined, "404 page not found") instanceof UnexpectedAnswerError);
  assert.ok(errorFromBody(409, undefined, "conflict") instanceof UnexpectedAnswerError);
  assert.ok(errorFromBody(401, undefined, "") instanceof UnauthorizedError);
  assert.ok(errorFromBody(413, undefined, "") instanceof InvalidError);
});

test("error answers become the class every client makes of them (leasehttp/testdata/error_answers.json)", () => {
  const doc = JSON.parse(readFileSync(join(repoRoot(), "leasehttp", "testdata", "error_answers.json"), "utf8")) as {
    cases: { status: number; body: string; want: keyof typeof classes | "unexpected" }[];
  };
  assert.ok(doc.cases.length > 0);
  for (const c of doc.cases) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(c.body);
    } catch {
      parsed = undefined;
    }
    const err = errorFromBody(c.status, parsed, c.body);
    const want = c.want === "unexpected" ? UnexpectedAnswerError : classes[c.want];
    assert.equal(err.constructor, want, `HTTP ${c.status} ${c.body}: ${err.name} ${err.message}`);
    assert.equal(err.status, c.status);
  }
});

test("a holder's token or a stale token's numbers written past 2^53 are left out, not read as 2^53", () => {
  // JSON.parse reads 9007199254740993 as 2^53, another lease's token: a
  // HeldError named a holder with it. The Go client leaves such a holder
  // out; so does this one now, and the stale token's numbers alike.
  const over = "9007199254740993";
  const heldText = `{"error":{"code":"held","message":"m","holder":{"key":"k","owner":"o","token":${over},"expires_at":"2026-01-01T00:00:00.000Z"}}}`;
  const held = errorFromBody(409, JSON.parse(heldText), heldText);
  assert.ok(held instanceof HeldError);
  assert.equal(held.holder, undefined, `holder ${JSON.stringify(held.holder)}`);
  for (const [token, highest] of [[over, "5"], ["5", over], ["5", "7.0"]]) {
    const text = `{"error":{"code":"stale_token","message":"m","resource":"r","token":${token},"highest":${highest}}}`;
    const stale = errorFromBody(409, JSON.parse(text), text);
    assert.ok(stale instanceof StaleTokenError);
    assert.deepEqual([stale.token, stale.highest], [undefined, undefined], text);
  }
  // Written as a server writes them, they are kept, 2^53 included.
  const ok = `{"error":{"code":"stale_token","message":"m","resource":"r","token":5,"highest":${MAX_TOKEN}}}`;
  const stale = errorFromBody(409, JSON.parse(ok), ok);
  assert.ok(stale instanceof StaleTokenError);
  assert.deepEqual([stale.token, stale.highest], [5, MAX_TOKEN]);
});

test("Retry-After is read as the Go client reads it: delay-seconds or an HTTP date, at most a minute", () => {
  const now = Date.UTC(2026, 11, 7, 20, 0, 0);
  const cases: [string | null, number | undefined][] = [
    ["2", 2000],
    [" 2 ", 2000],
    ["0", 0],
    ["007", 7000],
    ["60", 60_000],
    ["61", 60_000],
    ["4294967295", 60_000],
    ["Mon, 07 Dec 2026 20:00:02 GMT", 2000], // IMF-fixdate
    ["mon, 07 dec 2026 20:00:02 GMT", 2000],
    ["Monday, 07-Dec-26 20:00:30 GMT", 30_000], // RFC 850
    ["Mon Dec  7 20:00:45 2026", 45_000], // asctime
    ["Mon Dec 7 20:00:45 2026", 45_000],
    ["Mon, 07 Dec 2026 19:59:00 GMT", 0], // past
    ["Mon, 07 Dec 2026 21:00:00 GMT", 60_000],
    [null, undefined],
    ["", undefined],
    ["4294967296", undefined], // past 32 bits, as Go's ParseUint refuses it
    ["-1", undefined],
    ["+2", undefined],
    ["1.5", undefined],
    ["1e3", undefined],
    ["soon", undefined],
    ["Mon, 07 Dec 2026 20:00:02 UTC", undefined],
    ["Mon, 31 Feb 2026 20:00:02 GMT", undefined],
    ["Mon, 07 Dec 2026 24:00:02 GMT", undefined],
    ["2026-12-07T20:00:02Z", undefined],
  ];
  for (const [v, want] of cases) assert.equal(errors.parseRetryAfter(v, now), want, JSON.stringify(v));
});

test("an answer's Retry-After is its error's retryAfterMs on a 429 or a 5xx, never on another", () => {
  const body = { error: { code: "unavailable", message: "m" } };
  const e503 = errorFromBody(503, body, "", "1");
  assert.ok(e503 instanceof UnavailableError);
  assert.equal(e503.retryAfterMs, 1000);
  const page = errorFromBody(502, undefined, "<html>", "5");
  assert.ok(page instanceof UnavailableError);
  assert.equal(page.retryAfterMs, 5000);
  const limited = errorFromBody(429, undefined, "Too Many Requests", "2");
  assert.ok(limited instanceof UnexpectedAnswerError);
  assert.equal(limited.retryAfterMs, 2000);
  const watchers = errorFromBody(429, { error: { code: "too_many_watchers", message: "m" } }, "", "3");
  assert.ok(watchers instanceof TooManyWatchersError);
  assert.equal(watchers.retryAfterMs, 3000);
  assert.equal(errorFromBody(409, { error: { code: "held", message: "m" } }, "", "2").retryAfterMs, undefined);
  assert.equal(errorFromBody(503, body, "").retryAfterMs, undefined);
});
