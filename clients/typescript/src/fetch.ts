import type { Hold } from "./hold.js";

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
