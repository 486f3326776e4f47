import { type Api, type Granted, mayHaveReleased, pauseAsked, retried } from "./api.js";
import { ForbiddenError, InvalidError, LeaseLostError, LeaseReleasedError, NotHeldError, UnavailableError } from "./errors.js";

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

/**
 * RELEASE_TIMEOUT_MS bounds a release, and so does the lease's own life
 * (Hold.release): past either, the lease expires at its TTL anyway.
 */
const RELEASE_TIMEOUT_MS = 10_000;

/** marginOf returns the drift margin for a TTL of ttlMs. */
export function marginOf(m: DriftMargin, ttlMs: number): number {
  return m.fraction * ttlMs + m.minMs;
}


/**
 * quietly makes an error without capturing a stack: the reason of a
 * released hold's signal, whose stack would only show release's caller.
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

/** RELEASED stands for a release's reason until it is made (Hold.#why). */
const RELEASED: unique symbol = Symbol("released");

/** holdKey keeps Hold's constructor to this package. */
export const holdKey: unique symbol = Symbol("lease.Hold");

/**
 * Hold is a lease the client holds and renews in the background, at about a
 * third of its TTL with jitter (or a little earlier, in one POST /v1/renew
 * with the client's other holds that fall due close by: see Renewer),
 * retrying failed renewals. Its `signal` is
 * aborted with a LeaseLostError as soon as the client can no longer be sure
 * it holds the lease — when the server says it is gone, or when the safe
 * deadline (send time of the last successful acquire or of the request that
 * last renewed it + TTL − drift margin, on this process's monotonic clock)
 * passes without a successful
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

  readonly #api: Api;
  readonly #renewer: Renewer;
  readonly #ticket: Ticket;
  readonly #ttlMs: number; // asked for; every renewal asks for it again
  readonly #margin: DriftMargin;
  // The hold ends once: lost or released. Its signal's controller is made
  // when the signal is first asked for, as Go's context makes its Done
  // channel (an AbortController and the event of its abort cost more than
  // the rest of a release's own work), and the reason of a release when
  // first needed.
  #ctl: AbortController | undefined;
  #ended = false;
  #reason: unknown = undefined; // the end's reason, or RELEASED until made
  #lease: Granted;
  #deadline = 0; // performance.now() scale
  #releasing: Promise<void> | undefined; // the first release's outcome

  /** Made by LeaseClient.acquire and tryAcquire, not by applications. */
  constructor(key: typeof holdKey, api: Api, renewer: Renewer, lease: Granted, sentAt: number, ttlMs: number, margin: DriftMargin) {
    if (key !== holdKey) throw new TypeError("lease: a Hold comes from LeaseClient.acquire");
    this.#api = api;
    this.#renewer = renewer;
    this.#lease = lease;
    this.#ttlMs = ttlMs;
    this.#margin = margin;
    this.key = lease.key;
    this.token = lease.token;
    this.owner = lease.owner;
    this.#ticket = {
      early: 0,
      due: 0,
      queued: false,
      deadline: () => this.#deadline,
      judge: () => this.#judge(),
      lease: () => this.#lease,
      ttlMs: this.#ttlMs,
      renewed: (sent, r, j) => this.#renewed(sent, r, j),
    };
    this.#setDeadline(sentAt);
    if (!this.#ended) {
      renewer.add(this.#ticket);
      renewer.schedule(this.#ticket, sentAt, this.#grantedTTL() / 3, Math.random());
    }
  }

  /** Aborted when the lease is lost (reason: LeaseLostError) or released (LeaseReleasedError). */
  get signal(): AbortSignal {
    if (this.#ctl === undefined) {
      this.#ctl = new AbortController();
      if (this.#ended) this.#ctl.abort(this.#why());
    }
    return this.#ctl.signal;
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
    return !this.#ended;
  }

  /** throwIfLost throws the signal's reason if the lease is lost or released (see held). */
  throwIfLost(): void {
    this.#judge();
    if (this.#ended) throw this.#why();
  }

  /**
   * release stops renewal, aborts the signal with a LeaseReleasedError —
   * before the server is told, so work under the lease stops first — and
   * releases the lease on the server. If the lease had already been lost it
   * throws that LeaseLostError at once and sends nothing, as the Python
   * client does: the server lets the lease go within the drift margin of
   * the deadline, or has already, and the loss most often comes from a
   * server that does not answer, which a release would wait for. A release
   * unanswered gives up (an UnavailableError) after 10 s, or sooner when
   * the lease would have expired by then: the send time of its last
   * acquire or renewal + TTL. Calling it again waits for the first call to
   * end, and does nothing more.
   */
  release(): Promise<void> {
    if (this.#releasing !== undefined) return this.#releasing.then(() => undefined, () => undefined);
    this.#releasing = this.#release();
    return this.#releasing;
  }

  async #release(): Promise<void> {
    this.#judge();
    this.#renewer.remove(this.#ticket);
    if (this.#ended) throw this.#why();
    this.#end(RELEASED);
    // A renewal in flight is answered to nobody: its batch's answer for this
    // hold is ignored, and the server refuses it if it comes after the
    // release.
    // No longer than the lease would live without it (send time of the
    // last acquire or renewal + TTL; the server's expiry is no earlier):
    // past that the server has let it go by itself.
    const ttl = this.#grantedTTL();
    const ms = Math.max(1, Math.min(RELEASE_TIMEOUT_MS, Math.ceil(this.#deadline + marginOf(this.#margin, ttl) - performance.now())));
    const deadline = { until: performance.now() + ms, ms };
    let uncertain = false; // an attempt failed whose outcome is unknown
    await retried(async () => {
      try {
        await this.#api.release(this.#lease, undefined, deadline);
      } catch (err) {
        if (uncertain) throw mayHaveReleased(err);
        uncertain = err instanceof UnavailableError;
        throw err;
      }
    }, undefined, deadline.until);
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
    this.#judge();
  }

  /** #end ends the hold with reason (RELEASED for a release), aborting its signal if it was made. */
  #end(reason: unknown): void {
    this.#ended = true;
    this.#reason = reason;
    this.#ctl?.abort(this.#why());
  }

  /** #why is the end's reason; a release's LeaseReleasedError is made on first use. */
  #why(): unknown {
    if (this.#reason === RELEASED) this.#reason = quietly(() => new LeaseReleasedError(this.key, this.token));
    return this.#reason;
  }

  /** #judge ends the lease if its deadline has passed; the Renewer's timer calls it at the deadline. */
  #judge(): void {
    if (this.#ended) return;
    if (performance.now() >= this.#deadline) this.#lose("no successful renewal before the safe deadline");
  }

  #lose(why: string, cause?: unknown): void {
    if (this.#ended) return;
    this.#renewer.remove(this.#ticket);
    const msg = `lease: lost ${JSON.stringify(this.key)} (token ${this.token}): ${why}`;
    this.#end(new LeaseLostError(this.key, this.token, msg, cause === undefined ? undefined : { cause }));
  }

  /**
   * #renewed records the outcome of a renewal of the lease sent at sent:
   * the renewed lease, a NotHeldError, or another failure (retried). j is
   * the jitter of the next renewal.
   */
  #renewed(sent: number, r: Granted | NotHeldError | { failed: unknown }, j: number): void {
    if (this.#ended) return;
    const cur = this.#lease;
    if (r instanceof NotHeldError) {
      this.#lose("the server no longer holds it", r);
      return;
    }
    if ("failed" in r) {
      // Try again soon, or as late as the answer's Retry-After asks; the
      // deadline ends the lease if we never get through.
      this.#renewer.retry(this.#ticket, performance.now(), this.#grantedTTL() / 3, j, pauseAsked(r.failed));
      return;
    }
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
    if (!this.#ended) this.#renewer.schedule(this.#ticket, sent, this.#grantedTTL() / 3, j);
  }
}

/** A hold as the Renewer sees it. */
export interface Ticket {
  early: number; // performance.now() scale: may join a batch from then
  due: number; // renews by then
  queued: boolean; // waiting for a renewal (not in flight)
  readonly deadline: () => number;
  readonly judge: () => void;
  readonly lease: () => Granted;
  readonly ttlMs: number;
  readonly renewed: (sent: number, r: Granted | NotHeldError | { failed: unknown }, j: number) => void;
}

/**
 * refTimer refs or unrefs a timer where the runtime can (Node.js, Bun),
 * and reports whether it could.
 */
function refTimer(timer: ReturnType<typeof setTimeout>, ref: boolean): boolean {
  const t = timer as { ref?: () => unknown; unref?: () => unknown };
  if (typeof t.ref !== "function" || typeof t.unref !== "function") return false;
  if (ref) t.ref();
  else t.unref();
  return true;
}

/** MAX_RENEW_BATCH is the most renewals one POST /v1/renew takes. */
const MAX_RENEW_BATCH = 256;

/** RENEW_ALONE_AT_ONCE bounds the lone renewals in flight for a batch refused whole (Renewer.#renewEach). */
const RENEW_ALONE_AT_ONCE = 8;

/**
 * Renewer renews a LeaseClient's holds on one timer, set for the earliest
 * of their renewals and safe deadlines. Each hold's window for its next
 * renewal opens 0.7 × TTL/3 after the send time of its last one and closes
 * 0.9–1.1 × TTL/3 after it, where a lone hold renewed before batching; when
 * the timer fires for the first window to close, every hold whose window is
 * open is renewed with it, up to 256 in one POST /v1/renew. A hold is thus
 * never renewed later than before, and the holds of one batch share its
 * send time and its jitter, so they fall due together again. Each is judged
 * by its own answer and deadline: one the server refuses is lost alone, a
 * batch refused whole for one of its renewals (403, 400) is asked again one
 * renewal each at once, and a batch that fails as a whole otherwise is
 * retried for each of its holds after TTL/10.
 */
export class Renewer {
  readonly #api: Api;
  readonly #holds = new Set<Ticket>();
  // One timer, set for timerAt: at or before the earliest renewal or
  // deadline of the holds. A hold that falls due later than it changes
  // nothing; when the timer fires, it renews what is open and is set for
  // the earliest that remains. With no hold left it stays, unref'd where
  // the runtime can (so that it keeps no process alive), and a new hold
  // refs it again: a hold taken and released costs no timer of its own.
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;
  #settling = false; // handing out a batch's answers: arm once, after

  constructor(api: Api) {
    this.#api = api;
  }

  /** add starts watching t's deadline. */
  add(t: Ticket): void {
    this.#holds.add(t);
    if (this.#holds.size === 1 && this.#timer !== undefined) refTimer(this.#timer, true);
  }

  /** remove forgets t: released or lost. */
  remove(t: Ticket): void {
    if (!this.#holds.delete(t) || this.#holds.size > 0 || this.#timer === undefined) return;
    if (!refTimer(this.#timer, false)) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#timerAt = Infinity;
    }
  }

  /** schedule queues t's next renewal after one sent at sent, renewing every intervalMs; j in [0, 1) jitters it. */
  schedule(t: Ticket, sent: number, intervalMs: number, j: number): void {
    t.due = sent + intervalMs * (0.9 + 0.2 * j);
    t.early = sent + intervalMs * 0.7;
    t.queued = true;
    if (!this.#settling) this.#need(Math.min(t.due, t.deadline()));
  }

  /**
   * retry queues another attempt after a renewal that failed at now, after
   * about a tenth of the TTL, or askedMs (its answer's Retry-After) when
   * that is longer and t's safe deadline leaves room after it for one more
   * attempt as far apart: the pause is cut short there, since waiting past
   * it would give up a lease the server may still renew.
   */
  retry(t: Ticket, now: number, intervalMs: number, j: number, askedMs = 0): void {
    const wait = intervalMs * 0.3 * (0.9 + 0.2 * j);
    const asked = Math.min(askedMs, t.deadline() - now - wait);
    t.due = now + Math.max(wait, asked);
    t.early = now + Math.max(wait * 0.8, asked);
    t.queued = true;
    if (!this.#settling) this.#need(Math.min(t.due, t.deadline()));
  }

  /** #need makes the timer fire by at: it is set again only if it would fire later. */
  #need(at: number): void {
    if (at < this.#timerAt) this.#set(at);
  }

  /** #arm sets the timer for the earliest renewal or deadline of every hold, or clears it with none left. */
  #arm(): void {
    let at = Infinity;
    for (const t of this.#holds) at = Math.min(at, t.queued ? t.due : Infinity, t.deadline());
    this.#set(at);
  }

  #set(at: number): void {
    if (at === this.#timerAt && this.#timer !== undefined) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = at;
    if (at === Infinity) return;
    // Whole milliseconds, rounded up: Node.js keeps one list of timers per
    // duration, and a timer never fires early.
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, Math.ceil(at - performance.now())));
  }

  #fire(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    const now = performance.now();
    const open: Ticket[] = [];
    for (const t of [...this.#holds]) {
      t.judge(); // a deadline passed: lost (and removed)
      if (this.#holds.has(t) && t.queued && t.early <= now) {
        t.queued = false;
        open.push(t);
      }
    }
    for (let i = 0; i < open.length; i += MAX_RENEW_BATCH) void this.#renew(open.slice(i, i + MAX_RENEW_BATCH));
    this.#arm();
  }

  /** #renewEach renews items one request each, RENEW_ALONE_AT_ONCE at a time, answering each as a batch's result. */
  async #renewEach(
    items: readonly { g: Granted; ttlMs: number }[],
    signal: AbortSignal,
  ): Promise<(Granted | NotHeldError | { failed: unknown })[]> {
    const results: (Granted | NotHeldError | { failed: unknown })[] = [];
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < items.length; i = next++) {
        const it = items[i] as { g: Granted; ttlMs: number };
        results[i] = await this.#api.renew(it.g, it.ttlMs, signal).catch((err: unknown) => (err instanceof NotHeldError ? err : { failed: err }));
      }
    };
    await Promise.all(Array.from({ length: Math.min(RENEW_ALONE_AT_ONCE, items.length) }, worker));
    return results;
  }

  /** #renew renews batch in one request, which ends at the last of their deadlines: no answer after it is of use. */
  async #renew(batch: Ticket[]): Promise<void> {
    const sent = performance.now();
    const items = batch.map((t) => ({ g: t.lease(), ttlMs: t.ttlMs }));
    const last = Math.max(...batch.map((t) => t.deadline()));
    const req = new AbortController();
    const cutoff = setTimeout(() => req.abort(new UnavailableError("lease: renewal unanswered at the safe deadline")), Math.max(0, last - sent));
    const j = Math.random(); // one jitter for the batch, so that its holds stay together
    // Each request is also bounded by the client's timeout (Api, 10 s by
    // default): one whose connection died under it (a NAT or balancer that
    // lost it) fails then and is sent again, on the next server or a new
    // connection, while the holds' deadlines leave time.
    let results: (Granted | NotHeldError | { failed: unknown })[];
    try {
      results = await this.#api.renewBatch(items, req.signal);
    } catch (err) {
      // A batch is refused whole for one renewal the server will not do (a
      // key the credential no longer covers: 403; a renewal it finds
      // malformed: 400): ask for each alone, so that one hold's refusal is
      // not every hold's loss. Their send time stays the batch's.
      results = items.length > 1 && (err instanceof ForbiddenError || err instanceof InvalidError)
        ? await this.#renewEach(items, req.signal)
        : batch.map(() => ({ failed: err }));
    } finally {
      clearTimeout(cutoff);
    }
    this.#settling = true;
    try {
      for (const [i, t] of batch.entries()) {
        if (this.#holds.has(t)) t.renewed(sent, results[i] ?? { failed: undefined }, j);
      }
    } finally {
      this.#settling = false;
    }
    this.#arm();
  }
}
