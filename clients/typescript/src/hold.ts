import { type Api, type Granted, retried } from "./api.js";
import { LeaseLostError, LeaseReleasedError, NotHeldError, UnavailableError } from "./errors.js";

/**
 * How much earlier than the server a client gives a lease up: fraction × TTL
 * + minMs. The default, 1% + 2 ms, is the Go client's.
 */
export interface DriftMargin {
  readonly fraction: number;
  readonly minMs: number;
}

/** DEFAULT_DRIFT_MARGIN is 1% of the TTL plus 2 ms. */
export const DEFAULT_DRIFT_MARGIN: DriftMargin = Object.freeze({ fraction: 0.01, minMs: 2 });

/** RELEASE_TIMEOUT_MS bounds a release: past it the lease expires at its TTL anyway. */
const RELEASE_TIMEOUT_MS = 10_000;

/** marginOf returns the drift margin for a TTL of ttlMs. */
export function marginOf(m: DriftMargin, ttlMs: number): number {
  return m.fraction * ttlMs + m.minMs;
}

/** jittered scales ms by a random factor in [0.9, 1.1). */
function jittered(ms: number): number {
  return ms * (0.9 + 0.2 * Math.random());
}

/**
 * quietly makes an error without capturing a stack: the reason of a
 * released hold's signal is made on every release, and a stack (which would
 * only show release's caller) costs more than the rest of release's own work.
 */
