import type { Hold } from "./hold.js";
import { nodeAvailable, nodeTransport } from "./node-transport.js";

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

/**
 * WireRequest is one HTTP request of the client's, as a Transport sends it.
 * The signal ends it, whether it waits for its answer or (a stream) is
 * being read; the transport then rejects with the signal's reason.
 */
export interface WireRequest {
  readonly method: string;
  /** The absolute URL, as text. */
  readonly url: string;
  /** The request's own headers, which the transport may add its framing to (Content-Length). */
  readonly headers: Record<string, string>;
  readonly body?: string | undefined;
  readonly signal?: AbortSignal | undefined;
  /** stream: a 200 answer's body is handed over unread (an event stream); any other answer is read whole. */
  readonly stream: boolean;
  /**
   * timeoutMs, if given, ends a request still without its whole answer
   * after that long: the transport rejects with a DOMException named
   * "TimeoutError", as fetch does for AbortSignal.timeout.
   */
  readonly timeoutMs?: number | undefined;
  /**
   * late, if given, gets the answer of a request its signal ended while it
   * waited for it, where the transport can still read it: node:http over
   * plain HTTP half-closes the connection, so that the server sees the
   * hang-up and its answer still arrives (an acquire's grant that crossed
   * the hang-up, to give back). fetch cannot, and never calls it.
   */
  readonly late?: ((answer: WireAnswer) => void) | undefined;
}

/** WireAnswer is the server's answer to a WireRequest. */
export interface WireAnswer {
  readonly status: number;
  /** header returns the answer's header name (any case), or null. */
  header(name: string): string | null;
  /** text is the body, read whole; "" for a stream's 200. */
  readonly text: string;
  /** body is a stream's 200 body, unread; null otherwise. */
  readonly body: ReadableStream<Uint8Array> | null;
}

/**
 * Transport sends a request and returns its answer. It rejects when no whole
 * answer came: with the signal's reason if the signal ended the request, or
 * else with an Error whose cause is the failure (a connection refused or a
 * name that did not resolve carries the system's code and syscall, as
 * fetch's "fetch failed" does, so that the caller can tell a request that
 * never left from one whose answer was lost).
 */
export type Transport = (req: WireRequest) => Promise<WireAnswer>;

/** fetchTransport is a Transport over fetchImpl: the one every runtime has. */
export function fetchTransport(fetchImpl: typeof globalThis.fetch): Transport {
  return async (req) => {
    const init: RequestInit = { method: req.method, headers: req.headers };
    if (req.body !== undefined) init.body = req.body;
    const { signal, timeoutMs } = req;
    if (timeoutMs !== undefined) {
      const timeout = AbortSignal.timeout(Math.max(1, Math.ceil(timeoutMs)));
      init.signal = signal === undefined ? timeout : AbortSignal.any([signal, timeout]);
    } else if (signal !== undefined) {
      init.signal = signal;
    }
    const res = await fetchImpl(req.url, init);
    const unread = req.stream && res.status === 200;
    const text = unread ? "" : await readText(res);
    return { status: res.status, header: (name) => res.headers.get(name), text, body: unread ? res.body : null };
  };
}

/**
 * MAX_ANSWER_BYTES bounds what a transport reads of one answer, as the Go
 * client's does (leasehttp: 64 MiB, room for the largest page of list): a
 * longer one fails the request as an answer lost would, so that a broken or
 * hostile server cannot make the client buffer without end.
 */
export const MAX_ANSWER_BYTES = 64 << 20;

/** tooLarge is the failure of an answer longer than MAX_ANSWER_BYTES: the cause a transport rejects with. */
export function tooLarge(): RangeError {
  return new RangeError(`the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
}

const strictUTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * utf8 decodes an answer's bytes, which must be UTF-8, as the Go client's
 * reader and Python's json require: a TypeError otherwise, rather than
 * U+FFFD in place of the bytes (a key that is not the one the server has).
 */
export function utf8(bytes: Uint8Array): string {
  return strictUTF8.decode(bytes);
}

/** readText reads res's body as UTF-8, at most MAX_ANSWER_BYTES of it, else rejects as a failed request does. */
async function readText(res: Response): Promise<string> {
  if (res.body === null) return "";
  const reader = res.body.getReader();
  const fail = async (): Promise<never> => {
    await reader.cancel().catch(() => undefined);
    throw new TypeError("request failed", { cause: tooLarge() });
  };
  if (Number(res.headers.get("Content-Length") ?? 0) > MAX_ANSWER_BYTES) return fail();
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let text = "";
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    size += value?.length ?? 0;
    if (size > MAX_ANSWER_BYTES) return fail();
    try {
      if (done) return text + decoder.decode();
      text += decoder.decode(value, { stream: true });
    } catch (err) {
      await reader.cancel().catch(() => undefined);
      throw new TypeError("request failed", { cause: err });
    }
  }
}

/**
 * isNode reports whether this is Node.js itself, not a runtime that
 * imitates its globals (Deno and Bun set process.versions.node too).
 */
export function isNode(): boolean {
  const g = globalThis as { process?: { versions?: Record<string, string | undefined> }; Deno?: unknown; Bun?: unknown };
  const v = g.process?.versions;
  return typeof v?.node === "string" && v.bun === undefined && v.deno === undefined && g.Deno === undefined && g.Bun === undefined;
}

let shared: Transport | undefined;

/**
 * defaultTransport is the transport a client uses unless given a fetch: in
 * Node.js (20.16 or later, which has process.getBuiltinModule), node:http
 * and node:https through keep-alive agents that every client shares
 * (node-transport.ts: twice the requests per second of Node's fetch);
 * elsewhere (browsers, Deno, Bun, older Node.js), the runtime's fetch.
 */
export function defaultTransport(): Transport {
  return (shared ??= isNode() && nodeAvailable() ? nodeTransport() : fetchTransport(globalThis.fetch.bind(globalThis)));
}
