// The wire: one method per operation of the OpenAPI document, with the
// answers checked before anything else sees them. Paths and bodies come from
// the types openapi-typescript generates from the document (openapi.ts),
// through operations.ts.

import {
  errorFromBody,
  InvalidError,
  LeaseError,
  isToken,
  MAX_TOKEN,
  NotHeldError,
  UnavailableError,
  UnexpectedAnswerError,
} from "./errors.js";
import { defaultTransport, fetchTransport } from "./fetch.js";
import type { Transport, WireAnswer } from "./transport.js";
import type * as wire from "./openapi.js";
import { type Op, operations, type Operations } from "./operations.js";

/** A lease as the server shows it to anyone allowed to see its key: without its secret. */
/** HEARTBEAT_HEADER says a watch stream's heartbeat in milliseconds. */
export const HEARTBEAT_HEADER = "Lease-Heartbeat-Ms";

/**
 * STORE_HEADER names the store a server serves (lease serve over etcd sends
 * it: leasehttp.StoreHeader). An Api given several servers keeps the first
 * value it gets and refuses an answer that names another store, as the Go
 * and Python clients do: a replica given another etcd cluster or prefix
 * serves other leases, and a key held through one would look free through
 * the other.
 */
export const STORE_HEADER = "Lease-Store";

/**
 * DEFAULT_TIMEOUT_MS is how long one request may go unanswered (beyond the
 * wait an acquire asks for) before it is given up as an answer lost: the Go
 * client's default (leasehttp.WithTimeout).
 */
export const DEFAULT_TIMEOUT_MS = 10_000;

/** DEFAULT_HEARTBEAT_MS is the heartbeat assumed of a server that does not say its own (leasehttp.DefaultHeartbeat). */
export const DEFAULT_HEARTBEAT_MS = 15_000;

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
  // A UTF-16 code unit is at most 3 bytes of UTF-8: a short name needs no encoding to be measured.
  if (name.length * 3 <= MAX_NAME_BYTES) return;
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

/**
 * PATHS are the operations' paths relative to a base, split once around
 * their {key} (tail undefined: no key), so that building a URL is two
 * concatenations.
 */
const PATHS = {} as Record<Op, readonly [head: string, tail: string | undefined]>;
for (const op of Object.keys(operations) as Op[]) {
  const { path } = operations[op];
  const i = path.indexOf("{key}");
  PATHS[op] = i < 0 ? [path.slice(1), undefined] : [path.slice(1, i), path.slice(i + "{key}".length)];
}