function quietly<E>(make: () => E): E {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return make();
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/** holdKey keeps Hold's constructor to this package. */
export const holdKey: unique symbol = Symbol("lease.Hold");

/**
 * Hold is a lease the client holds and renews in the background, at about a
 * third of its TTL with jitter, retrying failed renewals. Its `signal` is
 * aborted with a LeaseLostError as soon as the client can no longer be sure
 * it holds the lease — when the server says it is gone, or when the safe
 * deadline (send time of the last successful acquire or renew + TTL − drift
 * margin, on this process's monotonic clock) passes without a successful
 * renewal — and with a LeaseReleasedError by release(). Both come before the
 * server could give the lease to anyone else.
 *
 * Pass `token` with every write to the protected resource, and stop working
 * when `signal` aborts. A Hold keeps the process alive until it is released
 * or lost; `await using` releases it at the end of a scope.
 */
export class Hold implements AsyncDisposable {
  /** The key the lease is on. */
  readonly key: string;
  /** The fencing token; renewal never changes it. */
  readonly token: number;
  /** The owner name it was acquired under. */
  readonly owner: string;
  /** Aborted when the lease is lost (reason: LeaseLostError) or released (LeaseReleasedError). */
  readonly signal: AbortSignal;

  readonly #api: Api;
  readonly #ttlMs: number; // asked for; every renewal asks for it again
  readonly #margin: DriftMargin;
  readonly #ctl = new AbortController();
  #lease: Granted;
  #deadline = 0; // performance.now() scale
  #deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  #renewTimer: ReturnType<typeof setTimeout> | undefined;
  #renewing: Promise<void> | undefined;
  #released = false;

  /** Made by LeaseClient.acquire and tryAcquire, not by applications. */
  constructor(key: typeof holdKey, api: Api, lease: Granted, sentAt: number, ttlMs: number, margin: DriftMargin) {
    if (key !== holdKey) throw new TypeError("lease: a Hold comes from LeaseClient.acquire");
    this.#api = api;
    this.#lease = lease;
    this.#ttlMs = ttlMs;
    this.#margin = margin;
    this.key = lease.key;
    this.token = lease.token;
    this.owner = lease.owner;
    this.signal = this.#ctl.signal;
    this.#setDeadline(sentAt);
    if (!this.signal.aborted) this.#schedule(jittered(this.#grantedTTL() / 3) - (performance.now() - sentAt));
  }

  /** When the lease expires on the server's clock, as its last grant or renewal said. */
  get expiresAt(): Date {
    return this.#lease.expiresAt;
  }

  /**
   * The safe deadline as a wall-clock time: the latest instant the client
   * still considers the lease held. The client itself judges it on the
   * monotonic clock.
   */
  get deadline(): Date {
    return new Date(Date.now() + (this.#deadline - performance.now()));
  }

  /**
   * Whether the lease is still held. It judges the safe deadline itself, so
   * it reports the loss even before the deadline's timer has run (after the
   * event loop was blocked), and then aborts the signal.
   */
  get held(): boolean {
    this.#judge();
    return !this.signal.aborted;
  }

  /** throwIfLost throws the signal's reason if the lease is lost or released (see held). */
  throwIfLost(): void {
    this.#judge();
    this.signal.throwIfAborted();
  }

  /**
   * release stops renewal, aborts the signal with a LeaseReleasedError —
   * before the server is told, so work under the lease stops first — and
   * releases the lease on the server. If the lease had already been lost it
   * throws that LeaseLostError; calling it again does nothing.
   */
  async release(): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    this.#judge();
    this.#clearTimers();
    const lost: unknown = this.signal.aborted ? this.signal.reason : undefined;
    if (lost === undefined) this.#ctl.abort(quietly(() => new LeaseReleasedError(this.key, this.token)));
    await this.#renewing;
    let failure: unknown;
    const ctl = new AbortController();
    const timer = setTimeout(
      () => ctl.abort(new UnavailableError(`lease: release unanswered within ${RELEASE_TIMEOUT_MS} ms; the lease expires at its TTL`)),
      RELEASE_TIMEOUT_MS,
    );
    try {
      await retried(() => this.#api.release(this.#lease, ctl.signal), ctl.signal);
    } catch (err) {
      failure = err;
    } finally {
      clearTimeout(timer);
    }
    if (lost !== undefined) throw lost;
    if (failure !== undefined) throw failure;
  }

  /**
   * Releases the lease at the end of an `await using` scope. It never throws:
   * a loss was already signalled, and a lease it could not release expires at
   * its TTL. Call release() to see what happened.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release().catch(() => undefined);
  }

  /** The TTL the lease is judged by: the server's when shorter than the one asked for. */
  #grantedTTL(): number {
    const g = this.#lease.ttlMs;
    return g > 0 && g < this.#ttlMs ? g : this.#ttlMs;
  }

  #setDeadline(sentAt: number): void {
    const ttl = this.#grantedTTL();
    this.#deadline = sentAt + ttl - marginOf(this.#margin, ttl);
    this.#armDeadline();
  }

  #armDeadline(): void {
    clearTimeout(this.#deadlineTimer);
    const left = this.#deadline - performance.now();
    if (left <= 0) {
      this.#lose("no successful renewal before the safe deadline");
      return;
    }
    // A timer may fire a little early by performance.now(); #judge sets it
    // again for the rest.
    this.#deadlineTimer = setTimeout(() => {
      this.#deadlineTimer = undefined;
      this.#judge();
    }, left);
  }

  /** #judge ends the lease if its deadline has passed. */
  #judge(): void {
    if (this.signal.aborted) return;
    if (performance.now() >= this.#deadline) {
      this.#lose("no successful renewal before the safe deadline");
    } else if (this.#deadlineTimer === undefined && !this.#released) {
      this.#armDeadline();
    }
  }

  #lose(why: string, cause?: unknown): void {
    if (this.signal.aborted) return;
    this.#clearTimers();
    const msg = `lease: lost ${JSON.stringify(this.key)} (token ${this.token}): ${why}`;
    this.#ctl.abort(new LeaseLostError(this.key, this.token, msg, cause === undefined ? undefined : { cause }));
  }

  #clearTimers(): void {
    clearTimeout(this.#deadlineTimer);
    clearTimeout(this.#renewTimer);
    this.#deadlineTimer = undefined;
    this.#renewTimer = undefined;
  }

  #schedule(ms: number): void {
    clearTimeout(this.#renewTimer);
    this.#renewTimer = setTimeout(() => {
      this.#renewTimer = undefined;
      this.#renewing = this.#renew().finally(() => {
        this.#renewing = undefined;
      });
    }, Math.max(0, ms));
  }

  async #renew(): Promise<void> {
    if (this.signal.aborted) return;
    const sent = performance.now();
    const cur = this.#lease;
    // The request ends with the hold, and at the deadline at the latest:
    // an answer after it could not be used.
    const req = new AbortController();
    const stop = () => req.abort(this.signal.reason);
    this.signal.addEventListener("abort", stop, { once: true });
    const cutoff = setTimeout(
      () => req.abort(new UnavailableError("lease: renewal unanswered at the safe deadline")),
      Math.max(0, this.#deadline - sent),
    );
    try {
      const r = await this.#api.renew(cur, this.#ttlMs, req.signal);
      if (this.signal.aborted) return;
      if (r.key !== cur.key || r.token !== cur.token || r.id.toLowerCase() !== cur.id.toLowerCase()) {
        this.#lose(`the renewal was answered with another lease (token ${r.token}); a lease keeps its key, token and id`);
        return;
      }
      if (performance.now() >= this.#deadline) {
        this.#lose("the renewal's answer came after the safe deadline");
        return;
      }
      this.#lease = r;
      this.#setDeadline(sent);
      this.#schedule(jittered(this.#grantedTTL() / 3) - (performance.now() - sent));
    } catch (err) {
      if (this.signal.aborted) return;
      if (err instanceof NotHeldError) {
        this.#lose("the server no longer holds it", err);
        return;
      }
      // Try again soon; the deadline ends the lease if we never get through.
      this.#schedule(jittered(this.#grantedTTL() / 10));
    } finally {
      clearTimeout(cutoff);
      this.signal.removeEventListener("abort", stop);
    }
  }
}
