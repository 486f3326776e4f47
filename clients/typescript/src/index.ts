// @leasehq/lease: a client for the lease server (`lease serve`) — leases
// that issue fencing tokens — and the guards that make a resource reject the
// late write of a holder whose lease has passed to someone else. The
// PostgreSQL guard is @leasehq/lease/pg.

export { LeaseClient, type AcquireOptions, type LeaseClientOptions, type TryAcquireOptions } from "./client.js";
export { DEFAULT_DRIFT_MARGIN, Hold, type DriftMargin } from "./hold.js";
export type { LeaseInfo, LeasePage, PageOptions } from "./api.js";
export { DEFAULT_HEARTBEAT_MS, DEFAULT_PAGE_LIMIT, DEFAULT_TIMEOUT_MS, MAX_NAME_BYTES, MAX_PAGE_LIMIT, MAX_TTL_MS, MAX_WAIT_MS, MIN_TTL_MS } from "./api.js";
export {
  errorFromBody,
  ForbiddenError,
  TooManyWatchersError,
  UnsupportedError,
  HeldError,
  InvalidError,
  isToken,
  LeaseError,
  LeaseLostError,
  LeaseReleasedError,
  MAX_TOKEN,
  NotFoundError,
  NotHeldError,
  readError,
  StaleTokenError,
  UnauthorizedError,
  UnavailableError,
  UnexpectedAnswerError,
  type FenceMode,
  type Holder,
  type LeaseErrorCode,
  type LeaseErrorOptions,
  MAX_RETRY_AFTER_MS,
} from "./errors.js";
export { FencedResource, fencedFetch, TOKEN_HEADER, type FencedResourceOptions } from "./fenced.js";
export { MISSED_HEARTBEATS, SILENCE_SLACK_MS, Watch, type LeaseEventKind, type WatchEvent, type WatchEventKind, type WatchOptions } from "./watch.js";
