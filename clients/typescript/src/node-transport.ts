// The transport in Node.js: node:http and node:https through keep-alive
// agents, which do a request in about half the time Node's fetch takes
// (docs/BENCHMARKS.md, the TypeScript group). It imports nothing from Node at
// load time — the built-in modules come from process.getBuiltinModule when
// first needed, node:https only for an https server — so that other
// runtimes can load this module, and a first request waits for no import.

import type * as Http from "node:http";
import type * as Https from "node:https";
import type * as Stream from "node:stream";

import { answerText, MAX_ANSWER_BYTES, type Transport, tooLarge, type WireAnswer } from "./transport.js";

type GetBuiltin = (id: string) => unknown;

/** getBuiltin is process.getBuiltinModule (Node.js 20.16 and later), or undefined. */
function getBuiltin(): GetBuiltin | undefined {
  const p = (globalThis as { process?: { getBuiltinModule?: GetBuiltin } }).process;
  return typeof p?.getBuiltinModule === "function" ? p.getBuiltinModule.bind(p) : undefined;
}

/** nodeAvailable reports whether this runtime gives Node's built-in modules synchronously. */
export function nodeAvailable(): boolean {
  return getBuiltin() !== undefined;
}

/** builtin returns Node's built-in module id; the caller has checked nodeAvailable. */
function builtin<T>(id: string): T {
  const get = getBuiltin();
  if (get === undefined) throw new TypeError(`lease: ${id} is not available in this runtime`);
  return get(id) as T;
}

let http: typeof Http | undefined;
let https: typeof Https | undefined;
let stream: typeof Stream | undefined;

/**
 * IDLE_SOCKET_MS is how long a connection waits in the pool for its next
 * request before it is closed: well under the server's idle timeout (lease
 * serve: 2 minutes), so that the client closes it first and never sends on a
 * connection the server is closing. It is what undici, under Node's fetch,
 * keeps one for.
 */
export const IDLE_SOCKET_MS = 4_000;

/** LINGER_MS bounds how long a request ended by its signal waits for its last answer (WireRequest.late). */
const LINGER_MS = 10_000;

/**
 * Agents pool the connections of every request made through them: a
 * keep-alive agent per protocol, made on first use, whose idle connections
 * close after idleMs. A request waiting for its answer longer than that is
 * not cut: an agent closes only connections in its pool.
 */
export class Agents {
  readonly #options: Http.AgentOptions;
  #http: Http.Agent | undefined;
  #https: Https.Agent | undefined;

  constructor(idleMs = IDLE_SOCKET_MS) {
    this.#options = { keepAlive: true, timeout: idleMs, scheduling: "lifo" };
  }

