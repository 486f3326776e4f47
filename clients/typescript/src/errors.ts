// Errors as classes, one per code of the server's error table
// (leasehttp/errors.go), plus the client's own: the loss and the release of
// a hold. Every class has a `code`; match with instanceof or on the code.

import type { ErrorCode } from "./openapi.js";

/** Who holds a key, as a `held` answer names them. */
export interface Holder {
  readonly key: string;
  readonly owner: string;
  readonly token: number;
  /** When the holder's lease expires, on the server's clock. */
  readonly expiresAt: Date;
}

/** The codes of LeaseError: the server's, and the client's own. */
export type LeaseErrorCode = ErrorCode | "lost" | "released" | "unexpected";

/** What an error carries besides its message: the answer's status and Retry-After, and its cause. */
export interface LeaseErrorOptions {
  status?: number | undefined;
  /** See LeaseError.retryAfterMs. */
  retryAfterMs?: number | undefined;
  cause?: unknown;
}

/** The base of every error this package throws. */
export class LeaseError extends Error {
  /** What went wrong, as the server's error table names it. */
  readonly code: LeaseErrorCode;
  /** The HTTP status of the answer, when the error is one. */
  readonly status: number | undefined;
  /**
   * How long the answer asked the client to wait before asking again, in
   * milliseconds: its `Retry-After` header, read on a 429 or a 5xx (a
   * lease server's 503 `unavailable` says 1 s; a rate limit in front of it
   * says its own) as the Go client's leasehttp reads it — delay-seconds, or
   * an HTTP date counted from now — and bounded to [0, MAX_RETRY_AFTER_MS]
   * (a date past is 0, a larger delay a minute). Undefined when the answer
   * said none or one that is neither form, and on errors that are no
   * answer. The client's own retries (get, list, release, a watch's
   * opening, a hold's renewals) wait at least this long; see
   * UnavailableError.
   */
  readonly retryAfterMs: number | undefined;

  constructor(code: LeaseErrorCode, message: string, options?: LeaseErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = options?.status;
    this.retryAfterMs = options?.retryAfterMs;
  }
}

/** The key is held by someone else (409 `held`); `holder` names them when the server knows. */
export class HeldError extends LeaseError {
  readonly holder: Holder | undefined;

  constructor(message: string, holder?: Holder, options?: LeaseErrorOptions) {
    super("held", message, options);
    this.holder = holder;
  }
}

/** The lease is no longer held: it expired, was released or was superseded (409 `not_held`). */
export class NotHeldError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("not_held", message, options);
  }
}

/** The rule a guard admits tokens by. */
export type FenceMode = "at-least" | "strict";

/**
 * A guard rejected a write: its token is older than the newest the resource
 * accepted (409 `stale_token` from a fenced service). A rejected write
 * changed nothing.
 */
export class StaleTokenError extends LeaseError {
  /** The resource written to, when known. */
  readonly resource: string | undefined;
  /** The token the writer gave. */
  readonly token: number | undefined;
  /** The highest token the resource had accepted, when known. */
  readonly highest: number | undefined;
  /** The rule that rejected it, when known. */
  readonly mode: FenceMode | undefined;

  constructor(
    message: string,
    detail: { resource?: string; token?: number; highest?: number; mode?: FenceMode } = {},
    options?: LeaseErrorOptions,
  ) {
    super("stale_token", message, options);
    this.resource = detail.resource;
    this.token = detail.token;
    this.highest = detail.highest;
    this.mode = detail.mode;
  }
}

/** No unexpired lease on the key (404 `not_found`). */
export class NotFoundError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("not_found", message, options);
  }
}

/** A malformed request or argument (400 `invalid`, also 405, 408, 413, 415): retrying will not help. */
export class InvalidError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("invalid", message, options);
  }
}

/** No bearer token, or one the server does not know (401 `unauthorized`). */
export class UnauthorizedError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("unauthorized", message, options);
  }
}

/** The credential does not cover the key, or the server refuses this Host (403 `forbidden`). */
export class ForbiddenError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("forbidden", message, options);
  }
}

/** The credential has as many watch streams open as the server allows (429 `too_many_watchers`). */
export class TooManyWatchersError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("too_many_watchers", message, options);
  }
}

