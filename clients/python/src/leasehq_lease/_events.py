"""The watch stream's wire: a text/event-stream parser (the HTML standard's
"event stream interpretation", fed bytes cut anywhere) and the one place
that knows the server's event names (leasehttp/openapi.json, DESIGN.md
"HTTP API"): a lease event per change, ``synced`` after the first picture,
and the event that ends a broken stream."""

from __future__ import annotations

import codecs
from typing import Final, NamedTuple

from ._errors import LeaseError, UnexpectedAnswerError, error_from_event, load_json, quote
from ._wire import Lease, is_digits, lease_of

# The server's event names. Only this block and decode() below know them.
EVENT_SYNCED: Final = "synced"
"""Sent once, after the held events of the first picture."""
EVENT_END: Final = "end"
"""Ends a stream the server breaks (its data an error body, code unavailable)."""
EVENT_END_OLD: Final = "error"
"""The same event as servers before the rename sent it: a name every
EventSource client mistakes for its own connection error."""
HEARTBEAT_HEADER: Final = "Lease-Heartbeat-Ms"
"""The watch answer's header that says the server's heartbeat in milliseconds."""
LEASE_EVENTS: Final = frozenset({"held", "acquired", "renewed", "released", "expired"})
"""The events that carry a lease."""

RESET: Final = "reset"
"""The client's own kind: the stream broke and was opened again. Forget the
picture: held events and a synced follow, from the current state."""

MAX_LINE: Final = 64 << 10
"""The longest line, and message data, the parser takes: a lease event is a few KiB at most."""


MIN_HEARTBEAT_MS: Final = 10
MAX_HEARTBEAT_MS: Final = 3_600_000
"""The heartbeats a server may say (leasehttp.MinHeartbeat, MaxHeartbeat)."""


def stream_heartbeat(content_type: str | None, heartbeat: str | None) -> float | None:
    """Checks the head of a watch's 200 answer, as the Go and TypeScript clients
    do: its Content-Type must be text/event-stream (else a proxy's page, or
    another service, answered: UnexpectedAnswerError, not retried), and its
    Lease-Heartbeat-Ms, if given, a whole number of milliseconds in [10,
    3600000]. Returns that heartbeat in seconds, or None when not given."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "text/event-stream":
        raise UnexpectedAnswerError(f"lease: watch: HTTP 200 of type {content_type!r}, not an event stream", status=200)
    if heartbeat is None:
        return None
    if not (is_digits(heartbeat) and len(heartbeat) <= 7 and MIN_HEARTBEAT_MS <= int(heartbeat) <= MAX_HEARTBEAT_MS):
        raise UnexpectedAnswerError(
            f"lease: watch: the answer's {HEARTBEAT_HEADER} {heartbeat[:40]!r} is not a heartbeat in "
            f"[{MIN_HEARTBEAT_MS}, {MAX_HEARTBEAT_MS}] ms",
            status=200,
        )
    return int(heartbeat) / 1000.0


class WatchEvent(NamedTuple):
    """One event of a watch. kind is "held" (one per lease at the start, in key
    order), "synced" (the picture is complete), "acquired", "renewed",
    "released", "expired" (changes, in order per key), or "reset" (the stream
    broke and was opened again: a new picture follows; error says why)."""

    kind: str
    lease: Lease | None = None
    error: LeaseError | None = None


class Message(NamedTuple):
    event: str
    data: str
    last_id: str


class EventStreamParser:
    """Reads a text/event-stream: lines end with CRLF, LF or CR; a leading BOM is
    dropped; lines starting with ":" are comments (the heartbeats); a blank
    line dispatches a message that has data; "data" lines join with LF; "id"
    sets the last event ID, "retry" the reconnection time. A line longer than
    MAX_LINE, or bytes that are not UTF-8, raise UnexpectedAnswerError."""

    def __init__(self) -> None:
        # Strict: bytes that are not UTF-8 are an answer no lease server
        # gives (the Go and TypeScript clients refuse them too), not U+FFFD.
        self._dec = codecs.getincrementaldecoder("utf-8")("strict")
        self._pending = ""
        self._after_cr = False
        self._first = True
        self._event = ""
        self._data: list[str] = []
        self._size = 0
        self.last_id = ""
        self.retry: float | None = None

    def feed(self, chunk: bytes) -> list[Message]:
        try:
            text = self._dec.decode(chunk)
        except UnicodeDecodeError as e:
            raise UnexpectedAnswerError(f"lease: the event stream is not UTF-8: {e}") from None
        if self._first and text:
            self._first = False
            if text[0] == "\ufeff":
                text = text[1:]
        out: list[Message] = []
        i = 0
        if self._after_cr and text:
            self._after_cr = False
            if text[0] == "\n":
                i = 1
        n = len(text)
        while i < n:
            j = i
            while j < n and text[j] != "\n" and text[j] != "\r":
                j += 1
            if j == n:
                self._pending += text[i:]
                if len(self._pending) > MAX_LINE:
                    raise UnexpectedAnswerError(f"lease: a line of the event stream is longer than {MAX_LINE}")
                break
            line = self._pending + text[i:j]
            self._pending = ""
            if text[j] == "\r":
                if j + 1 == n:
                    self._after_cr = True
                    i = j + 1
                else:
                    i = j + 2 if text[j + 1] == "\n" else j + 1
            else:
                i = j + 1
            m = self._line(line)
            if m is not None:
                out.append(m)
        return out

    def _line(self, line: str) -> Message | None:
        if line == "":
            if not self._data:
                self._event = ""
                return None
            m = Message(self._event or "message", "\n".join(self._data), self.last_id)
            self._event, self._data, self._size = "", [], 0
            return m
        if line[0] == ":":
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._size += len(value) + 1
            if self._size > MAX_LINE:
                raise UnexpectedAnswerError(f"lease: a message of the event stream has more than {MAX_LINE} characters")
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self.last_id = value
        elif field == "retry":
            if is_digits(value):
                self.retry = int(value) / 1000.0
        return None


def decode(prefix: str, m: Message) -> WatchEvent:
    """The event of one message, or raises: the server's end-of-stream event as
    its error class, and a message no lease server sends as
    UnexpectedAnswerError, since skipping it would leave the picture
    incomplete."""
    what = f"watch {quote(prefix)}"
    if m.event in (EVENT_END, EVENT_END_OLD):
        raise error_from_event(what, m.data)
    if m.event == EVENT_SYNCED:
        return WatchEvent(EVENT_SYNCED)
    if m.event not in LEASE_EVENTS:
        raise UnexpectedAnswerError(f"lease: {what}: the stream sent an event {m.event[:100]!r}, not one of a lease server")
    try:
        v = load_json(m.data)
    except ValueError:
        raise UnexpectedAnswerError(f"lease: {what}: {m.event} event whose data is not JSON: {m.data[:200]!r}") from None
    lease = lease_of(v, what)
    if not lease.key.startswith(prefix):
        raise UnexpectedAnswerError(f"lease: {what}: {m.event} event of key {lease.key!r}, outside the prefix")
    return WatchEvent(m.event, lease)
