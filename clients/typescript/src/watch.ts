// client.watch: GET /v1/watch read as an async iterator of typed events.

import { type Api, checkNumbers, DEFAULT_HEARTBEAT_MS, errText, info, type LeaseInfo, retried } from "./api.js";

/**
 * MISSED_HEARTBEATS is how many of the server's heartbeat intervals a watch
 * lets pass with nothing from the server, plus SILENCE_SLACK_MS, before it
 * takes the stream for broken (as leasehttp.MissedHeartbeats and
 * SilenceSlack): a connection that stops delivering without closing is an
 * UnavailableError within about two heartbeats.
 */
export const MISSED_HEARTBEATS = 2;
/** SILENCE_SLACK_MS: see MISSED_HEARTBEATS. */
export const SILENCE_SLACK_MS = 250;
import { errorFromEvent, TooManyWatchersError, UnavailableError, UnexpectedAnswerError } from "./errors.js";
import { type EventStreamMessage, EventStreamParser } from "./sse.js";

/** The kinds of a lease event, as the stream names them. */
export type LeaseEventKind = "held" | "acquired" | "renewed" | "released" | "expired";

/**
 * One event of a watch: first a `held` event per lease under the prefix, in
 * key order, then one `synced`, then each change as the server's backend
 * makes it — in order for any one key, with no order across keys. A lease
 * event carries the lease as it was then, without its secret id.
 */
export type WatchEvent =
  | { readonly kind: "synced" }
  | { readonly kind: LeaseEventKind; readonly lease: LeaseInfo };

/** Every kind a watch event may have. */
export type WatchEventKind = WatchEvent["kind"];

/** How to watch. */
export interface WatchOptions {
  /** Ends the watch: the iteration then ends without an error. */
  readonly signal?: AbortSignal;
  /** Watch exactly the key given as the prefix (GET /v1/watch?key=), not every key starting with it. */
  readonly exact?: boolean;
  /**
   * The server's heartbeat, in milliseconds, until its answer states its
   * own (Lease-Heartbeat-Ms), and for a server that states none; default
   * DEFAULT_HEARTBEAT_MS, lease serve's. The opening of the stream, to the
   * answer's head, is bounded by MISSED_HEARTBEATS of it plus
   * SILENCE_SLACK_MS (the servers tried in turn within it): a server that
   * accepts the connection and never answers (hung, or behind a frozen
   * link) is then an UnavailableError, as a stream gone silent is.
   */
  readonly heartbeatMs?: number;
}

const LEASE_EVENTS: ReadonlySet<string> = new Set<LeaseEventKind>(["held", "acquired", "renewed", "released", "expired"]);

/**
 * decodeWatchEvent turns one message of a watch stream into its event, or
 * throws: the server's `end` event (`error` from a server before it) as its class (an UnavailableError when
 * the stream broke), and a message no lease server sends as an
 * UnexpectedAnswerError, since skipping it would leave the picture
 * incomplete.
 */
export function decodeWatchEvent(prefix: string, msg: EventStreamMessage, exact = false): WatchEvent {
  const what = `watch ${JSON.stringify(prefix)}`;
  if (msg.event === "end" || msg.event === "error") throw errorFromEvent(what, msg.data);
  if (msg.event === "synced") return { kind: "synced" };
  if (!LEASE_EVENTS.has(msg.event)) {
    throw new UnexpectedAnswerError(`lease: ${what}: the stream sent an event ${JSON.stringify(msg.event.slice(0, 100))}, not one of a lease server`);
  }
  let v: unknown;
  try {
    v = JSON.parse(msg.data);
  } catch {
    throw new UnexpectedAnswerError(`lease: ${what}: ${msg.event} event whose data is not JSON: ${JSON.stringify(msg.data.slice(0, 200))}`);
  }
  checkNumbers(msg.data, what);
  const lease = info(v as Parameters<typeof info>[0], undefined);
  if (!lease.key.startsWith(prefix)) {
    throw new UnexpectedAnswerError(`lease: ${what}: ${msg.event} event of key ${JSON.stringify(lease.key)}, outside the prefix`);
  }
  if (exact && lease.key !== prefix) {
    throw new UnexpectedAnswerError(`lease: ${what}: ${msg.event} event of key ${JSON.stringify(lease.key)}, not the key watched`);
  }
  return { kind: msg.event as LeaseEventKind, lease };
}

/** watchKey keeps Watch's constructor to this package. */
export const watchKey: unique symbol = Symbol("lease.Watch");

/**
 * Watch is one watch of the leases under a prefix (LeaseClient.watch): an
 * async iterator of WatchEvents, read from the server's event stream as it
 * is asked for. The stream opens at the first next() — a refusal then
 * throws its class — and is closed by return() (a `break` out of
 * `for await`), by `await using`'s end of scope, or by the signal, which all
 * end the iteration without an error. A stream that breaks (the connection
 * lost, or silent — nothing, not even a heartbeat, for MISSED_HEARTBEATS of
 * the server's heartbeats plus SILENCE_SLACK_MS —, the server closing, its
 * backend's watch cut off) throws an
 * UnavailableError after the events that came before it; the watch does
 * not reopen by itself, since what happened meanwhile is unknown: watch
 * again for the current state. Once the client has given a stream up for
 * silence, a 429 to a watch is an UnavailableError too (its cause the
 * TooManyWatchersError): the server may count that dead stream still. So
 * is a 429 without the API's error body (a rate limit in front of the
 * server, its cause the UnexpectedAnswerError): busy, watch again later,
 * no sooner than its retryAfterMs (the answer's Retry-After) when it has
 * one. The opening is asked again after a 5xx as a get is, no sooner
 * than its Retry-After; a close or the signal ends that pause at once.
 */