/** The server's backend cannot do what was asked, such as watch (501 `unsupported`); asking again will not help. */
export class UnsupportedError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("unsupported", message, options);
  }
}

/**
 * The server or its backend could not answer (503 `unavailable`, any 5xx, or
 * the network): the outcome of a request that changes state is unknown.
 * A 5xx answer's `Retry-After` is its retryAfterMs (a lease server's 503
 * says 1 s), which get, list, release and a watch's opening wait for at
 * least before they ask again (giving up at once when that would pass
 * their bound), and a hold before it renews again as long as its safe
 * deadline leaves room for one more renewal after it. A watch refused 429
 * by a rate limit in front of the server (no API error body) is one too,
 * its cause the UnexpectedAnswerError and its retryAfterMs the answer's
 * `Retry-After`: watch again no sooner. An acquire answered 5xx carries
 * its retryAfterMs as well; the client does not send it again.
 */
export class UnavailableError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("unavailable", message, options);
  }
}

/**
 * The client can no longer be sure it holds the lease: the safe deadline
 * (send time of the last successful acquire or renew + TTL − drift margin)
 * passed without a renewal, or the server said the lease is gone. It is the
 * reason of a lost Hold's signal.
 */
export class LeaseLostError extends LeaseError {
  readonly key: string;
  readonly token: number;

  constructor(key: string, token: number, message: string, options?: { cause?: unknown }) {
    super("lost", message, options);
    this.key = key;
    this.token = token;
  }
}

/** The Hold was released: the reason of its signal after release(). */
export class LeaseReleasedError extends LeaseError {
  constructor(key: string, token: number) {
    super("released", `lease: ${JSON.stringify(key)} (token ${token}) was released`);
  }
}

/** An answer no lease server gives: a proxy's error page, another service at that URL. */
export class UnexpectedAnswerError extends LeaseError {
  constructor(message: string, options?: LeaseErrorOptions) {
    super("unexpected", message, options);
  }
}

type Options = LeaseErrorOptions;

// byCode makes the error of each code the server may send. Its type makes
// tsc fail when the OpenAPI document gains a code this table lacks.
const byCode: { [C in ErrorCode]: (message: string, body: Record<string, unknown>, o: Options) => LeaseError } = {
  held: (m, b, o) => new HeldError(m, parseHolder(b["holder"]), o),
  not_held: (m, _b, o) => new NotHeldError(m, o),
  stale_token: (m, b, o) =>
    new StaleTokenError(
      m,
      {
        ...(typeof b["resource"] === "string" ? { resource: b["resource"] } : {}),
        ...(isToken(b["token"]) ? { token: b["token"] } : {}),
        ...(isToken(b["highest"]) ? { highest: b["highest"] } : {}),
      },
      o,
    ),
  not_found: (m, _b, o) => new NotFoundError(m, o),
  invalid: (m, _b, o) => new InvalidError(m, o),
  unauthorized: (m, _b, o) => new UnauthorizedError(m, o),
  forbidden: (m, _b, o) => new ForbiddenError(m, o),
  too_many_watchers: (m, _b, o) => new TooManyWatchersError(m, o),
  unsupported: (m, _b, o) => new UnsupportedError(m, o),
  unavailable: (m, _b, o) => new UnavailableError(m, o),
};

/** The largest token a server issues: 2^53, exact as a JSON number. */
export const MAX_TOKEN = 2 ** 53;

/** isToken reports whether v is a token a server can have issued: a whole number in [1, 2^53]. */
export function isToken(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= MAX_TOKEN;
}

