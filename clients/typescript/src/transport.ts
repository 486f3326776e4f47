// What a transport is, and what every transport holds an answer to: the
// requests and answers of the client's wire, and the limits of an answer's
// bytes (fetch.ts and node-transport.ts implement it).

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
   * after that long (a stream's 200: without its head, the status and
   * headers; the body is then read for as long as it lasts): the transport
   * rejects with a DOMException named "TimeoutError", as fetch does for
   * AbortSignal.timeout.
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
  /**
   * notUTF8 says the bytes of an error answer (any status but 200) are not
   * UTF-8: text then has U+FFFD in place of the bad ones, fit for a message
   * only, and the answer is no API error body (a proxy's page in another
   * encoding), read by its status. A 200's bytes that are not UTF-8 fail the
   * request instead.
   */
  readonly notUTF8?: boolean;
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

const lossyUTF8 = new TextDecoder("utf-8");

/**
 * answerText decodes the bytes of an answer of status: as utf8 does, but an
 * error answer's bytes that are not UTF-8 come back with U+FFFD in place of
 * the bad ones and notUTF8 set (WireAnswer.notUTF8).
 */
export function answerText(status: number, bytes: Uint8Array): { text: string; notUTF8: boolean } {
  try {
    return { text: utf8(bytes), notUTF8: false };
  } catch (err) {
    if (status === 200) throw err;
    return { text: lossyUTF8.decode(bytes), notUTF8: true };
  }
}
