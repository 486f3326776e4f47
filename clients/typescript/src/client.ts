import { hostname } from "node:os";

import {
  Api,
  checkInt,
  checkKey,
  checkName,
  checkPage,
  DEFAULT_TIMEOUT_MS,
  type Granted,
  type LeaseInfo,
  type LeasePage,
  MAX_TTL_MS,
  MAX_WAIT_MS,
  MIN_TTL_MS,
  type PageOptions,
  retried,
  sleep,
} from "./api.js";
import { HeldError, InvalidError, NotFoundError, NotHeldError, UnavailableError } from "./errors.js";
import { DEFAULT_DRIFT_MARGIN, type DriftMargin, Hold, holdKey, marginOf, Renewer } from "./hold.js";
import { Watch, watchKey, type WatchOptions } from "./watch.js";

/** What a LeaseClient talks to, and as whom. */
export interface LeaseClientOptions {
  /**
   * The server's URL, e.g. http://127.0.0.1:7420 (a path prefix is kept), or
   * several servers in front of one backend, tried in turn: a request that
   * cannot connect to one, or that one answers 503 (or another 5xx), goes to
   * the next, and the client keeps to the one that answered. An acquire is
   * sent to the next only if it never reached the one before: one whose
   * answer was lost, or that was answered 503, has an unknown outcome.
   */
  readonly server: string | URL | readonly (string | URL)[];
  /** The bearer token the server's --auth-tokens-file lists, if it has one. */
  readonly token?: string;
  /** The owner name shown to other contenders; default HOSTNAME-PID. It proves nothing. */
  readonly owner?: string;
  /** How much earlier than the server the client gives a lease up; default 1% + 2 ms. */
  readonly driftMargin?: DriftMargin;
  /** The fetch to send requests with; default: keep-alive node:http in Node.js, globalThis.fetch elsewhere. */
  readonly fetch?: typeof globalThis.fetch;
  /**
   * How long one request may go unanswered, beyond the wait an acquire asks
   * the server for, before it is given up as an answer lost (the next
   * server is tried; an acquire's outcome is then unknown): 1 ms to 1 h,
   * default DEFAULT_TIMEOUT_MS (10 s, the Go client's). A watch's opening is
   * bounded by its heartbeat instead.
   */
  readonly timeoutMs?: number;
}

/** How to acquire. */
export interface AcquireOptions {
  /** The lease's time to live, 10 ms to 24 h. */
  readonly ttlMs: number;
  /**
   * How long to wait for a held key, first come first served; then a
   * HeldError naming the holder. Default: until `signal` aborts. 0 tries once.
   */
  readonly waitMs?: number;
  /** Ends the wait; the error thrown is its reason. */
  readonly signal?: AbortSignal;
}

/** How to try once. */
export interface TryAcquireOptions {
  readonly ttlMs: number;
  readonly signal?: AbortSignal;
}

/** WAIT_CHUNK_MS is the longest wait_ms one request asks for: a server waits at most 30 s anyway. */
const WAIT_CHUNK_MS = 30_000;

/**
 * MAX_PACE_MS is the longest pause between the requests of a wait that a
 * server answers at once; an answer that took as long (or half the wait
 * asked for) means the server waited, and the wait asks again at once.
 */
const MAX_PACE_MS = 500;

/** LEAVE_TIMEOUT_MS bounds the request that ends a wait left in line (leaveLine). */
const LEAVE_TIMEOUT_MS = 10_000;

/** defaultOwner is HOSTNAME-PID, as the Go client's lease.DefaultOwner. */
function defaultOwner(): string {
  let host = "";
  try {
    host = hostname();
  } catch {
    // no host name: say so
  }
  return `${host === "" ? "unknown-host" : host}-${process.pid}`;
}

/**
 * LeaseClient acquires leases from a lease server (`lease serve`) and reads
 * them. It holds no connection of its own (fetch pools them) and may be
 * shared.
 */
export class LeaseClient {
  /** The owner name acquisitions are made under. */
  readonly owner: string;
  readonly #api: Api;
  readonly #renewer: Renewer; // one timer and one request per batch for all the holds
  readonly #margin: DriftMargin;