/** TOKEN_MEMBER finds the token and highest members of a JSON text, and the number each is written as. */
const TOKEN_MEMBER = /[{,]\s*"(token|highest)"\s*:\s*(-?[0-9][0-9.eE+-]*)/g;

/**
 * tokensAsWritten reports whether every token and highest member of text is
 * written as a server writes a token: digits, at most 2^53 (JSON.parse reads
 * 9007199254740993 as 2^53).
 */
function tokensAsWritten(text: string): boolean {
  TOKEN_MEMBER.lastIndex = 0;
  for (let m = TOKEN_MEMBER.exec(text); m !== null; m = TOKEN_MEMBER.exec(text)) {
    const n = m[2] ?? "";
    if (!/^(0|[1-9][0-9]*)$/.test(n) || n.length > 16 || (n.length === 16 && n > String(MAX_TOKEN))) return false;
  }
  return true;
}

function parseHolder(v: unknown): Holder | undefined {
  if (typeof v !== "object" || v === null) return undefined;
  const h = v as Record<string, unknown>;
  const expiresAt = typeof h["expires_at"] === "string" ? new Date(h["expires_at"]) : undefined;
  if (typeof h["key"] !== "string" || typeof h["owner"] !== "string" || !isToken(h["token"]) ||
    expiresAt === undefined || Number.isNaN(expiresAt.getTime())) {
    return undefined;
  }
  return { key: h["key"], owner: h["owner"], token: h["token"], expiresAt };
}

/**
 * errorFromBody turns an error answer into its class: by the code of the API
 * error body `{"error":{"code","message",…}}` when it is one of the table's;
 * else (no such body, or a code this client does not know, a newer
 * server's) by the status alone, as every client does (docs/DESIGN.md, below
 * the error table): a 5xx is UnavailableError, 400, 405, 408, 413 and 415
 * InvalidError, 401 UnauthorizedError, 403 ForbiddenError, any other
 * UnexpectedAnswerError — never NotFoundError or a 409 or 429 class, which a
 * proxy's page could not mean. retryAfter is the answer's Retry-After
 * header, read on a 429 or a 5xx into the error's retryAfterMs.
 */
export function errorFromBody(status: number, body: unknown, text: string, retryAfter?: string | null): LeaseError {
  const retryAfterMs = status === 429 || status >= 500 ? parseRetryAfter(retryAfter) : undefined;
  const e = typeof body === "object" && body !== null ? (body as Record<string, unknown>)["error"] : undefined;
  let what: string;
  if (typeof e === "object" && e !== null) {
    let detail = e as Record<string, unknown>;
    if (!tokensAsWritten(text)) {
      // A token JSON.parse has read as another (past 2^53) or that no
      // server writes (a fraction, an exponent): the details that carry
      // one are left out, as the Go client leaves such a holder out.
      detail = { ...detail };
      delete detail["holder"];
      delete detail["token"];
      delete detail["highest"];
    }
    const code = detail["code"];
    const message = typeof detail["message"] === "string" && detail["message"] !== ""
      ? detail["message"]
      : `lease: HTTP ${status} ${String(code)}`;
    if (typeof code === "string" && Object.hasOwn(byCode, code)) {
      return byCode[code as ErrorCode](message, detail, { status, retryAfterMs });
    }
    what = `lease: HTTP ${status} with error code ${JSON.stringify(code)}, which this client does not know: ${message}`;
  } else {
    const snippet = text.length > 200 ? `${text.slice(0, 200)}…` : text;
    what = `lease: HTTP ${status} without the API's error body: ${JSON.stringify(snippet)}`;
  }
  if (status >= 500) return new UnavailableError(what, { status, retryAfterMs });
  switch (status) {
    case 400:
    case 405:
    case 408:
    case 413:
    case 415:
      return new InvalidError(what, { status });
    case 401:
      return new UnauthorizedError(what, { status });
    case 403:
      return new ForbiddenError(what, { status });
  }
  return new UnexpectedAnswerError(what, { status, retryAfterMs });
}

/**
 * errorFromEvent turns the `end` event that ends a watch stream (an older
 * server's `error`) — its data an error body — into its class: by its code,
 * else (no body, or a code this client does not know) an UnavailableError,
 * since the stream broke.
 */
export function errorFromEvent(what: string, data: string): LeaseError {
  let body: unknown;
  try {
    body = JSON.parse(data);
  } catch {
    body = undefined;
  }
  const e = typeof body === "object" && body !== null ? (body as Record<string, unknown>)["error"] : undefined;
  const detail = typeof e === "object" && e !== null ? (e as Record<string, unknown>) : {};
  const code = detail["code"];
  const said = typeof detail["message"] === "string" && detail["message"] !== "" ? detail["message"] : JSON.stringify(data.slice(0, 200));
  const message = `lease: ${what}: the server ended the stream (${typeof code === "string" ? code : "no code"}): ${said}`;
  if (typeof code === "string" && Object.hasOwn(byCode, code)) return byCode[code as ErrorCode](message, detail, {});
  return new UnavailableError(message);
}

/**
 * readError reads an error answer — from the lease server, or from a service
 * guarded by fencing tokens (a 409 `stale_token`) — as its class.
 */
export async function readError(res: Response): Promise<LeaseError> {
  const text = await res.text().catch(() => "");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return errorFromBody(res.status, body, text, res.headers.get("Retry-After"));
}

/**
 * MAX_RETRY_AFTER_MS bounds the Retry-After the client honours, as the Go
 * and Python clients bound it: a larger one (an hour, a date far ahead) is
 * taken as a minute.
 */
export const MAX_RETRY_AFTER_MS = 60_000;

const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
const WEEKDAYS = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"];
const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];

