// The event-stream parser against the HTML standard's rules, fed in chunks
// cut at every place (inside lines, between CR and LF, inside a UTF-8
// character), and the decoding of a watch stream's messages.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ForbiddenError, TooManyWatchersError, UnavailableError, UnexpectedAnswerError } from "../src/index.js";
import { EventStreamParser, type EventStreamMessage, MAX_EVENT_STREAM_LINE } from "../src/sse.js";
import { decodeWatchEvent } from "../src/watch.js";

const enc = new TextEncoder();

/** feed parses bytes cut into the chunks that start at cuts, and returns every message, then ends the stream. */
function feed(bytes: Uint8Array, cuts: number[]): { messages: EventStreamMessage[]; retryMs: number | undefined } {
  const p = new EventStreamParser();
  const messages: EventStreamMessage[] = [];
  const at = [0, ...cuts, bytes.length];
  for (let i = 0; i + 1 < at.length; i++) messages.push(...p.push(bytes.subarray(at[i], at[i + 1])));
  p.end();
  return { messages, retryMs: p.retryMs };
}

/** every checks that the stream parses to want whole, byte by byte, and cut once at each place. */
function every(stream: string | Uint8Array, want: EventStreamMessage[], wantRetry?: number): void {
  const bytes = typeof stream === "string" ? enc.encode(stream) : stream;
  const splits: [string, number[]][] = [
    ["whole", []],
    ["byte by byte", Array.from({ length: Math.max(0, bytes.length - 1) }, (_, i) => i + 1)],
  ];
  for (let c = 1; c < bytes.length; c++) splits.push([`cut at ${c}`, [c]]);
  for (const [how, cuts] of splits) {
    const got = feed(bytes, cuts);
    assert.deepEqual(got.messages, want, how);
    assert.equal(got.retryMs, wantRetry, `${how}: retry`);
  }
}

const m = (data: string, event = "message", lastEventId = ""): EventStreamMessage => ({ event, data, lastEventId });

test("the standard's examples: multi-line data, comments, ids, one space stripped", () => {
  every("data: YHOO\ndata: +2\ndata: 10\n\n", [m("YHOO\n+2\n10")]);
  every(": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n", [
    m("first event", "message", "1"),
    m("second event", "message", ""),
    m(" third event", "message", ""),
  ]);
  // A data line with no value still counts; the last message has no blank line after it.
  every("data\n\ndata\ndata\n\ndata:", [m(""), m("\n")]);
  every("data:test\n\ndata: test\n\n", [m("test"), m("test")]);
});

test("CRLF, CR and LF end lines alike, also when cut between CR and LF", () => {
  const want = [m("a\nb", "held", "7"), m("c", "synced", "8")];
  every("id: 7\r\nevent: held\r\ndata: a\r\ndata: b\r\n\r\nid: 8\revent: synced\rdata: c\r\r", want);
  every("id: 7\nevent: held\ndata: a\ndata: b\n\nid: 8\nevent: synced\ndata: c\n\n", want);
  // Mixed; a blank line without data resets the event name, so "c" is a plain message.
  every("id: 7\r\nevent: held\ndata: a\rdata: b\r\n\nid: 8\r\revent: synced\n\r\ndata: c\n\r", [
    m("a\nb", "held", "7"),
    m("c", "message", "8"),
  ]);
});

test("heartbeats, retry, unknown fields, and a message without data are not dispatched", () => {
  every(
    "retry: 1000\n\n: ping\n\nevent: held\nid: 1\nbogus: x\ndata: {}\n\n: ping\n\nevent: lonely\n\nid: 2\n\nretry: 5x\ndata: after\n\n",
    [m("{}", "held", "1"), m("after", "message", "2")],
    1000,
  );
  // An id with NUL is ignored; the event name resets after each message.
  every("id: 3\n\nid: a\u0000b\nevent: held\ndata: x\n\ndata: y\n\n", [m("x", "held", "3"), m("y", "message", "3")]);
});

test("a leading BOM is dropped once; UTF-8 cut inside a character is kept whole", () => {
  // A BOM later on is a character of the field name: "\uFEFFdata" is no field.
  const text = "data: ü日本🔒\n\n\uFEFFdata: x\n\ndata: z\n\n";
  every(new Uint8Array([0xef, 0xbb, 0xbf, ...enc.encode(text)]), [m("ü日本🔒"), m("z")]);
  every(text, [m("ü日本🔒"), m("z")]);
  every("\uFEFF\uFEFFdata: x\n\ndata: y\n\n", [m("y")]);
});

