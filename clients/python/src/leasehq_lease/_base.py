"""What LeaseClient and AsyncLeaseClient share: their arguments and checks,
the servers, the acquire request and its answer, and the pace of a wait."""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Final, Sequence

from ._endpoints import Endpoints, parse_servers
from ._errors import InvalidError, LeaseError, TooManyWatchersError, UnexpectedAnswerError
from ._events import stream_heartbeat
from ._wire import (
    WAIT_CHUNK,
    DriftMargin,
    Granted,
    Lease,
    acquire_body,
    check_margin,
    check_name,
    check_ttl,
    check_usable,
    default_owner,
    dumps,
    granted_of,
    jittered,
    key_path,
    lease_of,
    loads_object,
    query,
)

if TYPE_CHECKING:
    import ssl

DEFAULT_HEARTBEAT: Final = 15.0
"""lease serve's default --watch-heartbeat, in seconds."""
MISSED_HEARTBEATS: Final = 2
"""A watch stream silent for this many heartbeats, plus SILENCE_SLACK, is
broken: leasehttp.MissedHeartbeats, as the Go and TypeScript clients."""
SILENCE_SLACK: Final = 0.25
"""Seconds of silence a stream gets on top of its missed heartbeats, for a
heartbeat delayed on its way (leasehttp.SilenceSlack)."""
RESUME_FIRST: Final = 0.1
RESUME_MAX: Final = 5.0
"""A broken watch is opened again after 100 ms, doubling to 5 s (as lease watch does)."""


MAX_TIMEOUT: Final = 86_400.0
MAX_HEARTBEAT: Final = 3_600.0
MAX_MISSED_HEARTBEATS: Final = 1_000
"""The most a client takes: a day for a request's timeout, the longest
heartbeat a server may say (1 h), a thousand of them. Beyond, a socket's
timeout overflows: timeout=math.inf was taken, and every request raised a
bare OverflowError."""


def invalid(msg: str) -> InvalidError:
    return InvalidError("lease: " + msg)