// The three forms of an HTTP date (RFC 9110, 5.6.7), as Go's http.ParseTime
// takes them: IMF-fixdate, the obsolete RFC 850 form and asctime's.
const IMF_FIXDATE = /^([A-Za-z]{3}), ([0-9]{2}) ([A-Za-z]{3}) ([0-9]{4}) ([0-9]{1,2}):([0-9]{2}):([0-9]{2}) GMT$/;
const RFC850_DATE = /^([A-Za-z]{6,9}), ([0-9]{2})-([A-Za-z]{3})-([0-9]{2}) ([0-9]{1,2}):([0-9]{2}):([0-9]{2}) GMT$/;
const ASCTIME_DATE = /^([A-Za-z]{3}) ([A-Za-z]{3}) {1,2}([0-9]{1,2}) ([0-9]{1,2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})$/;

/** httpDate reads an HTTP date as milliseconds since the epoch, or undefined when it is none. */
function httpDate(v: string): number | undefined {
  let day: string, dd: string, mon: string, yyyy: string, hh: string, mm: string, ss: string;
  let names = DAYS;
  let m = IMF_FIXDATE.exec(v);
  if (m !== null) {
    [, day = "", dd = "", mon = "", yyyy = "", hh = "", mm = "", ss = ""] = m;
  } else if ((m = RFC850_DATE.exec(v)) !== null) {
    [, day = "", dd = "", mon = "", yyyy = "", hh = "", mm = "", ss = ""] = m;
    names = WEEKDAYS;
    // Two digits of year, as Go reads them: 69 to 99 the 1900s, else the 2000s.
    yyyy = String(Number(yyyy) + (Number(yyyy) >= 69 ? 1900 : 2000));
  } else if ((m = ASCTIME_DATE.exec(v)) !== null) {
    [, day = "", mon = "", dd = "", hh = "", mm = "", ss = "", yyyy = ""] = m;
  } else {
    return undefined;
  }
  const month = MONTHS.indexOf(mon.toLowerCase());
  if (!names.includes(day.toLowerCase()) || month < 0) return undefined;
  const [y, d, h, mi, s] = [yyyy, dd, hh, mm, ss].map(Number) as [number, number, number, number, number];
  if (h > 23 || mi > 59 || s > 59 || d < 1) return undefined;
  const at = new Date(0);
  at.setUTCFullYear(y, month, d);
  at.setUTCHours(h, mi, s, 0);
  // A day past the month's end (31 Feb) rolls over: not a date.
  if (at.getUTCMonth() !== month || at.getUTCDate() !== d) return undefined;
  return at.getTime();
}

/**
 * parseRetryAfter reads a Retry-After header's value as the milliseconds to
 * wait, as leasehttp's retryAfterOf reads it: delay-seconds (ASCII digits,
 * at most 2^32 - 1) or an HTTP date counted from nowMs (default now),
 * bounded to [0, MAX_RETRY_AFTER_MS]. Undefined when absent, empty, or
 * neither form (a sign, a fraction, a date that is no date).
 */
export function parseRetryAfter(value: string | null | undefined, nowMs: number = Date.now()): number | undefined {
  const v = (value ?? "").trim();
  if (v === "") return undefined;
  let ms: number | undefined;
  if (/^[0-9]+$/.test(v)) {
    const digits = v.replace(/^0+(?=[0-9])/, "");
    if (digits.length <= 10 && Number(digits) <= 0xffff_ffff) ms = Number(digits) * 1000;
  } else {
    const at = httpDate(v);
    if (at !== undefined) ms = at - nowMs;
  }
  return ms === undefined ? undefined : Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
}
