import { nodeAvailable, nodeTransport } from "./node-transport.js";
import { MAX_ANSWER_BYTES, tooLarge, type Transport } from "./transport.js";

/** fetchTransport is a Transport over fetchImpl: the one every runtime has. */
export function fetchTransport(fetchImpl: typeof globalThis.fetch): Transport {
  return async (req) => {
    const init: RequestInit = { method: req.method, headers: req.headers };
    if (req.body !== undefined) init.body = req.body;
    const { signal, timeoutMs } = req;
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (timeoutMs !== undefined) {
      // Not AbortSignal.timeout: a stream's body outlives the timeout,
      // which bounds only its head (WireRequest.timeoutMs).
      const timeout = new AbortController();
      const ms = Math.max(1, Math.ceil(timeoutMs));
      timer = setTimeout(() => timeout.abort(new DOMException(`no answer within ${ms} ms`, "TimeoutError")), ms);
      init.signal = signal === undefined ? timeout.signal : AbortSignal.any([signal, timeout.signal]);
    } else if (signal !== undefined) {
      init.signal = signal;
    }
    try {
      const res = await fetchImpl(req.url, init);
      const unread = req.stream && res.status === 200;
      const text = unread ? "" : await readText(res);
      return { status: res.status, header: (name) => res.headers.get(name), text, body: unread ? res.body : null };
    } finally {
      clearTimeout(timer);
    }
  };
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
