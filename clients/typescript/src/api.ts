// The wire: one method per operation of the OpenAPI document, with the
// answers checked before anything else sees them. Paths and bodies come from
// the types generated from the document (openapi.ts).

import {
  errorFromBody,
  InvalidError,
  isToken,
  UnavailableError,
  UnexpectedAnswerError,
} from "./errors.js";
import { operations, type Operations } from "./openapi.js";
import type * as wire from "./openapi.js";

/** A lease as the server shows it to anyone allowed to see its key: without its secret. */
export interface LeaseInfo {
  readonly key: string;
  readonly owner: string;
  /** The fencing token. */
  readonly token: number;
  /** The TTL the lease was granted or last renewed for, in milliseconds. */
  readonly ttlMs: number;
  /** When it expires on the server's clock (informative: see Hold.deadline). */
  readonly expiresAt: Date;
}

/** A lease as its holder gets it: with the secret ID that renew and release need. */
export interface Granted extends LeaseInfo {
  readonly id: string;
}

type Op = keyof Operations;
type OK<O extends Op> = Operations[O]["responses"][200];

/** MIN_TTL_MS and MAX_TTL_MS bound a TTL: 10 ms to 24 h. */
export const MIN_TTL_MS = 10;
export const MAX_TTL_MS = 86_400_000;
/** MAX_WAIT_MS bounds one acquire's wait_ms: an hour. */
export const MAX_WAIT_MS = 3_600_000;
/** MAX_NAME_BYTES bounds a key or owner: 512 bytes of UTF-8. */
export const MAX_NAME_BYTES = 512;

/** DEFAULT_PAGE_LIMIT is how many leases a page of list holds when no limit is given. */
export const DEFAULT_PAGE_LIMIT = 1000;
/** MAX_PAGE_LIMIT is the largest limit of a page of list. */
export const MAX_PAGE_LIMIT = 10_000;

/** PageOptions choose one page of list. */
export interface PageOptions {
  /** limit is the most leases the page holds: 1 to MAX_PAGE_LIMIT; absent or 0: DEFAULT_PAGE_LIMIT. */
  limit?: number | undefined;
  /** after is the next of the previous page: the page starts after it. Absent or "": from the first key. */
  after?: string | undefined;
}

/** LeasePage is one page of list: leases in byte order of their keys (UTF-8, not UTF-16). */
export interface LeasePage {
  leases: LeaseInfo[];
  /** next continues after this page (pass it as after); "" when no lease came after it. */
  next: string;
}

/** CURSOR is what a cursor looks like: unpadded base64url. */
const CURSOR = /^[A-Za-z0-9_-]*$/;

/** checkPage throws InvalidError for a limit or cursor the server would refuse. */
export function checkPage(page: PageOptions): void {
  const { limit, after } = page;
  if (limit !== undefined && !(Number.isInteger(limit) && limit >= 0 && limit <= MAX_PAGE_LIMIT)) {
    throw new InvalidError(`lease: page limit ${limit} is outside [1, ${MAX_PAGE_LIMIT}] (0 means ${DEFAULT_PAGE_LIMIT})`);
  }
  if (after !== undefined && (typeof after !== "string" || !CURSOR.test(after))) {
    throw new InvalidError(`lease: page cursor ${JSON.stringify(after)} is not one that list returned`);
  }
}

const encoder = new TextEncoder();
const controlChar = /[\u0000-\u001f\u007f-\u009f]/;
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** checkName throws InvalidError unless name is a key or owner the server accepts. */
export function checkName(what: string, name: unknown): asserts name is string {
  if (typeof name !== "string" || name === "") {
    throw new InvalidError(`lease: ${what} must be a non-empty string`);
  }
  if (loneSurrogate.test(name)) throw new InvalidError(`lease: ${what} is not valid Unicode (a lone surrogate)`);
  const m = controlChar.exec(name);
  if (m) {
    throw new InvalidError(`lease: ${what} has control character U+${m[0].charCodeAt(0).toString(16).padStart(4, "0")}`);
  }
  const n = encoder.encode(name).length;
  if (n > MAX_NAME_BYTES) throw new InvalidError(`lease: ${what} is ${n} bytes, more than ${MAX_NAME_BYTES}`);
}

