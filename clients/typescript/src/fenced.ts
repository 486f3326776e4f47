import { checkName } from "./api.js";
import { type FenceMode, InvalidError, isToken, MAX_TOKEN, StaleTokenError } from "./errors.js";
import type { Hold } from "./hold.js";

/** How a FencedResource is made. */
export interface FencedResourceOptions {
  /** Names the resource in errors; default "resource". */
  readonly name?: string;
  /**
   * "at-least" (the default) admits token >= highest accepted, so one holder
   * may write many times; "strict" admits only token > highest accepted,
   * each token once (the seed's rule).
   */
  readonly mode?: FenceMode;
}

/**
 * FencedResource is a value guarded by fencing tokens, in this process: a
 * write is accepted only if its token is admitted by the mode, and then
 * recorded as the highest accepted; a rejected write throws a
 * StaleTokenError and changes nothing. Checking, writing and recording
 * happen in one synchronous step, which JavaScript runs without
 * interleaving.
 */
export class FencedResource<T> {
  /** The resource's name, as errors give it. */
  readonly name: string;
  /** The rule tokens are admitted by. */
  readonly mode: FenceMode;
  #value: T;
  #highest = 0;
  #updating = false; // f of an update is running

  constructor(initial: T, options: FencedResourceOptions = {}) {
    this.name = options.name ?? "resource";
    checkName("resource name", this.name);
    const mode = options.mode ?? "at-least";
    if (mode !== "at-least" && mode !== "strict") {
      throw new InvalidError(`lease: unknown fence mode ${JSON.stringify(mode)}; want "at-least" or "strict"`);
    }
    this.mode = mode;
    this.#value = initial;
  }

  /** write stores value if token is admitted, and records token as the highest accepted. */
  write(token: number, value: T): void {
    this.update(token, () => value);
  }

  /**
   * update replaces the value with f(old) if token is admitted, atomically
   * with the check. If f throws, nothing changes. f must not be async: the
   * check would not hold across an await. Nor may f write this resource: a
   * nested write or update throws an InvalidError (the outer one would
   * otherwise record its token over a newer one the nested call recorded).
   */
  update(token: number, f: (old: T) => T): void {
    if (!isToken(token)) {
      throw new InvalidError(`lease: fencing token ${String(token)} is outside [1, ${MAX_TOKEN}]`);
    }
    if (this.#updating) {
      throw new InvalidError(`lease: ${JSON.stringify(this.name)} written from inside its own update`);
    }
    const admitted = this.mode === "strict" ? token > this.#highest : token >= this.#highest;
    if (!admitted) {
      throw new StaleTokenError(
        `lease: stale token ${token} for ${JSON.stringify(this.name)}: highest accepted is ${this.#highest} (mode ${this.mode})`,
        { resource: this.name, token, highest: this.#highest, mode: this.mode },
      );
    }
    let next: T;
    this.#updating = true;
    try {
      next = f(this.#value);
    } finally {
      this.#updating = false;
    }
    if (next instanceof Promise) {
      throw new InvalidError("lease: FencedResource.update needs a synchronous function");
    }
    this.#value = next;
    this.#highest = token;
  }

  /** read returns the value and the highest token accepted so far (0: none). */
  read(): { value: T; lastToken: number } {
    return { value: this.#value, lastToken: this.#highest };
  }
}

/** TOKEN_HEADER is the header a fenced service reads the writer's token from. */
export const TOKEN_HEADER = "Fencing-Token";

/**
 * fencedFetch returns a fetch that stamps the hold's token on every request
 * in the Fencing-Token header (replacing any the caller set), for services
 * guarded by fencing tokens (Go: fence.Middleware). Once the hold's signal
 * has aborted it sends nothing and rejects with the signal's reason (a
 * LeaseLostError, or LeaseReleasedError); a request still waiting for its
 * answer then is aborted, so it does not arrive late. A response already
 * received stays readable. Read error answers with readError: a late write
 * is a 409 StaleTokenError.
 */
export function fencedFetch(hold: Hold, fetchImpl: typeof globalThis.fetch = globalThis.fetch): typeof globalThis.fetch {
  const f = async (input: Parameters<typeof globalThis.fetch>[0], init?: RequestInit): Promise<Response> => {
    hold.throwIfLost();
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    headers.set(TOKEN_HEADER, String(hold.token));
    // Until the answer arrives, the request ends when the hold does.
    const ctl = new AbortController();
    const stop = () => ctl.abort(hold.signal.reason);
    hold.signal.addEventListener("abort", stop, { once: true });
    const callerSignal = init?.signal ?? (input instanceof Request ? input.signal : undefined);
    const signal = callerSignal ? AbortSignal.any([callerSignal, ctl.signal]) : ctl.signal;
    try {
      return await fetchImpl(input, { ...init, headers, signal });
    } finally {
      hold.signal.removeEventListener("abort", stop);
    }
  };
  return f as typeof globalThis.fetch;
}