def _seconds(v: object, most: float) -> bool:
    """Whether v is a number of seconds in (0, most]: not a bool, not NaN."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= most


class ClientBase:
    """The arguments of a client, checked (see LeaseClient)."""

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        owner: str | None,
        token: str | None,
        ssl_context: ssl.SSLContext | None,
        timeout: float,
        drift_margin: DriftMargin,
        heartbeat: float,
        missed_heartbeats: int,
    ) -> None:
        self.owner: str = check_name("owner", default_owner() if owner is None else owner)
        """The owner name acquisitions are made under."""
        self._owner_json = dumps(self.owner)
        if token is not None and (not isinstance(token, str) or token == "" or not all("!" <= c <= "~" for c in token)):
            raise invalid("token must be printable ASCII without spaces")
        if not _seconds(timeout, MAX_TIMEOUT):
            raise invalid(f"timeout must be seconds in (0, {MAX_TIMEOUT:g}], got {timeout!r}")
        if not _seconds(heartbeat, MAX_HEARTBEAT) or not (
            type(missed_heartbeats) is int and 1 <= missed_heartbeats <= MAX_MISSED_HEARTBEATS
        ):
            raise invalid(
                f"heartbeat must be seconds in (0, {MAX_HEARTBEAT:g}] and missed_heartbeats 1 to {MAX_MISSED_HEARTBEATS}, "
                f"got {heartbeat!r} and {missed_heartbeats!r}"
            )
        self.drift_margin = check_margin(drift_margin)
        self.heartbeat = float(heartbeat)
        self.missed_heartbeats = missed_heartbeats
        self._endpoints = Endpoints(parse_servers(servers))
        self._token = token
        self._ssl = ssl_context
        self._timeout = float(timeout)
        self._gave_up = 0
        """Watch streams this client gave up for silence, which their servers
        may count against --max-watchers until their connections fail
        (_refused_by_own_stream)."""

    def _refused_by_own_stream(self, e: LeaseError) -> bool:
        """Whether e, the refusal of a watch opened again, may be this client's
        own doing, and so a break to watch again after rather than a refusal:
        a 429 too_many_watchers after the client gave a stream up for silence.
        The server cannot tell that stream from a sound one until its
        connection fails at last (minutes of TCP retransmissions; never behind
        a proxy that still takes the bytes), and counts it meanwhile."""
        return self._gave_up > 0 and isinstance(e, TooManyWatchersError)

    @property
    def servers(self) -> list[str]:
        """Every server's URL, in the order given."""
        return [e.url for e in self._endpoints.all]

    @property
    def server(self) -> str:
        """The server requests go to first: the one that last answered."""
        e = self._endpoints
        return e.all[e.current()].url

    def _check(self, key: str, ttl: float, owner: str | None) -> tuple[float, str]:
        check_name("key", key)
        ttl = check_ttl(ttl)
        check_usable(self.drift_margin, ttl)
        return ttl, self.owner if owner is None else check_name("owner", owner)

    def _acquire_request(self, key: str, owner: str, ttl: float, wait: float, plan: WaitPlan | None = None) -> tuple[str, bytes, float]:
        """The path, body and timeout of an acquire that waits up to wait seconds,
        as the request of plan's wait that plan.chunk() has just marked sent."""
        ticket, last = (plan.ticket, plan.last) if plan is not None else ("", False)
        body = acquire_body(self._owner_json if owner == self.owner else owner, ttl, wait, ticket, last)
        return key_path(key, "acquire"), body, self._timeout + wait

    @staticmethod
    def _granted(body: bytes, key: str) -> Granted:
        g = granted_of(loads_object(body, "acquire"), "acquire")
        if g.lease.key != key:
            raise UnexpectedAnswerError(f"lease: acquire {key!r} was answered with key {g.lease.key!r}")
        return g

    @staticmethod
    def _got(body: bytes, key: str) -> Lease:
        """The lease a get of key was answered with, which must be on key."""
        lease = lease_of(loads_object(body, "get"), "get")
        if lease.key != key:
            raise UnexpectedAnswerError(f"lease: get {key!r} was answered with key {lease.key!r}")
        return lease

    def _watch(self, prefix: str) -> tuple[str, float]:
        """A watch's path, and the silence that breaks its stream before the
        server's answer says its heartbeat."""
        path = "/v1/watch" + ("?prefix=" + query({"p": prefix})[3:] if prefix else "")
        return path, self.heartbeat * self.missed_heartbeats + SILENCE_SLACK

    def _silence(self, content_type: str | None, header: str | None) -> float:
        """The silence that breaks a stream whose 200 answer has content_type and
        header as its Lease-Heartbeat-Ms: the server's own heartbeat where it
        says one, else the client's heartbeat. An answer that is not an event
        stream, or says a heartbeat out of range, raises UnexpectedAnswerError
        (stream_heartbeat)."""
        beat = stream_heartbeat(content_type, header)
        return (self.heartbeat if beat is None else beat) * self.missed_heartbeats + SILENCE_SLACK


class WaitPlan:
    """The pace of a waiting acquire: each request waits at the server for up to
    30 s (its chunk) of the caller's wait; a held answer that came before the
    chunk was up (a server that does not wait, or not that long) is paced
    with a backoff from 5 to 500 ms. Every request of one wait carries its
    ticket, so that the server keeps the wait's place in line from one to the
    next (first come, first served however long the wait), and the last says
    so (docs/DESIGN.md, HTTP API)."""

    def __init__(self, wait: float | None) -> None:
        if wait is not None and not (isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait >= 0):
            raise invalid(f"wait must be seconds >= 0, got {wait!r}")
        self.until = float("inf") if wait is None else time.monotonic() + wait
        self._backoff = 0.005
        self.sent = 0.0
        self._chunk = 0.0
        self.ticket = secrets.token_hex(16)
        self.last = False

    def chunk(self) -> float:
        """How long the next request waits; it also marks the request sent."""
        self.sent = time.monotonic()
        self._chunk = max(0.0, min(self.until - self.sent, WAIT_CHUNK))
        self.last = self.until - self.sent <= WAIT_CHUNK
        return self._chunk

    def held(self) -> float | None:
        """After a held answer: the pause before asking again, or None when the wait is over."""
        now = time.monotonic()
        if now >= self.until:
            return None
        if now - self.sent + 0.005 < self._chunk:
            pause = min(jittered(self._backoff), max(0.0, self.until - now))
            self._backoff = min(self._backoff * 2, 0.5)
            return pause
        self._backoff = 0.005
        return 0.0
