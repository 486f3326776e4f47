"""The servers a client talks to, and the multi-endpoint rules of DESIGN.md
("Replicated serve and multi-endpoint clients") that the sync and asyncio
transports share: which server is current, when it moves on, and which
failures a request is sent again after."""

from __future__ import annotations

import select
import threading
import time
from typing import Final, NamedTuple, Protocol, Sequence

from ._errors import InvalidError, LeaseError, TooManyWatchersError, UnavailableError

RETRY_ROUNDS: Final = 3
"""A retried request goes round every endpoint at most this many times."""
RETRY_BACKOFF: Final = 0.025
"""Seconds between rounds, times 4 each round."""
MAX_ANSWER: Final = 64 << 20
"""The most bytes either transport reads of one answer, as the Go client's
(leasehttp) and the TypeScript client's: a longer one is an answer lost
(TooLarge), so that a broken or hostile server cannot make the client
buffer without end."""


MAX_RETRY_AFTER: Final = 60.0
"""The longest pause, in seconds, a watch refused 429 by a rate limit takes
from its answer's Retry-After (busy): a larger one (an hour, a date far
ahead) is taken as this much, as leasehttp's maxRetryAfter."""


class TooLarge(OSError):
    """An answer longer than MAX_ANSWER: the request failed as if its answer was lost."""

    def __init__(self) -> None:
        super().__init__(f"the answer is larger than {MAX_ANSWER} bytes")


STORE_HEADER: Final = "Lease-Store"
"""The answer header naming the store a server serves (lease serve over etcd
sends it: leasehttp.StoreHeader)."""


class OtherStore(OSError):
    """An answer naming another store (STORE_HEADER) than the first answer
    that named one: a replica given another etcd cluster or prefix, where a
    key held through the others looks free. Not used: the request failed as
    if its answer was lost, as in the Go and TypeScript clients."""

    def __init__(self, url: str, first_url: str, store: str, first: str) -> None:
        super().__init__(
            f"{url} serves another store than {first_url} ({STORE_HEADER} {store!r}, not {first!r}): "
            "the servers listed must be replicas of one store (the same --backend; the embedded store has one server); its answer is not used"
        )


class Endpoint(NamedTuple):
    url: str
    tls: bool
    host: str
    port: int
    path: str
    """A path prefix, kept before /v1/... ("" for none)."""
    host_header: str


def parse_servers(servers: str | Sequence[str]) -> list[Endpoint]:
    """The endpoints of a URL, a comma-separated list of URLs, or a list of them."""
    from urllib.parse import urlsplit

    urls = [u.strip() for u in servers.split(",")] if isinstance(servers, str) else [str(u).strip() for u in servers]
    if not urls or any(u == "" for u in urls):
        raise InvalidError(f"lease: no server URL in {servers!r}")
    out = []
    for u in urls:
        p = urlsplit(u)
        if p.scheme not in ("http", "https") or not p.hostname:
            raise InvalidError(f"lease: server URL {u!r} must be http:// or https:// with a host")
        if p.query or p.fragment or p.username or p.password:
            raise InvalidError(f"lease: server URL {u!r} may not have a query, a fragment or credentials (use token=)")
        tls = p.scheme == "https"
        try:
            port = p.port or (443 if tls else 80)
        except ValueError:
            raise InvalidError(f"lease: server URL {u!r} has a bad port") from None
        host = p.hostname
        host_header = p.netloc
        out.append(Endpoint(u, tls, host, port, p.path.rstrip("/"), host_header))
    return out


