// A text/event-stream parser, as the HTML standard's "event stream
// interpretation" reads one: fed bytes in chunks cut anywhere (inside a
// line, between CR and LF, inside a UTF-8 character), it gives back the
// messages each chunk completes.

/** MAX_EVENT_STREAM_LINE bounds one line, and one message's data: a lease event is a few KiB at most. */
export const MAX_EVENT_STREAM_LINE = 64 << 10;

/** One message of an event stream. */
export interface EventStreamMessage {
  /** The event field, or "message" when the message has none. */
  readonly event: string;
  /** The data lines, joined with LF. */
  readonly data: string;
  /** The last event ID the stream set, as of this message ("" if none). */
  readonly lastEventId: string;
}

/**
 * EventStreamParser reads a text/event-stream: lines end with CRLF, LF or
 * CR; a leading BOM is dropped; lines starting with ":" are comments (the
 * server's heartbeats); a blank line dispatches the message, unless it has
 * no data line; "data" lines join with LF; "id" sets the last event ID
 * (unless it contains NUL), "retry" the reconnection time (digits only);
 * other fields are ignored. A message cut off by the end of the stream is
 * dropped. A line or message longer than MAX_EVENT_STREAM_LINE throws a
 * RangeError; bytes that are not UTF-8 a TypeError.
 */
export class EventStreamParser {
  /** The reconnection time the stream asked for, in milliseconds, if it did. */
  retryMs: number | undefined;

  // Drops one leading BOM, as the standard's decode does; bytes that are
  // not UTF-8 throw (a TypeError), where the standard would put U+FFFD in
  // their place: a lease server sends only UTF-8, as the Go client expects.
  readonly #decoder = new TextDecoder("utf-8", { fatal: true });
  #pending = ""; // text of a line not ended yet
  #afterCR = false; // the last line ended with CR: an LF first is part of that end
  #event = "";
  #data = "";
  #hasData = false;
  #lastEventId = "";

  /** push parses a chunk of the stream and returns the messages it completes. */
  push(chunk: Uint8Array): EventStreamMessage[] {
    return this.#lines(this.#decoder.decode(chunk, { stream: true }));
  }

  /**
   * end says the stream ended. It returns nothing: the standard drops a
   * message whose blank line never came.
   */
  end(): void {
    try {
      this.#decoder.decode(); // resets it; a character cut off at the end belongs to the dropped message
    } catch {
      // dropped with it
    }
    this.#pending = "";
    this.#reset();
  }

  #lines(text: string): EventStreamMessage[] {
    const out: EventStreamMessage[] = [];
    let i = 0;
    if (this.#afterCR && text.length > 0) {
      this.#afterCR = false;
      if (text.charCodeAt(0) === 0x0a) i = 1;
    }
    while (i < text.length) {
      let j = i;
      while (j < text.length) {
        const c = text.charCodeAt(j);
        if (c === 0x0a || c === 0x0d) break;
        j++;
      }
      if (j === text.length) {
        this.#pending += text.slice(i);
        if (this.#pending.length > MAX_EVENT_STREAM_LINE) {
          throw new RangeError(`a line of the event stream is longer than ${MAX_EVENT_STREAM_LINE} characters`);
        }
        break;
      }
      const line = this.#pending + text.slice(i, j);
      this.#pending = "";
      if (text.charCodeAt(j) === 0x0d) {
        if (j + 1 === text.length) {
          this.#afterCR = true; // the LF, if any, comes with the next chunk
          i = j + 1;
        } else {
          i = text.charCodeAt(j + 1) === 0x0a ? j + 2 : j + 1;
        }
      } else {
        i = j + 1;
      }
      const msg = this.#line(line);
      if (msg !== undefined) out.push(msg);
    }
    return out;
  }

  #line(line: string): EventStreamMessage | undefined {
    if (line === "") {
      if (!this.#hasData) {
        this.#reset();
        return undefined;
      }
      const msg = { event: this.#event === "" ? "message" : this.#event, data: this.#data, lastEventId: this.#lastEventId };
      this.#reset();
      return msg;
    }
    if (line.charCodeAt(0) === 0x3a) return undefined; // ":": a comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    switch (field) {
      case "event":
        this.#event = value;
        break;
      case "data":
        if (this.#data.length + value.length + 1 > MAX_EVENT_STREAM_LINE) {
          throw new RangeError(`a message of the event stream has more than ${MAX_EVENT_STREAM_LINE} characters of data`);
        }
        this.#data = this.#hasData ? `${this.#data}\n${value}` : value;
        this.#hasData = true;
        break;
      case "id":
        if (!value.includes("\u0000")) this.#lastEventId = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retryMs = Number(value);
        break;
    }
    return undefined;
  }

  #reset(): void {
    this.#event = "";
    this.#data = "";
    this.#hasData = false;
  }
}