  constructor(options: LeaseClientOptions) {
    if (typeof options !== "object" || options === null) throw new InvalidError("lease: LeaseClient needs options with a server URL");
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    checkInt("timeoutMs", timeoutMs, 1, 3_600_000);
    this.#api = new Api(options.server, options.token, options.fetch, timeoutMs);
    this.#renewer = new Renewer(this.#api);
    this.owner = options.owner ?? defaultOwner();
    checkName("owner", this.owner);
    const m = options.driftMargin ?? DEFAULT_DRIFT_MARGIN;
    if (!(m.fraction >= 0 && m.fraction < 0.5) || !(m.minMs >= 0 && Number.isFinite(m.minMs))) {
      throw new InvalidError(`lease: drift margin needs 0 <= fraction < 0.5 and minMs >= 0, got ${m.fraction} and ${m.minMs}`);
    }
    this.#margin = { fraction: m.fraction, minMs: m.minMs };
  }

  /** The server's base URL; of several, the one requests go to first (the one that last answered). */
  get server(): URL {
    return this.#api.base;
  }

  /** The base URLs of every server, in the order given. */
  get servers(): URL[] {
    return this.#api.bases;
  }

  #check(key: string, ttlMs: number): void {
    checkKey(key);
    checkInt("ttlMs", ttlMs, MIN_TTL_MS, MAX_TTL_MS);
    const m = marginOf(this.#margin, ttlMs);
    if (m > ttlMs / 2) {
      throw new InvalidError(`lease: ttlMs ${ttlMs} is too short for the drift margin of ${m} ms (at most half of it)`);
    }
  }

  /**
   * acquire waits until it holds key for ttlMs, up to waitMs (default: until
   * signal aborts), and returns the Hold, which renews itself. A key still
   * held when the wait runs out is a HeldError naming the holder; any other
   * error ends the wait at once.
   */
  async acquire(key: string, options: AcquireOptions): Promise<Hold> {
    const { ttlMs, waitMs, signal } = options;
    this.#check(key, ttlMs);
    if (waitMs !== undefined) checkInt("waitMs", waitMs, 0, Number.MAX_SAFE_INTEGER);
    const until = waitMs === undefined ? Infinity : performance.now() + waitMs;
    // One ticket for every request of this wait: a server keeps the wait's
    // place in line from one request to the next.
    const ticket = newTicket();
    let ticketed = false; // a request has carried the ticket: the server may keep the wait's place
    // The server may keep the wait in line for its grace while no request
    // of it is there (it cut the last one short at its max wait): a wait
    // that ends then leaves the line rather than stall the next waiter.
    let inLine = false;
    let backoff = 5;
    for (;;) {
      if (signal?.aborted) {
        if (inLine) this.#leaveLine(key, ttlMs, ticket);
        throw signal.reason;
      }
      const left = until - performance.now();
      // Once a request has carried the ticket, every request carries it,
      // the last one too (at least 1 ms: a wait_ms of 0 tries once and
      // leaves the ticket alone), so that the last takes the wait over and
      // ends it rather than leave it in line for the server's grace.
      const chunk = Math.max(ticketed ? 1 : 0, Math.ceil(Math.min(left, WAIT_CHUNK_MS, MAX_WAIT_MS)));
      const sent = performance.now();
      let g: Granted;
      const last = left <= Math.min(WAIT_CHUNK_MS, MAX_WAIT_MS);
      try {
        ticketed ||= chunk > 0;
        g = await this.#api.acquire(key, this.owner, ttlMs, chunk, signal, chunk > 0 ? { ticket, last } : undefined);
      } catch (err) {
        const took = performance.now() - sent;
        // A held answer leaves the wait in line unless it ran its whole
        // last wait; a lost answer (the connection cut) may have too. (An
        // abort in flight is a hang-up, which ends the server's wait.)
        inLine = chunk > 0 && (err instanceof HeldError ? !(last && took >= chunk) : answerLost(err, signal));
        if (!(err instanceof HeldError) || performance.now() >= until) {
          if (inLine) this.#leaveLine(key, ttlMs, ticket);
          throw err;
        }
        if (took >= Math.min(chunk / 2, MAX_PACE_MS)) {
          // The server waited (a server whose max wait is shorter than the
          // chunk ends each request at it and keeps the ticket in line):
          // ask again at once, as the Go client does.
          backoff = 5;
          continue;
        }
        // The server answered at once: it does not wait (--max-wait 0), or
        // not long. Pace the asking.
        try {
          await sleep(Math.min(jittered(backoff), Math.max(0, until - performance.now())), signal);
        } catch (reason) {
          // Aborted while no request of the wait was at the server, which
          // may keep its place in line (and grant it the key) until its
          // grace ends: take the wait over and end it.
          this.#leaveLine(key, ttlMs, ticket);
          throw reason;
        }
        backoff = Math.min(backoff * 2, MAX_PACE_MS);
        continue;
      }
      inLine = false;
      const h = await this.#hold(g, sent, ttlMs);
      if (h !== undefined) return h;
      // It expired before we could use it: queue again.
    }
  }