class Endpoints:
    """Rule 1: every request goes to the current endpoint, at first the first
    listed, then the one that last worked. Rules 2 and 3: a request that never
    left, was answered 503 or lost its answer moves it on by one; several
    failing on one endpoint at once move it on once (move_on names the index
    the request went to)."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        self.all = endpoints
        self._cur = 0
        self._lock = threading.Lock()
        self._store: tuple[str, str] | None = None  # the first store named, and the URL that named it

    def check_store(self, used: int, store: str | None) -> None:
        """Raises OtherStore if store, the STORE_HEADER of an answer from
        endpoint used, names another store than the first answer that named
        one; None or "" (a server without a store id, an older one) is not
        checked."""
        if not store:
            return
        url = self.all[used].url
        with self._lock:
            if self._store is None:
                self._store = (store, url)
                return
            first, first_url = self._store
        if store != first:
            raise OtherStore(url, first_url, store, first)

    def current(self) -> int:
        return self._cur

    def move_on(self, used: int) -> None:
        with self._lock:
            if self._cur == used:
                self._cur = (used + 1) % len(self.all)


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


def spoke_unasked(sock: _HasFileno | None) -> bool:
    """Whether an idle keep-alive connection has something to read: the
    server's close (a restart, its idle timeout, a cut link) or bytes it
    should never have sent, since a server sends nothing unasked. Asked of
    the kernel at the moment of reuse, not of an event loop's last look at
    the socket, which can predate the close. Such a connection is dropped
    before a request is written to it, so that an acquire is not lost to it
    with an unknown outcome. poll() where there is one: select() refuses a
    descriptor at or above FD_SETSIZE (1024), which a busy process has."""
    if sock is None:
        return True
    try:
        fd = sock.fileno()
        if fd < 0:
            return True
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(fd, select.POLLIN)
            return bool(p.poll(0))
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Failed(Exception):
    """A request that got no answer; never_left says it never reached a server."""

    def __init__(self, cause: BaseException, never_left: bool) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.never_left = never_left


class Plan:
    """Whether a failed request is sent again (rule 4): one that never left,
    always; one that lost its answer or was answered 503, only if it is
    harmless to repeat (every request but acquire). Each retry goes to the
    next endpoint at once; a backoff comes only after every endpoint has
    failed in turn, up to RETRY_ROUNDS rounds. A plan with an end (until, on
    time.monotonic()'s clock) sends nothing past it, and bounds each try by
    it: the time a release or a renewal is worth, whatever the retries."""

    def __init__(self, n: int, repeatable: bool, until: float | None = None) -> None:
        self.n = n
        self.repeatable = repeatable
        self.tries = 0
        self.until = until

    def again(self, never_left: bool) -> float | None:
        """The pause before sending again, or None to give up."""
        if not never_left and not self.repeatable:
            return None
        self.tries += 1
        if self.tries >= self.n * RETRY_ROUNDS:
            return None
        pause = 0.0 if self.tries % self.n else float(RETRY_BACKOFF * 4.0 ** (self.tries // self.n - 1))
        if self.until is not None and time.monotonic() + pause >= self.until:
            return None
        return pause

    def timeout(self, t: float) -> float:
        """The timeout of the next try: t, or less as the plan's end nears."""
        if self.until is None:
            return t
        return max(0.001, min(t, self.until - time.monotonic()))


def hedge_after(ttl: float) -> float:
    """Seconds after which a renewal of ttl (the shortest of a batch's) still
    unanswered is also sent to the next endpoint, on a list of several
    (rule 4): a holder renews a third of its TTL after its last renewal and
    keeps the lease until about its TTL, and a replica that takes the
    request and never answers it (cut from etcd by a silent link) kept it
    until the safe deadline, the lease lost though the next replica could
    renew it. The first request goes on, so a replica merely slow still
    renews in time; the first outcome that is not a failure (taken) is
    taken, the other request then abandoned. Both transports' renew()."""
    return ttl / 3


def taken(e: BaseException | None) -> bool:
    """Whether a hedged renewal that ended with e (None: a 2xx answer) is
    taken: anything but a failure to get an answer (UnavailableError, a 503
    included), which leaves the other request's outcome to stand."""
    return not isinstance(e, UnavailableError)


def unanswered(method: str, path: str, url: str, cause: BaseException, never_left: bool, repeatable: bool) -> UnavailableError:
    """The error of a request that got no answer and will not be sent again."""
    what = "could not reach" if never_left else "lost the answer of"
    outcome = "" if never_left or repeatable else "; its outcome is unknown"
    return UnavailableError(f"lease: {method} {path}: {what} {url}: {cause!r}{outcome}")


def unopened(url: str, cause: BaseException) -> UnavailableError:
    """The error of a watch that could not be opened on url, the last tried."""
    if isinstance(cause, OtherStore):
        return UnavailableError(f"lease: watch: {cause}")
    return UnavailableError(f"lease: watch: could not reach {url}: {cause!r}")


def retry_after(v: str | None, now: float) -> float:
    """The seconds an answer's Retry-After value v asks for, delay-seconds or
    an HTTP date (now being time.time()), at most MAX_RETRY_AFTER; 0 when
    absent, past or unreadable. As leasehttp's retryAfterOf: the seconds
    are ASCII digits up to 2^32 - 1 (no sign, no fraction); anything else
    is read as a date, or not at all."""
    v = (v or "").strip()
    if not v:
        return 0.0
    if v.isascii() and v.isdigit():
        # Not int(v) at once: over 4,300 digits it raises ValueError.
        digits = v.lstrip("0") or "0"
        if len(digits) <= 10 and int(digits) <= 0xFFFFFFFF:
            return min(float(int(digits)), MAX_RETRY_AFTER)
    from datetime import timezone
    from email.utils import parsedate_to_datetime

    try:
        at = parsedate_to_datetime(v)
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        d = at.timestamp() - now
    except (ValueError, TypeError, IndexError, OverflowError):
        return 0.0
    return min(max(d, 0.0), MAX_RETRY_AFTER)


def watch_refused(err: LeaseError, status: int, retry_after_value: str | None) -> LeaseError:
    """The error of a watch refused with err, its answer's status and
    Retry-After: a 429 other than the server's own bound on watchers
    (too_many_watchers) is a rate limit in front of the server, "too many,
    try later", and so a break (an UnavailableError whose retry_after the
    watch pauses for at least: busy) rather than a refusal, as in the Go
    client (leasehttp's busyError, which lease.Follow pauses for) and the
    TypeScript client. Any other refusal stands."""
    if status != 429 or isinstance(err, TooManyWatchersError):
        return err
    after = retry_after(retry_after_value, time.time())
    e = UnavailableError(f"{err.message} (busy: watch again {f'after {after:g} s' if after else 'later'})", status=status)
    e.retry_after = after
    e.__cause__ = err
    return e
