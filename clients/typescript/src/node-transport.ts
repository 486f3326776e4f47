// The transport in Node.js: node:http and node:https through keep-alive
// agents, which do a request in about half the time Node's fetch takes
// (docs/BENCHMARKS.md, the TypeScript group). fetch.ts loads this module
// only in Node.js.

import { Agent as HttpAgent, type IncomingMessage, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { Readable } from "node:stream";

import type { Transport, WireAnswer } from "./fetch.js";

/**
 * IDLE_SOCKET_MS is how long a connection waits in the pool for its next
 * request before it is closed: well under the server's idle timeout (lease
 * serve: 2 minutes), so that the client closes it first and never sends on a
 * connection the server is closing. It is what undici, under Node's fetch,
 * keeps one for.
 */
export const IDLE_SOCKET_MS = 4_000;

/** Agents pool the connections of every request made through them. */
export interface Agents {
  readonly http: HttpAgent;
  readonly https: HttpsAgent;
}

/**
 * newAgents returns keep-alive agents whose idle connections close after
 * idleMs. A request waiting for its answer longer than that is not cut: the
 * agents close only connections in their pool.
 */
export function newAgents(idleMs = IDLE_SOCKET_MS): Agents {
  const opts = { keepAlive: true, timeout: idleMs, scheduling: "lifo" as const };
  return { http: new HttpAgent(opts), https: new HttpsAgent(opts) };
}

let shared: Agents | undefined;

/** defaultAgents returns the agents every client in the process shares, made on first use. */
export function defaultAgents(): Agents {
  return (shared ??= newAgents());
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
      const tls = req.url.protocol === "https:";
      const headers: Record<string, string> = { ...req.headers };
      if (req.body !== undefined) headers["Content-Length"] = String(Buffer.byteLength(req.body));
      const options = { method: req.method, headers, agent: tls ? agents.https : agents.http };
      const r = tls ? httpsRequest(req.url, options) : httpRequest(req.url, options);
      let settled = false;
      const settle = () => {
        settled = true;
        signal?.removeEventListener("abort", onAbort);
      };
      // fail rejects once: with the signal's reason if it ended the request,
      // else with err as the cause, as fetch's "fetch failed" carries it.
      const fail = (err: unknown) => {
        if (settled) return;
        settle();
        reject(signal?.aborted ? signal.reason : new TypeError(`request failed: ${errMessage(err)}`, { cause: err }));
      };
      const onAbort = () => r.destroy(signal?.reason instanceof Error ? signal.reason : new Error(String(signal?.reason)));
      signal?.addEventListener("abort", onAbort, { once: true });
      r.on("error", fail);
      r.on("response", (res: IncomingMessage) => {
        const status = res.statusCode ?? 0;
        const header = (name: string): string | null => {
          const v = res.headers[name.toLowerCase()];
          return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
        };
        if (req.stream && status === 200) {
          // The stream's reader ends it (cancel), or the signal does: the
          // listener stays until the response closes.
          settled = true;
          res.once("close", () => signal?.removeEventListener("abort", onAbort));
          resolve({ status, header, text: "", body: Readable.toWeb(res) as ReadableStream<Uint8Array> });
          return;
        }
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("error", fail);
        res.on("end", () => {
          if (settled) return;
          settle();
          resolve({ status, header, text, body: null });
        });
        res.on("close", () => {
          if (!res.complete) fail(new Error("the connection closed before the answer was whole"));
        });
      });
      r.end(req.body);
    });
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