/** checkInt throws InvalidError unless v is a whole number within [min, max]. */
export function checkInt(what: string, v: unknown, min: number, max: number): asserts v is number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidError(`lease: ${what} must be a whole number from ${min} to ${max}, got ${String(v)}`);
  }
}

/**
 * checkKey throws InvalidError unless key is a key the server accepts and a
 * fetch URL can carry: WHATWG URLs, which fetch sends, resolve a path
 * segment "." or ".." away even when written %2E, so those two keys cannot
 * be reached from here.
 */
export function checkKey(key: unknown): asserts key is string {
  checkName("key", key);
  if (key === "." || key === "..") {
    throw new InvalidError(`lease: key ${JSON.stringify(key)} cannot travel in a fetch URL, which resolves it away as a dot segment`);
  }
}

/** escapeKey makes key one path segment, as the server reads it: "/" as %2F. */
export function escapeKey(key: string): string {
  return encodeURIComponent(key);
}

/** Api sends the operations of the v1 API to one server. */
export class Api {
  readonly #base: URL;
  readonly #auth: string | undefined;
  readonly #fetch: typeof globalThis.fetch;

  constructor(server: string | URL, bearer: string | undefined, fetchImpl: typeof globalThis.fetch | undefined) {
    let base: URL;
    try {
      base = new URL(server);
    } catch {
      throw new InvalidError(`lease: server ${JSON.stringify(String(server))} is not a URL; want http://host:port or https://host:port`);
    }
    if (base.protocol !== "http:" && base.protocol !== "https:") {
      throw new InvalidError(`lease: server ${JSON.stringify(String(server))} must be an http:// or https:// URL`);
    }
    if (base.search !== "" || base.hash !== "" || base.username !== "" || base.password !== "") {
      throw new InvalidError("lease: server URL must have no query, fragment or credentials (pass the bearer token as token)");
    }
    if (!base.pathname.endsWith("/")) base.pathname += "/";
    this.#base = base;
    if (bearer !== undefined) {
      if (typeof bearer !== "string" || bearer === "" || !/^[\x21-\x7e]+$/.test(bearer)) {
        throw new InvalidError("lease: token must be printable ASCII without spaces");
      }
      this.#auth = `Bearer ${bearer}`;
    }
    this.#fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  /** The server's base URL. */
  get base(): URL {
    return new URL(this.#base);
  }

  /** url returns the URL of op, with key and query filled in. */
  url(op: Op, key?: string, query?: Record<string, string>): URL {
    const path = operations[op].path.replace("{key}", () => escapeKey(key ?? ""));
    const u = new URL(path.slice(1), this.#base);
    for (const [k, v] of Object.entries(query ?? {})) u.searchParams.set(k, v);
    return u;
  }

  /**
   * call sends op and returns its 200 answer, parsed; an error answer
   * throws its class, a failure to get any answer UnavailableError (or the
   * signal's reason, if it was aborted).
   */
  async call<O extends Op>(
    op: O,
    key: string | undefined,
    body: Operations[O]["request"],
    signal: AbortSignal | undefined,
    query?: Record<string, string>,
  ): Promise<OK<O>> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.#auth !== undefined) headers["Authorization"] = this.#auth;
    const init: RequestInit = { method: operations[op].method, headers };
    if (signal !== undefined) init.signal = signal;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const what = key === undefined ? op : `${op} ${JSON.stringify(key)}`;
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch(this.url(op, key, query), init);
      text = await res.text();
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      const unknown = operations[op].method === "POST" ? "; the outcome is unknown" : "";
      throw new UnavailableError(`lease: ${what}: no answer from ${this.#base.origin}${unknown}: ${errText(err)}`, { cause: err });
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (res.status !== 200) throw errorFromBody(res.status, parsed, text);
    if (parsed === undefined) {
      throw new UnexpectedAnswerError(`lease: ${what}: HTTP 200 whose body is not JSON`, { status: 200 });
    }
    return parsed as OK<O>;
  }

  async acquire(key: string, owner: string, ttlMs: number, waitMs: number, signal?: AbortSignal): Promise<Granted> {
    return granted(key, await this.call("acquire", key, { owner, ttl_ms: ttlMs, wait_ms: waitMs }, signal));
  }

  async renew(g: Granted, ttlMs: number, signal?: AbortSignal): Promise<Granted> {
    return granted(g.key, await this.call("renew", g.key, { id: g.id, token: g.token, ttl_ms: ttlMs }, signal));
  }

  async release(g: Granted, signal?: AbortSignal): Promise<void> {
    const v: unknown = await this.call("release", g.key, { id: g.id, token: g.token }, signal);
    if (typeof v !== "object" || v === null || Object.keys(v).length !== 0) {
      throw new UnexpectedAnswerError(`lease: release ${JSON.stringify(g.key)}: answer ${JSON.stringify(v)}, want {}`);
    }
  }

  async get(key: string, signal?: AbortSignal): Promise<LeaseInfo> {
    return info(await this.call("getLease", key, undefined, signal), key);
  }

  async list(prefix: string, page: PageOptions, signal?: AbortSignal): Promise<LeasePage> {
    const query: Record<string, string> = {};
    if (prefix !== "") query.prefix = prefix;
    if (page.limit !== undefined && page.limit !== 0) query.limit = String(page.limit);
    if (page.after !== undefined && page.after !== "") query.after = page.after;
    const v = await this.call("listLeases", undefined, undefined, signal, query);
    if (typeof v !== "object" || v === null || !Array.isArray(v.leases)) {
      throw new UnexpectedAnswerError(`lease: list: answer without a leases array`);
    }
    if (typeof v.next !== "string" || !CURSOR.test(v.next)) {
      throw new UnexpectedAnswerError(`lease: list: answer without a next cursor`);
    }
    const limit = page.limit || DEFAULT_PAGE_LIMIT;
    if (v.leases.length > limit) {
      throw new UnexpectedAnswerError(`lease: list: ${v.leases.length} leases for a limit of ${limit}`);
    }
    return { leases: v.leases.map((l) => info(l, undefined)), next: v.next };
  }
}

function errText(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}

/** info checks a lease the server sent, as the document describes it. */
function info(v: wire.Lease | wire.GrantedLease, key: string | undefined): LeaseInfo {
  const bad = (why: string) =>
    new UnexpectedAnswerError(`lease: the server answered a lease that ${why}: ${JSON.stringify(v).slice(0, 200)}`);
  if (typeof v !== "object" || v === null) throw bad("is not an object");
  if (typeof v.key !== "string" || (key !== undefined && v.key !== key)) throw bad(`is not on key ${JSON.stringify(key)}`);
  if (typeof v.owner !== "string") throw bad("has no owner");
  if (!isToken(v.token)) throw bad("has a token outside [1, 2^53]");
  if (typeof v.ttl_ms !== "number" || !Number.isInteger(v.ttl_ms) || v.ttl_ms < 0 || v.ttl_ms > MAX_TTL_MS) {
    throw bad("has a ttl_ms outside [0, 86400000]");
  }
  const expiresAt = typeof v.expires_at === "string" ? new Date(v.expires_at) : new Date(NaN);
  if (Number.isNaN(expiresAt.getTime())) throw bad("has an expires_at that is not RFC 3339");
  return { key: v.key, owner: v.owner, token: v.token, ttlMs: v.ttl_ms, expiresAt };
}

function granted(key: string, v: wire.GrantedLease): Granted {
  const l = info(v, key);
  if (typeof v.id !== "string" || !/^[0-9a-fA-F]{32}$/.test(v.id)) {
    throw new UnexpectedAnswerError(`lease: the server answered a lease on ${JSON.stringify(key)} without a well-formed id`);
  }
  return { ...l, id: v.id };
}

/** isRetryable reports whether a read may be sent again: no answer, or 503 or another 5xx. */
export function isRetryable(err: unknown): boolean {
  return err instanceof UnavailableError;
}

/** sleep waits ms, or rejects with signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** retried runs f up to 3 times, 25 ms then 100 ms apart, while it fails with no answer or a 5xx. */
export async function retried<T>(f: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  const pauses = [25, 100];
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (err) {
      if (i >= pauses.length || !isRetryable(err) || signal?.aborted) throw err;
      await sleep(pauses[i] ?? 0, signal);
    }
  }
}
