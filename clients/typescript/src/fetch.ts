import { nodeAvailable, nodeTransport } from "./node-transport.js";
import { answerText, MAX_ANSWER_BYTES, tooLarge, type Transport } from "./transport.js";

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
      const { text, notUTF8 } = unread ? { text: "", notUTF8: false } : await readText(res);
      return { status: res.status, header: (name) => res.headers.get(name), text, body: unread ? res.body : null, notUTF8 };
    } finally {
      clearTimeout(timer);
    }
  };
}

/**
 * readText reads res's body, at most MAX_ANSWER_BYTES of it, else rejects as
 * a failed request does; it decodes it as answerText does.
 */
async function readText(res: Response): Promise<{ text: string; notUTF8: boolean }> {
  if (res.body === null) return { text: "", notUTF8: false };
  const reader = res.body.getReader();
  const fail = async (): Promise<never> => {
    await reader.cancel().catch(() => undefined);
    throw new TypeError("request failed", { cause: tooLarge() });
  };
  if (Number(res.headers.get("Content-Length") ?? 0) > MAX_ANSWER_BYTES) return fail();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > MAX_ANSWER_BYTES) return fail();
    chunks.push(value);
  }
  let bytes = chunks[0] ?? new Uint8Array(0);
  if (chunks.length > 1) {
    bytes = new Uint8Array(size);
    let at = 0;
    for (const c of chunks) {
      bytes.set(c, at);
      at += c.length;
    }
  }
  try {
    return answerText(res.status, bytes);
  } catch (err) {
    throw new TypeError("request failed", { cause: err });
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