test("bytes that are not UTF-8 throw, not read as U+FFFD", () => {
  const p = new EventStreamParser();
  assert.throws(() => p.push(new Uint8Array([0x64, 0x61, 0x74, 0x61, 0x3a, 0x20, 0xff, 0x0a, 0x0a])), TypeError);
  const cut = new EventStreamParser();
  assert.deepEqual(cut.push(new TextEncoder().encode("data: é").slice(0, -1)), []);
  cut.end(); // a character cut off by the end is dropped with its message
});

test("a message cut off by the end of the stream is dropped", () => {
  every("event: held\ndata: {}\n\nevent: acquired\ndata: {}\n", [m("{}", "held")]);
});

test("a line longer than the bound is an error, not a growing buffer", () => {
  const p = new EventStreamParser();
  const long = enc.encode("data: " + "x".repeat(MAX_EVENT_STREAM_LINE));
  assert.throws(() => p.push(long), RangeError);
  const q = new EventStreamParser();
  const half = "data: " + "x".repeat(MAX_EVENT_STREAM_LINE / 2) + "\n";
  assert.throws(() => q.push(enc.encode(half + half + half)), RangeError);
});

test("watch messages decode to typed events; errors and strangers throw their classes", () => {
  const lease = { key: "jobs/a", owner: "w", token: 3, ttl_ms: 1000, expires_at: "2026-01-02T03:04:05.678Z" };
  assert.deepEqual(decodeWatchEvent("jobs/", m(JSON.stringify(lease), "acquired", "4")), {
    kind: "acquired",
    lease: { key: "jobs/a", owner: "w", token: 3, ttlMs: 1000, expiresAt: new Date("2026-01-02T03:04:05.678Z") },
  });
  assert.deepEqual(decodeWatchEvent("jobs/", m("{}", "synced", "1")), { kind: "synced" });
  const withId = decodeWatchEvent("", m(JSON.stringify({ ...lease, id: "0123456789abcdef0123456789abcdef" }), "held"));
  assert.equal(withId.kind === "held" && "id" in withId.lease, false, "an id in the data was passed on");

  const err = (code: string) => m(JSON.stringify({ error: { code, message: "said so" } }), "end");
  assert.throws(() => decodeWatchEvent("", err("unavailable")), (e) => e instanceof UnavailableError && /said so/.test(e.message));
  assert.throws(() => decodeWatchEvent("", err("forbidden")), ForbiddenError);
  assert.throws(() => decodeWatchEvent("", err("too_many_watchers")), TooManyWatchersError);
  assert.throws(() => decodeWatchEvent("", err("some_new_code")), UnavailableError);
  assert.throws(() => decodeWatchEvent("", m("not json", "end")), UnavailableError);
  // A server from before the end event named it error.
  assert.throws(() => decodeWatchEvent("", m(JSON.stringify({ error: { code: "forbidden", message: "m" } }), "error")), ForbiddenError);

  assert.throws(() => decodeWatchEvent("", m(JSON.stringify(lease), "message")), UnexpectedAnswerError);
  assert.throws(() => decodeWatchEvent("", m("{", "held")), UnexpectedAnswerError);
  assert.throws(() => decodeWatchEvent("", m(JSON.stringify({ ...lease, token: 0 }), "held")), UnexpectedAnswerError);
  assert.throws(() => decodeWatchEvent("reports/", m(JSON.stringify(lease), "held")), UnexpectedAnswerError);
  // Numbers as written: JSON.parse reads 9007199254740993 as 2^53.
  for (const token of ["9007199254740993", "3.0", "3e0"]) {
    const data = JSON.stringify(lease).replace('"token":3', `"token":${token}`);
    assert.throws(() => decodeWatchEvent("", m(data, "held")), UnexpectedAnswerError, token);
  }
  const max = decodeWatchEvent("", m(JSON.stringify({ ...lease, token: 2 ** 53 }), "held"));
  assert.equal(max.kind === "held" && max.lease.token, 2 ** 53);
});