export class Watch implements AsyncIterableIterator<WatchEvent, undefined, undefined>, AsyncDisposable {
  /** The prefix watched. */
  readonly prefix: string;

  readonly #stop = new AbortController();
  readonly #run: AsyncGenerator<WatchEvent, undefined, undefined>;

  /** Made by LeaseClient.watch, not by applications. */
  constructor(key: typeof watchKey, api: Api, prefix: string, signal: AbortSignal | undefined, exact = false, heartbeatMs = DEFAULT_HEARTBEAT_MS) {
    if (key !== watchKey) throw new TypeError("lease: a Watch comes from LeaseClient.watch");
    this.prefix = prefix;
    const stop = signal === undefined ? this.#stop.signal : AbortSignal.any([signal, this.#stop.signal]);
    this.#run = run(api, prefix, stop, exact, heartbeatMs);
  }

  /** next returns the next event; see the class for how a watch ends. */
  next(): Promise<IteratorResult<WatchEvent, undefined>> {
    return this.#run.next();
  }

  /** return closes the stream and ends the iteration; `break` calls it. */
  async return(): Promise<IteratorResult<WatchEvent, undefined>> {
    this.#stop.abort();
    return this.#run.return(undefined);
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Closes the stream at the end of an `await using` scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.return();
  }
}

/** run reads the watch's stream until stop aborts or it breaks. */
async function* run(api: Api, prefix: string, stop: AbortSignal, exact: boolean, assumedHeartbeatMs: number): AsyncGenerator<WatchEvent, undefined, undefined> {
  if (stop.aborted) return undefined;
  const what = `watch ${JSON.stringify(prefix)}`;
  let opened: Awaited<ReturnType<Api["stream"]>>;
  try {
    // Until the answer's head comes, the server's heartbeat is unknown:
    // the assumed one bounds the wait, as it would bound a stream's silence.
    const openMs = MISSED_HEARTBEATS * assumedHeartbeatMs + SILENCE_SLACK_MS;
    const deadline = { until: performance.now() + openMs, ms: openMs };
    const query = exact ? { key: prefix } : prefix === "" ? {} : { prefix };
    // Asked again after no answer or a 5xx, as a get is (client.get).
    opened = await retried(() => api.stream("watchLeases", query, stop, deadline), stop, deadline.until);
  } catch (err) {
    if (stop.aborted) return undefined;
    if (err instanceof TooManyWatchersError && api.watchesGivenUp > 0) {
      // A stream given up for silence is one its server cannot tell from
      // a sound one until the connection fails at last (minutes of TCP
      // retransmissions; never behind a proxy that still takes the bytes):
      // it counts meanwhile, so this refusal may be the client's own doing.
      throw new UnavailableError(
        `lease: ${what}: ${err.message} (this client gave up ${api.watchesGivenUp} watch streams for silence, which the server counts until their connections fail; watch again)`,
        { status: 429, retryAfterMs: err.retryAfterMs, cause: err },
      );
    }
    if (err instanceof UnexpectedAnswerError && err.status === 429) {
      // Not the server's bound on watchers (that has its code) but a rate
      // limit in front of it: "too many, try later", a break as in the Go
      // and Python clients.
      const after = err.retryAfterMs === undefined ? "later" : `after ${err.retryAfterMs / 1000} s, as its Retry-After asks`;
      throw new UnavailableError(`lease: ${what}: refused 429 by a rate limit in front of the server (busy: watch again ${after})`, {
        status: 429,
        retryAfterMs: err.retryAfterMs,
        cause: err,
      });
    }
    throw err;
  }
  const reader = opened.body.getReader();
  const parser = new EventStreamParser();
  const broke = (why: string, cause?: unknown): UnavailableError => {
    api.moveOn(opened.at);
    return new UnavailableError(`lease: ${what}: the stream broke: ${why}; watch again for the current state`,
      cause === undefined ? undefined : { cause });
  };
  const silenceMs = MISSED_HEARTBEATS * (opened.heartbeatMs ?? assumedHeartbeatMs) + SILENCE_SLACK_MS;
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>> | "silent";
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        const silent = new Promise<"silent">((res) => {
          timer = setTimeout(() => res("silent"), silenceMs);
        });
        chunk = await Promise.race([reader.read(), silent]);
      } catch (err) {
        if (stop.aborted) return undefined;
        throw broke(errText(err), err);
      } finally {
        clearTimeout(timer);
      }
      if (chunk === "silent") {
        if (stop.aborted) return undefined;
        api.watchesGivenUp++;
        throw broke(`the stream stayed silent for ${MISSED_HEARTBEATS} heartbeat intervals (${silenceMs} ms); the connection is taken for lost`);
      }
      if (chunk.done) {
        parser.end();
        if (stop.aborted) return undefined;
        throw broke("the server ended it without saying why");
      }
      let messages: EventStreamMessage[];
      try {
        messages = parser.push(chunk.value);
      } catch (err) {
        throw new UnexpectedAnswerError(`lease: ${what}: ${errText(err)}`, { cause: err });
      }
      for (const msg of messages) {
        let ev: WatchEvent;
        try {
          ev = decodeWatchEvent(prefix, msg, exact);
        } catch (err) {
          if (err instanceof UnavailableError) api.moveOn(opened.at);
          throw err;
        }
        if (stop.aborted) return undefined;
        yield ev;
      }
    }
  } finally {
    // Closes the connection, so the server counts the watcher gone.
    await reader.cancel().catch(() => undefined);
  }
}