  /** The agent of http:// requests. */
  get http(): Http.Agent {
    return (this.#http ??= new (http ??= builtin<typeof Http>("node:http")).Agent(this.#options));
  }

  /** The agent of https:// requests. */
  get https(): Https.Agent {
    return (this.#https ??= new (https ??= builtin<typeof Https>("node:https")).Agent(this.#options));
  }

  /** destroy closes every connection the agents made. */
  destroy(): void {
    this.#http?.destroy();
    this.#https?.destroy();
  }
}

let shared: Agents | undefined;

/** defaultAgents returns the agents every client in the process shares, made on first use. */
export function defaultAgents(): Agents {
  return (shared ??= new Agents());
}

/**
 * nodeTransport is a Transport over node:http and node:https. Requests go
 * through agents (by default one pair that every client in the process
 * shares), so concurrent callers share the connections the agents keep
 * open, and sequential ones reuse them.
 */
export function nodeTransport(agents: Agents = defaultAgents()): Transport {
  return (req) =>
    new Promise<WireAnswer>((resolve, reject) => {
      const { signal } = req;
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const tls = req.url.startsWith("https:");
      // The request's own headers (see WireRequest): not copied, as a copy
      // costs more than the rest of this function.
      const { headers } = req;
      if (req.body !== undefined) headers["Content-Length"] = String(Buffer.byteLength(req.body));
      const options = { method: req.method, headers, agent: tls ? agents.https : agents.http };
      const r = tls
        ? (https ??= builtin<typeof Https>("node:https")).request(req.url, options)
        : (http ??= builtin<typeof Http>("node:http")).request(req.url, options);
      let settled = false;
      let timedOut: DOMException | undefined;
      const timer =
        req.timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              timedOut = new DOMException(`no answer within ${Math.ceil(req.timeoutMs ?? 0)} ms`, "TimeoutError");
              r.destroy(timedOut);
            }, Math.max(1, Math.ceil(req.timeoutMs)));
      const settle = () => {
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      // fail rejects once: with the signal's reason if it ended the request,
      // the timeout if it did, else with err as the cause, as fetch's
      // "fetch failed" carries it.
      const fail = (err: unknown) => {
        if (settled) return;
        settle();
        reject(signal?.aborted ? signal.reason : (timedOut ?? new TypeError("request failed", { cause: err })));
      };
      // With req.late, a request the signal ends while it waits lingers:
      // the caller gets the signal's reason at once, the connection is
      // half-closed (the server sees the hang-up, and its answer still
      // comes) and the answer, when whole, goes to late. TLS and a
      // connection not yet made are ended outright, as always.
      let lingering = false;
      const onAbort = () => {
        const sock = r.socket;
        if (req.late !== undefined && !tls && sock !== null && !sock.connecting && !sock.destroyed) {
          fail(undefined); // settles: rejects with the signal's reason
          lingering = true;
          // Background work: it keeps no process alive (one that exits
          // first leaves a crossing grant to its TTL, as a hang-up did).
          const bound = setTimeout(() => r.destroy(), LINGER_MS);
          bound.unref();
          sock.unref();
          r.once("close", () => clearTimeout(bound));
          sock.end();
          return;
        }
        r.destroy(signal?.reason instanceof Error ? signal.reason : new Error(String(signal?.reason)));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      r.on("error", fail);
      r.on("response", (res: Http.IncomingMessage) => {
        const status = res.statusCode ?? 0;
        const header = (name: string): string | null => {
          const v = res.headers[name.toLowerCase()];
          return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
        };
        if (req.stream && status === 200) {
          // The stream's reader ends it (cancel), or the signal does: the
          // listener stays until the response closes.
          settled = true;
          clearTimeout(timer);
          res.once("close", () => signal?.removeEventListener("abort", onAbort));
          const { Readable } = (stream ??= builtin<typeof Stream>("node:stream"));
          resolve({ status, header, text: "", body: Readable.toWeb(res) as ReadableStream<Uint8Array> });
          return;
        }
        // At most MAX_ANSWER_BYTES, as the Go client reads: a server that
        // never stops sending fails the request rather than filling memory.
        const length = Number(res.headers["content-length"] ?? 0);
        if (length > MAX_ANSWER_BYTES) {
          fail(tooLarge());
          res.destroy();
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            fail(tooLarge());
            res.destroy();
            return;
          }
          chunks.push(chunk);
        });
        res.on("error", fail);
        res.on("end", () => {
          let text: string;
          let notUTF8: boolean;
          try {
            ({ text, notUTF8 } = answerText(status, chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size)));
          } catch (err) {
            lingering = false;
            fail(err);
            return;
          }
          if (lingering) {
            lingering = false;
            r.destroy(); // half-closed: no use to the pool
            req.late?.({ status, header, text, body: null, notUTF8 });
            return;
          }
          if (settled) return;
          settle();
          resolve({ status, header, text, body: null, notUTF8 });
        });
        res.on("close", () => {
          if (!res.complete) fail(new Error("the connection closed before the answer was whole"));
        });
      });
      r.end(req.body);
    });
}