  /**
   * leaveLine ends, in the background, the wait that ticket keeps in line
   * at the server between two of its requests: a request with the ticket,
   * a wait of 1 ms and last, which takes the wait over and leaves the line
   * at its end. A lease the wait was granted comes back with it and is
   * released. (A server that kept no such wait, as one that does not wait,
   * tries once for it: a lease so granted is released as well.)
   */
  #leaveLine(key: string, ttlMs: number, ticket: string): void {
    this.#api
      .acquire(key, this.owner, ttlMs, 1, AbortSignal.timeout(LEAVE_TIMEOUT_MS), { ticket, last: true })
      .then((g) => this.#giveBack(g), () => undefined);
  }

  /**
   * tryAcquire tries once: a held key is a HeldError at once, naming the
   * holder when the server knows.
   */
  async tryAcquire(key: string, options: TryAcquireOptions): Promise<Hold> {
    const { ttlMs, signal } = options;
    this.#check(key, ttlMs);
    const sent = performance.now();
    const g = await this.#api.acquire(key, this.owner, ttlMs, 0, signal);
    const h = await this.#hold(g, sent, ttlMs);
    if (h === undefined) {
      throw new UnavailableError(`lease: ${JSON.stringify(key)} was granted (token ${g.token}) but expired before its answer could be used`);
    }
    return h;
  }

  /**
   * #hold makes a Hold of g, granted to a request sent at sent. A grant
   * that came long after its request (a wait) is renewed at once, so that
   * its deadline, counted from the send time, is worth having; undefined
   * means it was gone by then. A grant whose safe deadline had passed when it
   * arrived is released, and is an UnavailableError: a lease the client
   * cannot vouch for is no lease.
   */
  async #hold(g: Granted, sent: number, ttlMs: number): Promise<Hold | undefined> {
    if (performance.now() - sent >= ttlMs / 3) {
      const again = performance.now();
      try {
        const r = await this.#api.renew(g, ttlMs, AbortSignal.timeout(ttlMs));
        if (r.token !== g.token || r.key !== g.key) throw new UnavailableError("lease: renewal answered with another lease");
        g = r;
        sent = again;
      } catch (err) {
        if (err instanceof NotHeldError) return undefined;
        await this.#giveBack(g);
        throw err;
      }
    }
    const h = new Hold(holdKey, this.#api, this.#renewer, g, sent, ttlMs, this.#margin);
    if (!h.held) {
      await this.#giveBack(g);
      throw new UnavailableError(
        `lease: ${JSON.stringify(g.key)} was granted (token ${g.token}), but the answer came ` +
          `${Math.round(performance.now() - sent)} ms after the request, past the safe deadline of a ${ttlMs} ms lease; released it`,
      );
    }
    return h;
  }

