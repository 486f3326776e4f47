// The API's operations as the client sends them: each one's method and path
// by its operationId, and its request body and answers by status, all taken
// from or checked against the types openapi-typescript generates from the
// OpenAPI document (openapi.ts): an operation renamed, moved or reshaped in
// the document fails to compile here.

import type { operations as Wire, paths } from "./openapi.js";

/** Op is an operationId of the document. */
export type Op = keyof Wire;

type Method = "get" | "put" | "post" | "delete" | "options" | "head" | "patch" | "trace";

/** Same is true when A and B are each assignable to the other. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

/** Route is where the document has operation O: its method (upper case, as sent) and path template. */
type Route<O extends Op> = {
  [P in keyof paths]: {
    [M in Method]: [Exclude<paths[P][M], undefined>] extends [never]
      ? never
      : Same<Exclude<paths[P][M], undefined>, Wire[O]> extends true
        ? { readonly method: Uppercase<M>; readonly path: P }
        : never;
  }[Method];
}[keyof paths];

/** operations are the method and path template of every operation of the document. */
export const operations = {
  acquire: { method: "POST", path: "/v1/leases/{key}/acquire" },
  renew: { method: "POST", path: "/v1/leases/{key}/renew" },
  release: { method: "POST", path: "/v1/leases/{key}/release" },
  renewBatch: { method: "POST", path: "/v1/renew" },
  getLease: { method: "GET", path: "/v1/leases/{key}" },
  listLeases: { method: "GET", path: "/v1/leases" },
  getOpenAPI: { method: "GET", path: "/v1/openapi.json" },
  healthz: { method: "GET", path: "/healthz" },
  readyz: { method: "GET", path: "/readyz" },
  metrics: { method: "GET", path: "/metrics" },
  watchLeases: { method: "GET", path: "/v1/watch" },
  getStats: { method: "GET", path: "/v1/stats" },
} as const satisfies { readonly [O in Op]: Route<O> };

/** JSONOf is the JSON body of a request or answer, or undefined if it has none. */
type JSONOf<T> = [Exclude<T, undefined>] extends [never]
  ? undefined
  : Exclude<T, undefined> extends { content: { "application/json": infer B } }
    ? B
    : undefined;

/** Operations are each operation's JSON request body and JSON answers by status. */
export type Operations = {
  [O in Op]: {
    request: JSONOf<Wire[O]["requestBody"]>;
    responses: { [S in keyof Wire[O]["responses"]]: JSONOf<Wire[O]["responses"][S]> };
  };
};