/** baseURL checks one server URL and makes it a base for the API's paths. */
function baseURL(server: unknown): URL {
  let base: URL;
  try {
    if (typeof server !== "string" && !(server instanceof URL)) throw new TypeError("not a string");
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
  return base;
}

/**
 * NOT_SENT are the codes of a failure to connect: the name did not resolve,
 * or the connection was refused or could not be made. The server saw
 * nothing of the request.
 */
const NOT_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EAI_NONAME",
  "EAI_FAIL",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/**
 * notSent reports whether a failed fetch provably never reached a server:
 * fetch's cause (or every cause, when several addresses were tried) is a
 * failure to resolve or to connect.
 */
export function notSent(err: unknown): boolean {
  const cause = err instanceof Error ? err.cause : undefined;
  const one = (e: unknown): boolean => {
    if (typeof e !== "object" || e === null) return false;
    const { code, syscall } = e as { code?: unknown; syscall?: unknown };
    return (typeof code === "string" && NOT_SENT.has(code)) || syscall === "connect" || syscall === "getaddrinfo";
  };
  if (cause instanceof AggregateError && cause.errors.length > 0) return cause.errors.every(one);
  return one(cause);
}

/** An answer, and the endpoint that gave it (an index of the Api's servers). */
interface Answer {
  readonly res: WireAnswer;
  readonly at: number;
  /** An attempt on an endpoint before it may have reached its server (its answer lost, or a 5xx). */
  readonly lost: boolean;
}

/** The parts of a request that are the same whichever endpoint it goes to. */
interface Init {
  readonly method: string;
  readonly headers: Record<string, string>;
  body?: string;
  readonly signal: AbortSignal | undefined;
  deadline?: Deadline | undefined;
  /** Bounds each attempt (one endpoint's), as Api's timeoutMs does; an acquire's adds the wait it asks for. */
  attemptMs?: number | undefined;
  /** Gets the answer of a request the signal ended while it waited for it (WireRequest.late). */
  late?: ((answer: WireAnswer) => void) | undefined;
}

/**
 * Deadline bounds a request and its retries: it fails with an
 * UnavailableError once `until` (performance.now() scale) has passed
 * without an answer; `ms` is the time it was given, for the message.
 */
export interface Deadline {
  readonly until: number;
  readonly ms: number;
}

/**
 * Api sends the operations of the v1 API to one server, or to the first of
 * several that answers. Requests go to one endpoint until it fails them —
 * no connection, a lost answer, a 5xx — and then to the next, in the order
 * given and round again. A request that could not connect moves on to the
 * next endpoint at once, and so does one that may be sent twice (every one
 * but acquire) after a lost answer or a 5xx; an acquire whose outcome is
 * unknown is not sent again.
 */
export class Api {
  readonly #bases: readonly URL[];
  readonly #hrefs: readonly string[]; // #bases as strings, to build URLs on
  readonly #origins: readonly string[]; // #bases' origins, for messages
  readonly #auth: string | undefined;
  readonly #send: Transport;
  readonly #timeoutMs: number;
  #preferred = 0;
  /**
   * watchesGivenUp counts the watch streams given up for silence, which
   * their servers may count against --max-watchers until their
   * connections fail (see Watch).
   */
  watchesGivenUp = 0;
  /** The store the first answer that named one named (STORE_HEADER), and the origin that named it. */
  #store: { readonly id: string; readonly origin: string } | undefined;

  constructor(
    server: string | URL | readonly (string | URL)[],
    bearer: string | undefined,
    fetchImpl: typeof globalThis.fetch | undefined,
    timeoutMs = DEFAULT_TIMEOUT_MS,
  ) {
    this.#timeoutMs = timeoutMs;
    const list: readonly unknown[] = Array.isArray(server) ? server : [server];
    if (list.length === 0) throw new InvalidError("lease: server is an empty list; name at least one URL");
    const bases = list.map(baseURL);
    for (const [i, b] of bases.entries()) {
      if (bases.findIndex((o) => o.href === b.href) !== i) throw new InvalidError(`lease: server ${b.href} is listed twice`);
    }
    this.#bases = bases;
    this.#hrefs = bases.map((b) => b.href);
    this.#origins = bases.map((b) => b.origin);
    if (bearer !== undefined) {
      if (typeof bearer !== "string" || bearer === "" || !/^[\x21-\x7e]+$/.test(bearer)) {
        throw new InvalidError("lease: token must be printable ASCII without spaces");
      }
      this.#auth = `Bearer ${bearer}`;
    }
    this.#send = fetchImpl === undefined ? defaultTransport() : fetchTransport(fetchImpl);
  }

  /** The base URL of the endpoint requests go to first: the first given until it fails a request, then the next, and so on. */
  get base(): URL {
    return new URL(this.#bases[this.#preferred] ?? "");
  }

  /** The base URLs of every endpoint, in the order given. */
  get bases(): URL[] {
    return this.#bases.map((b) => new URL(b));
  }

  /**
   * url returns the URL of op on endpoint at, with key and query filled in.
   * A base has a path ending in "/" and no query or fragment, and a key is
   * one escaped segment that is not a dot segment, so the URL is the base's
   * text and the path's: no URL to parse (the transport does that once).
   */
  url(op: Op, key?: string, query?: Record<string, string>, at = this.#preferred): string {
    const [head, tail] = PATHS[op];
    const path = tail === undefined ? head : `${head}${escapeKey(key ?? "")}${tail}`;
    const search = query === undefined ? "" : new URLSearchParams(query).toString();
    return `${this.#hrefs[at] ?? ""}${path}${search === "" ? "" : "?"}${search}`;
  }

  /** moveOn makes the endpoint after at the first to try, if at still is. */
  moveOn(at: number): void {
    if (this.#preferred === at) this.#preferred = (at + 1) % this.#bases.length;
  }

  /**
   * otherStore returns why an answer from origin naming the store id
   * (STORE_HEADER; null: none) is not used, or undefined when it may be: it
   * names the store the first answer that named one named, or none (a
   * server without a store id, an older one, is not checked).
   */
  #otherStore(origin: string, id: string | null): string | undefined {
    if (id === null || id === "") return undefined;
    if (this.#store === undefined) {
      this.#store = { id, origin };
      return undefined;
    }
    if (id === this.#store.id) return undefined;
    return `${origin} serves another store than ${this.#store.origin} (${STORE_HEADER} ${JSON.stringify(id)}, not ${JSON.stringify(this.#store.id)}): ` +
      "the servers listed must be replicas of one store (the same --backend; the embedded store has one server); its answer is not used";
  }

  /**
   * exchange sends op to the endpoints in turn, from the preferred one, until
   * one answers with something other than a 5xx (for an acquire: until one
   * can be connected to); each that fails makes the next preferred. A
   * stream's 200 answer is returned with its body unread. A failure to get
   * an answer is an UnavailableError (the signal's reason, if it was
   * aborted).
   */
  async #exchange(op: Op, key: string | undefined, init: Init, query: Record<string, string> | undefined, stream: boolean): Promise<Answer> {
    const { signal, deadline } = init;
    const what = () => describe(op, key);
    const resend = op !== "acquire"; // every other operation may be sent twice
    const n = this.#bases.length;
    const first = this.#preferred;
    const failed: string[] = [];
    let lost = false; // an attempt may have reached its server
    let cause: unknown;
    for (let i = 0; i < n; i++) {
      const at = (first + i) % n;
      const origin = this.#origins[at] ?? "";
      let res: WireAnswer;
      let byDeadline = false; // the attempt's bound is the deadline's (not its own timeout)
      try {
        // Each attempt is bounded (a stream's opening by its deadline alone),
        // and all of them by the deadline, if given.
        const remaining = deadline === undefined ? Infinity : deadline.until - performance.now();
        if (remaining <= 0) throw new DOMException("no time left", "TimeoutError");
        const attempt = stream ? Infinity : (init.attemptMs ?? this.#timeoutMs);
        byDeadline = deadline !== undefined && remaining <= attempt;
        const timeoutMs = Math.min(remaining, attempt) === Infinity ? undefined : Math.min(remaining, attempt);
        // An object literal, not a spread: a spread costs more than the
        // rest of this loop here (V8 copies property by property).
        res = await this.#send({
          method: init.method,
          headers: init.headers,
          body: init.body,
          signal,
          url: this.url(op, key, query, at),
          stream,
          timeoutMs,
          late: init.late,
        });
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (deadline !== undefined && byDeadline && err instanceof DOMException && err.name === "TimeoutError") {
          this.moveOn(at);
          throw new UnavailableError(`lease: ${what()}: unanswered within ${deadline.ms} ms${tried(failed)}`, { cause: err });
        }
        this.moveOn(at);
        const never = notSent(err);
        if (!never && !resend) {
          throw new UnavailableError(
            `lease: ${what()}: no answer from ${origin}; the outcome is unknown: ${errText(err)}${tried(failed)}`,
            { cause: err },
          );
        }
        failed.push(`${origin}: ${errText(err)}`);
        lost ||= !never;
        cause = err;
        continue;
      }
      // An answer from a server of another store is not used: it is an
      // answer lost (the request may have been done there), as in the Go
      // client.
      const refused = this.#otherStore(origin, res.header(STORE_HEADER));
      if (refused !== undefined) {
        await res.body?.cancel().catch(() => undefined);
        this.moveOn(at);
        if (!resend) throw new UnavailableError(`lease: ${what()}: ${refused}; the outcome is unknown${tried(failed)}`);
        failed.push(refused);
        lost = true;
        continue;
      }
      // A 5xx says this server could not do it (a 501, that no server
      // can): a request that may be sent twice tries the next. An
      // acquire's outcome is then unknown; it is not sent again.
      if (res.status >= 500 && res.status !== 501) {
        this.moveOn(at);
        if (resend && i + 1 < n) {
          failed.push(`${origin}: HTTP ${res.status}`);
          lost = true;
          continue;
        }
      }
      return { res, at, lost };
    }
    const outcome = operations[op].method !== "POST" ? "" : lost ? "; the outcome is unknown" : " (not sent: no server could be reached)";
    const from = n > 1 ? `any of ${n} servers` : (this.#origins[0] ?? "");
    throw new UnavailableError(`lease: ${what()}: no answer from ${from}${outcome}: ${failed.join("; ")}`, { cause });
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
    deadline?: Deadline,
    late?: (answer: WireAnswer) => void,
    attemptMs?: number,
  ): Promise<OK<O>> {
    const init = this.#init(op, "application/json", signal);
    init.deadline = deadline;
    init.late = late;
    init.attemptMs = attemptMs;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const { res, at, lost } = await this.#exchange(op, key, init, query, false);
    const { text } = res;
    const parsed = parseAnswer(res);
    if (res.status !== 200) {
      const err = errorFromBody(res.status, parsed, text, res.header("Retry-After"));
      if (op === "release" && lost) throw mayHaveReleased(err);
      if (op === "acquire" && err instanceof UnavailableError) {
        throw new UnavailableError(`lease: ${describe(op, key)}: ${this.#bases[at]?.origin} answered HTTP ${res.status}; the outcome is unknown: ${err.message}`,
          { status: res.status, retryAfterMs: err.retryAfterMs, cause: err });
      }
      throw err;
    }
    if (parsed === undefined) {
      throw new UnexpectedAnswerError(`lease: ${describe(op, key)}: HTTP 200 whose body is not JSON`, { status: 200 });
    }
    checkNumbers(text, describe(op, key));
    return parsed as OK<O>;
  }

  /**
   * stream opens op's event stream: it returns the 200 answer, its body
   * unread, the endpoint it came from and the heartbeat the answer states
   * (undefined: it states none). An error answer throws its class, an
   * answer that is not an event stream UnexpectedAnswerError, and no
   * answer's head by the deadline an UnavailableError.
   */
  async stream(
    op: Op,
    query: Record<string, string>,
    signal: AbortSignal,
    deadline?: Deadline,
  ): Promise<{ body: ReadableStream<Uint8Array>; at: number; heartbeatMs: number | undefined }> {
    const init = this.#init(op, "text/event-stream", signal);
    init.deadline = deadline;
    const { res, at } = await this.#exchange(op, undefined, init, query, true);
    if (res.status !== 200) throw errorFromBody(res.status, parseAnswer(res), res.text, res.header("Retry-After"));
    const type = res.header("Content-Type") ?? "";
    if (res.body === null || type.split(";")[0]?.trim().toLowerCase() !== "text/event-stream") {
      await res.body?.cancel().catch(() => undefined);
      throw new UnexpectedAnswerError(`lease: ${op}: HTTP 200 of type ${JSON.stringify(type)}, not an event stream`, { status: 200 });
    }
    const hb = res.header(HEARTBEAT_HEADER);
    let heartbeatMs: number | undefined;
    if (hb !== null) {
      heartbeatMs = /^[0-9]{1,7}$/.test(hb) ? Number(hb) : NaN;
      if (!(heartbeatMs >= 10 && heartbeatMs <= 3_600_000)) {
        await res.body.cancel().catch(() => undefined);
        throw new UnexpectedAnswerError(`lease: ${op}: the answer's ${HEARTBEAT_HEADER} ${JSON.stringify(hb)} is not a heartbeat in [10, 3600000] ms`, { status: 200 });
      }
    }
    return { body: res.body, at, heartbeatMs };
  }

  #init(op: Op, accept: string, signal: AbortSignal | undefined): Init {
    const headers: Record<string, string> = { Accept: accept };
    if (this.#auth !== undefined) headers["Authorization"] = this.#auth;
    // A renewed lease answered with only its TTL and expiry: the rest is
    // the request's (renewBatch). A server from before the minimal answer
    // ignores this and answers in full, which renewBatch reads too.
    if (op === "renewBatch") headers["Prefer"] = "return=minimal";
    return { method: operations[op].method, headers, signal };
  }

  /**
   * acquire asks for key. A ticket (32 hex digits, the same in every
   * request of one wait) keeps the wait's place in line from one request to
   * the next; last says no request with it will follow.
   */
  async acquire(
    key: string,
    owner: string,
    ttlMs: number,
    waitMs: number,
    signal?: AbortSignal,
    ticket?: { ticket: string; last: boolean },
  ): Promise<Granted> {
    const body: wire.AcquireRequest = { owner, ttl_ms: ttlMs, wait_ms: waitMs };
    if (ticket !== undefined) {
      body.ticket = ticket.ticket;
      if (ticket.last) body.last = true;
    }
    // A wait its signal ends hangs up; the server releases a lease it grants
    // at that moment, and one it granted just before, whose answer crossed
    // the hang-up, comes here (where the transport can read it) and is
    // given back, as the Go client's AcquireWait does.
    const late = (a: WireAnswer) => {
      if (a.status !== 200) return;
      let g: Granted;
      try {
        checkNumbers(a.text, describe("acquire", key));
        g = granted(key, JSON.parse(a.text) as wire.GrantedLease);
      } catch {
        return;
      }
      this.release(g, AbortSignal.timeout(Math.max(1, g.ttlMs))).catch(() => undefined);
    };
    // Bounded by the client's timeout beyond the wait the server is asked for.
    return granted(key, await this.call("acquire", key, body, signal, undefined, undefined, late, this.#timeoutMs + waitMs));
  }

  async renew(g: Granted, ttlMs: number, signal?: AbortSignal): Promise<Granted> {
    const body = { id: g.id, token: g.token, ttl_ms: ttlMs };
    return granted(g.key, await this.#hedged(ttlMs, signal, (s) => this.call("renew", g.key, body, s)));
  }

  /**
   * #hedged sends a renewal of ttlMs (the shortest of a batch's) with send.
   * On a list of several servers, one still unanswered after a third of the
   * TTL no longer holds it up: the next server is asked beside it, and the
   * first answer (anything but an UnavailableError) is taken, the other
   * request then aborted. A holder renews about a third of its TTL after
   * its last renewal and keeps the lease until about its TTL: a server that
   * takes requests and never answers them (cut from its backend by a link
   * that drops everything) kept the renewal until the safe deadline, and
   * the lease was lost though the next server could renew it. The first
   * request goes on meanwhile, so a server merely slow still renews in time.
   */
  async #hedged<T>(ttlMs: number, signal: AbortSignal | undefined, send: (signal: AbortSignal | undefined) => Promise<T>): Promise<T> {
    if (this.#bases.length < 2 || !Number.isFinite(ttlMs)) return send(signal);
    const first = this.#preferred;
    const stop = new AbortController(); // aborts the request not taken
    const both = signal === undefined ? stop.signal : AbortSignal.any([signal, stop.signal]);
    const runs = [send(both)];
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hedge = new Promise<"hedge">((res) => (timer = setTimeout(() => res("hedge"), ttlMs / 3)));
    try {
      const ended = runs[0]!.then(() => "ended" as const, () => "ended" as const);
      if ((await Promise.race([ended, hedge])) === "ended") return await runs[0]!;
      this.moveOn(first); // unanswered so far: later requests go to the next
      runs.push(send(both));
      return await new Promise<T>((resolve, reject) => {
        let left = runs.length;
        for (const r of runs) {
          r.then(resolve, (err: unknown) => {
            if (!(err instanceof UnavailableError) || --left === 0) reject(err);
          });
        }
      });
    } finally {
      clearTimeout(timer);
      stop.abort(new UnavailableError("lease: renew: answered through another server"));
    }
  }

  /**
   * renewBatch renews every lease of items in one request (POST /v1/renew,
   * at most 256), answering each in order: the renewed lease,
   * or a NotHeldError for one that is no longer held. A failure of the
   * request as a whole throws, as renew does. It asks for the minimal
   * answer (Prefer: return=minimal), each renewed lease as
   * {"ttl_ms","expires_at"} on the request's key, owner, token and id, and
   * reads the full one ({"lease":…}) too, from a server that ignores it. A
   * result that is more than one of these forms, or has one of ttl_ms and
   * expires_at without the other, is an UnexpectedAnswerError.
   */
  async renewBatch(items: readonly { g: Granted; ttlMs: number }[], signal?: AbortSignal): Promise<(Granted | NotHeldError)[]> {
    const body = { renewals: items.map(({ g, ttlMs }) => ({ key: g.key, id: g.id, token: g.token, ttl_ms: ttlMs })) };
    const shortest = Math.min(...items.map(({ ttlMs }) => ttlMs));
    const v = await this.#hedged(shortest, signal, (s) => this.call("renewBatch", undefined, body, s));
    if (typeof v !== "object" || v === null || !Array.isArray(v.results) || v.results.length !== items.length) {
      throw new UnexpectedAnswerError(`lease: renew: a batch of ${items.length} answered without as many results`);
    }
    return v.results.map((r, i) => {
      const g = (items[i] as { g: Granted }).g;
      if (typeof r !== "object" || r === null || Array.isArray(r)) {
        throw new UnexpectedAnswerError(`lease: renew: result ${i} of a batch is not an object`);
      }
      const has = (name: string) => Object.hasOwn(r, name);
      const ttl = has("ttl_ms");
      const expires = has("expires_at");
      if (Number(has("lease")) + Number(has("error")) + Number(ttl || expires) > 1) {
        throw new UnexpectedAnswerError(
          `lease: renew: result ${i} of a batch (${JSON.stringify(g.key)}) is more than one of a lease, a renewal's TTL and expiry, and an error`,
        );
      }
      if (ttl !== expires) {
        throw new UnexpectedAnswerError(`lease: renew: result ${i} of a batch (${JSON.stringify(g.key)}) has one of ttl_ms and expires_at without the other`);
      }
      if ("lease" in r) return granted(g.key, r.lease);
      if ("ttl_ms" in r) return renewedMinimal(g, r);
      if ("error" in r && r.error?.code === "not_held") return new NotHeldError(`lease: renew ${JSON.stringify(g.key)}: ${r.error.message}`);
      throw new UnexpectedAnswerError(`lease: renew: result ${i} of a batch is neither a lease, a renewal's TTL and expiry, nor not_held`);
    });
  }

  async release(g: Granted, signal?: AbortSignal, deadline?: Deadline): Promise<void> {
    const v: unknown = await this.call("release", g.key, { id: g.id, token: g.token }, signal, undefined, deadline);
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

/**
 * mayHaveReleased says of err, the answer to a release sent again after an
 * attempt whose outcome is unknown, that a not_held may be that attempt's
 * doing, as the Go client says it.
 */
export function mayHaveReleased(err: unknown): unknown {
  if (!(err instanceof NotHeldError) || err.message.endsWith(MAY_HAVE_RELEASED)) return err;
  return new NotHeldError(`${err.message}${MAY_HAVE_RELEASED}`, { ...(err.status === undefined ? {} : { status: err.status }), cause: err });
}

const MAY_HAVE_RELEASED = " (an earlier attempt whose answer was lost may have released it)";

/**
 * parseAnswer is an answer's body as JSON, or undefined when it is none: not
 * JSON, or (an error answer) bytes that are not UTF-8, which no API error
 * body has (a proxy's page in another encoding), read by its status.
 */
function parseAnswer(res: WireAnswer): unknown {
  if (res.notUTF8 === true) return undefined;
  try {
    return JSON.parse(res.text) as unknown;
  } catch {
    return undefined;
  }
}

/** describe names a request in an error message: its operation, and its key if it has one. */
function describe(op: Op, key: string | undefined): string {
  return key === undefined ? op : `${op} ${JSON.stringify(key)}`;
}

/** tried names the endpoints tried before, if any. */
function tried(failed: string[]): string {
  return failed.length === 0 ? "" : ` (tried before: ${failed.join("; ")})`;
}

/** errText says what a failed fetch says, with its cause. */
export function errText(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}

/**
 * NUMBER_MEMBER finds the token and ttl_ms members of a JSON text and the
 * number each is written as. In valid JSON a member's name follows "{" or
 * ",": a string that merely contains `"token":` has its quotes escaped.
 */
const NUMBER_MEMBER = /[{,]\s*"(token|ttl_ms)"\s*:\s*(-?[0-9][0-9.eE+-]*)/g;

/**
 * checkNumbers refuses an answer (UnexpectedAnswerError) whose token or
 * ttl_ms is not written as a lease server writes it: digits without sign,
 * fraction or exponent, a token at most 2^53. JSON.parse would read
 * 9007199254740993 as 2^53, another server's token, and 1e0 or 1.0 as 1,
 * which the Go and Python clients refuse; this reads the numbers as written.
 */
export function checkNumbers(text: string, what: string): void {
  NUMBER_MEMBER.lastIndex = 0;
  for (let m = NUMBER_MEMBER.exec(text); m !== null; m = NUMBER_MEMBER.exec(text)) {
    const name = m[1] ?? "";
    const n = m[2] ?? "";
    const plain = /^(0|[1-9][0-9]*)$/.test(n);
    if (!plain || (name === "token" && (n.length > 16 || (n.length === 16 && n > String(MAX_TOKEN))))) {
      throw new UnexpectedAnswerError(
        `lease: ${what}: the answer's ${name} is written ${JSON.stringify(n.slice(0, 40))}, not as a whole number` +
          (name === "token" ? " in [1, 2^53]" : ""),
      );
    }
  }
}

/** info checks a lease the server sent, as the document describes it; key, if given, is the key it must be on. */
export function info(v: wire.Lease | wire.GrantedLease, key: string | undefined): LeaseInfo {
  const bad = (why: string) =>
    new UnexpectedAnswerError(`lease: the server answered a lease that ${why}: ${JSON.stringify(v).slice(0, 200)}`);
  if (typeof v !== "object" || v === null) throw bad("is not an object");
  if (typeof v.key !== "string" || (key !== undefined && v.key !== key)) throw bad(`is not on key ${JSON.stringify(key)}`);
  if (typeof v.owner !== "string") throw bad("has no owner");
  if (!isToken(v.token)) throw bad("has a token outside [1, 2^53]");
  const { ttlMs, expiresAt } = renewable(v, bad);
  return { key: v.key, owner: v.owner, token: v.token, ttlMs, expiresAt };
}

/** renewable checks what a renewal changes of a lease, its ttl_ms and expires_at, throwing bad(why) for either malformed. */
function renewable(v: { ttl_ms: unknown; expires_at: unknown }, bad: (why: string) => Error): { ttlMs: number; expiresAt: Date } {
  if (typeof v.ttl_ms !== "number" || !Number.isInteger(v.ttl_ms) || v.ttl_ms < 0 || v.ttl_ms > MAX_TTL_MS) {
    throw bad("has a ttl_ms outside [0, 86400000]");
  }
  const expiresAt = typeof v.expires_at === "string" ? new Date(v.expires_at) : new Date(NaN);
  if (Number.isNaN(expiresAt.getTime())) throw bad("has an expires_at that is not RFC 3339");
  return { ttlMs: v.ttl_ms, expiresAt };
}

/**
 * renewedMinimal is g renewed as a minimal answer of POST /v1/renew says
 * (Prefer: return=minimal): its key, owner, token and id, which the
 * request sent, with the answer's ttl_ms and expires_at, checked as those
 * of a full answer's lease are.
 */
function renewedMinimal(g: Granted, v: { ttl_ms: unknown; expires_at: unknown }): Granted {
  const bad = (why: string) =>
    new UnexpectedAnswerError(`lease: the server answered a renewal of ${JSON.stringify(g.key)} that ${why}: ${JSON.stringify(v).slice(0, 200)}`);
  const { ttlMs, expiresAt } = renewable(v, bad);
  return { key: g.key, owner: g.owner, token: g.token, ttlMs, expiresAt, id: g.id };
}

function granted(key: string, v: wire.GrantedLease): Granted {
  const l = info(v, key);
  if (typeof v.id !== "string" || !/^[0-9a-fA-F]{32}$/.test(v.id)) {
    throw new UnexpectedAnswerError(`lease: the server answered a lease on ${JSON.stringify(key)} without a well-formed id`);
  }
  return { key: l.key, owner: l.owner, token: l.token, ttlMs: l.ttlMs, expiresAt: l.expiresAt, id: v.id };
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

/**
 * pauseAsked is how long err's answer asked the client to wait before
 * asking again (LeaseError.retryAfterMs), 0 when it did not say.
 */
export function pauseAsked(err: unknown): number {
  return err instanceof LeaseError ? (err.retryAfterMs ?? 0) : 0;
}

/**
 * retried runs f up to 3 times, 25 ms then 100 ms apart, or as long apart
 * as a 5xx's Retry-After asks when that is longer (pauseAsked), while it
 * fails with no answer or a 5xx, and while the pause ends before until
 * (performance.now() scale), if given: one that would end later throws the
 * error at once. The signal ends a pause with its reason.
 */
export async function retried<T>(f: () => Promise<T>, signal?: AbortSignal, until = Infinity): Promise<T> {
  const pauses = [25, 100];
  for (let i = 0; ; i++) {
    try {
      return await f();
    } catch (err) {
      const pause = Math.max(pauses[i] ?? 0, pauseAsked(err));
      if (i >= pauses.length || !isRetryable(err) || signal?.aborted || performance.now() + pause >= until) throw err;
      await sleep(pause, signal);
    }
  }
}