  async #giveBack(g: Granted): Promise<void> {
    await this.#api.release(g, AbortSignal.timeout(Math.max(1, g.ttlMs))).catch(() => undefined);
  }

  /**
   * get returns the unexpired lease on key, or undefined if there is none.
   * No answer or a 5xx is asked again twice, after 25 ms and 100 ms or the
   * answer's Retry-After when longer (UnavailableError.retryAfterMs); the
   * signal ends the pause.
   */
  async get(key: string, options?: { signal?: AbortSignal }): Promise<LeaseInfo | undefined> {
    checkKey(key);
    try {
      return await retried(() => this.#api.get(key, options?.signal), options?.signal);
    } catch (err) {
      if (err instanceof NotFoundError) return undefined;
      throw err;
    }
  }

  /**
   * list returns one page of the unexpired leases whose keys start with prefix (default: all), in
   * byte order of their keys: at most options.limit (default DEFAULT_PAGE_LIMIT), after the cursor
   * options.after (a page's next). Pass each page's next as after until it is "": that walk sees every
   * lease held throughout it exactly once. all() does the walk. It is asked
   * again after no answer or a 5xx as get is.
   */
  async list(prefix = "", options?: PageOptions & { signal?: AbortSignal | undefined }): Promise<LeasePage> {
    if (prefix !== "") checkName("prefix", prefix);
    const page = { limit: options?.limit, after: options?.after };
    checkPage(page);
    return retried(() => this.#api.list(prefix, page, options?.signal), options?.signal);
  }

  /**
   * all walks every page of list under prefix (default: all), yielding each lease in byte order of its
   * key: `for await (const l of client.all("jobs/")) ...`. A lease held throughout the walk is seen
   * exactly once; each page is fetched when the loop reaches it. A page that
   * does not move past the one before (a proxy that drops after=) throws an
   * UnavailableError rather than be walked again.
   */
  async *all(
    prefix = "",
    options?: { limit?: number | undefined; signal?: AbortSignal | undefined },
  ): AsyncGenerator<LeaseInfo, void, undefined> {
    let after = "";
    let last = ""; // the key after names, as a string of its UTF-8 bytes (which compares in byte order)
    const stuck = () =>
      new UnavailableError(`lease: list ${JSON.stringify(prefix)}: the server's page does not move past ${JSON.stringify(after)} (a proxy that drops the query?)`);
    for (;;) {
      const page = await this.list(prefix, { limit: options?.limit, after, signal: options?.signal });
      // A page that does not move on (a broken server, a proxy that drops
      // after=) would be walked again and again, as the Go and Python
      // clients see.
      const first = page.leases[0];
      if (after !== "" && first !== undefined && byteString(first.key) <= last) throw stuck();
      yield* page.leases;
      if (page.next === "") return;
      const next = cursorKey(page.next);
      if (next === undefined || next <= last) throw stuck();
      after = page.next;
      last = next;
    }
  }

  /**
   * watch watches the leases whose keys start with prefix (default: all):
   * `for await (const ev of client.watch("jobs/"))` yields a `held` event
   * per lease, then `synced`, then each change. The stream opens at the
   * first step, trying the servers as a get does; a refusal throws its
   * class (TooManyWatchersError, UnsupportedError, UnauthorizedError,
   * ForbiddenError). `break`, `await using` or the signal close it without
   * an error; a break of the stream throws an UnavailableError, and a new
   * watch starts again from the current state. With `exact: true`, prefix
   * is one key watched exactly (GET /v1/watch?key=): keys that merely start
   * with it never reach the stream. See Watch.
   */
  watch(prefix = "", options?: WatchOptions): Watch {
    if (prefix !== "" || options?.exact === true) checkName(options?.exact === true ? "key" : "prefix", prefix);
    const hb = options?.heartbeatMs;
    if (hb !== undefined && !(Number.isInteger(hb) && hb >= 10 && hb <= 3_600_000)) {
      throw new InvalidError(`lease: heartbeatMs ${String(hb)} is not a whole number of milliseconds in [10, 3600000]`);
    }
    return new Watch(watchKey, this.#api, prefix, options?.signal, options?.exact === true, hb);
  }
}

/** byteString is s's UTF-8 bytes as a string of one char each: such strings compare in byte order. */
function byteString(s: string): string {
  return String.fromCharCode(...new TextEncoder().encode(s));
}

/** cursorKey is the key a page cursor names (unpadded base64url of its bytes) as byteString gives it, or undefined. */
function cursorKey(cursor: string): string | undefined {
  try {
    return atob(cursor.replaceAll("-", "+").replaceAll("_", "/"));
  } catch {
    return undefined;
  }
}

function jittered(ms: number): number {
  return ms * (0.9 + 0.2 * Math.random());
}

/**
 * answerLost reports whether err is an acquire's answer lost on its way
 * (the request sent, the connection cut): not an answer, not a request
 * that never left, not the caller's abort (whose hang-up the server sees).
 */
function answerLost(err: unknown, signal: AbortSignal | undefined): boolean {
  return err instanceof UnavailableError && err.status === undefined && err.cause !== undefined && !signal?.aborted;
}

/** newTicket returns 128 random bits as 32 hex digits: a wait's ticket. */
function newTicket(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
