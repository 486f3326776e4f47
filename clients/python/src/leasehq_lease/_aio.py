"""The asyncio client: AsyncLeaseClient, AsyncHold, AsyncWatch, AsyncElector
and AsyncSemaphore, the sync API's names on asyncio, with no third-party
library. HTTP/1.1 over asyncio streams, kept alive in a pool per server,
by the same multi-endpoint rules as the sync client (_endpoints).

A hold's loss sets its ``lost`` asyncio.Event and, inside ``async with``,
cancels the task running the block: the block ends with LeaseLostError,
as asyncio.timeout() ends one with TimeoutError."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
import time
from types import TracebackType
from typing import Any, AsyncGenerator, Awaitable, Callable, Coroutine, Final, Generator, Self, Sequence, TypeVar

from ._base import DEFAULT_HEARTBEAT, MISSED_HEARTBEATS, RESUME_FIRST, RESUME_MAX, ClientBase, WaitPlan
from ._election import POLL_FIRST, POLL_MAX, Follower, Leader, SemaphoreBase, leader_of
from ._endpoints import (
    MAX_ANSWER, STORE_HEADER, Endpoints, Failed, Plan, TooLarge, hedge_after, spoke_unasked, taken, unanswered, unopened,
    watch_refused,
)
from ._errors import (
    HeldError,
    LeaseError,
    LeaseLostError,
    LeaseReleasedError,
    NotFoundError,
    NotHeldError,
    TooManyWatchersError,
    UnavailableError,
    UnexpectedAnswerError,
    UnsupportedError,
    error_from_answer,
)
from ._events import EVENT_SYNCED, HEARTBEAT_HEADER, RESET, EventStreamParser, WatchEvent, decode
from ._hold import RELEASE_TIMEOUT, HoldBase, due_now, refused_whole, release_until
from ._wire import (
    MAX_RENEW_BATCH,
    PREFER_MINIMAL,
    RENEW_BATCH_PATH,
    DriftMargin,
    Granted,
    Lease,
    LeasePage,
    check_name,
    check_ttl,
    granted_of,
    jittered,
    key_path,
    list_path,
    loads_object,
    page_of,
    release_body,
    renew_batch_body,
    renew_body,
    renew_results,
    same_lease,
)

T = TypeVar("T")
IDLE_KEEP: Final = 60.0
MAX_HEADER: Final = 64 << 10
_PREFER_MINIMAL: Final = f"Prefer: {PREFER_MINIMAL}\r\n".encode()

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _within(aw: Awaitable[T], timeout: float | None) -> T:
    """aw, awaited in the calling task for at most timeout seconds (None: no
    bound); past it, TimeoutError. Not asyncio.wait_for: Python 3.11's runs
    aw in a task of its own and, cancelled as that task finishes, returns
    its result and drops the cancellation, so that a cancelled task went on
    (a watch read on, a granted wait went on with the lease). Nor 3.11's
    asyncio.timeout, which takes its own expiry for a cancellation from
    outside in a task that kept an earlier one (cancelling() above 0, no
    uncancel()): this judges by the count at its start, as 3.12's does."""
    if timeout is None:
        return await aw
    current = asyncio.current_task()
    assert current is not None
    task: asyncio.Task[Any] = current
    before = task.cancelling()
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(max(0.0, timeout), expire)
    try:
        return await aw
    except asyncio.CancelledError:
        if expired:
            expired = False
            if task.uncancel() <= before:
                raise TimeoutError from None
        raise
    finally:
        timer.cancel()
        if expired:
            task.uncancel()  # expired as aw ended otherwise: the request is taken back


class _Answer:
    __slots__ = ("status", "body", "close", "store")

    def __init__(self, status: int, body: bytes, close: bool, store: str | None) -> None:
        self.status = status
        self.body = body
        self.close = close
        self.store = store


async def _read_head(r: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await r.readline()
    if not line:
        raise ConnectionResetError("the server closed the connection")
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise UnexpectedAnswerError(f"lease: not an HTTP answer: {line[:100]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    size = 0
    while True:
        h = await r.readline()
        size += len(h)
        if size > MAX_HEADER or not h:
            raise ConnectionResetError("the answer's header broke off")
        if h in (b"\r\n", b"\n"):
            break
        name, _, value = h.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


class _Chunks:
    """Reads a chunked body in pieces of at most `most` bytes, however large
    the chunks the server declares: a stream's reader then sees a line that
    never ends before it is buffered whole."""

    def __init__(self, r: asyncio.StreamReader) -> None:
        self._r = r
        self._left = 0  # bytes of the current chunk not read yet
        self._done = False

    async def read(self, most: int) -> bytes:
        """The next piece of the body; b"" at its end."""
        r = self._r
        if self._done:
            return b""
        if self._left == 0:
            size_line = await r.readline()
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise ConnectionResetError(f"bad chunk size {size_line[:40]!r}") from None
            if size < 0:
                raise ConnectionResetError(f"bad chunk size {size_line[:40]!r}")
            if size == 0:
                while (await r.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                self._done = True
                return b""
            self._left = size
        data = await r.readexactly(min(self._left, most))
        self._left -= len(data)
        if self._left == 0:
            await r.readexactly(2)
        return data


async def _read_body(r: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bool]:
    """An answer's body, at most MAX_ANSWER bytes (else TooLarge), and whether
    the connection ends with it (no length given)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = _Chunks(r)
        parts = []
        size = 0
        while chunk := await chunks.read(MAX_ANSWER + 1 - size):
            parts.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER:
                raise TooLarge()
        return b"".join(parts), False
    if "content-length" in headers:
        length = headers["content-length"]
        if not length.isascii() or not length.isdigit():
            raise ConnectionResetError(f"bad Content-Length {length[:40]!r}")
        if int(length) > MAX_ANSWER:
            raise TooLarge()
        return await r.readexactly(int(length)), False
    data = bytearray()
    while more := await r.read(MAX_ANSWER + 1 - len(data)):
        data += more
        if len(data) > MAX_ANSWER:
            raise TooLarge()
    return bytes(data), True


logger = logging.getLogger("leasehq_lease")
"""The package's logger: errors of the user's callbacks, which the client
calls from its own tasks and so has nobody to raise them to."""

Late = Callable[["_Answer"], Awaitable[None]]
"""What to do with the answer to a request cancelled while it waited for it."""


def _seen(t: asyncio.Task[Any]) -> None:
    """Marks a background task's error seen (asyncio logs an unseen one when
    the task is collected): it was the awaiter's to take, or nobody's."""
    if not t.cancelled():
        t.exception()


class _Transport:
    def __init__(self, endpoints: Endpoints, token: str | None, ssl_context: ssl.SSLContext | None, timeout: float) -> None:
        self.endpoints = endpoints
        self.timeout = timeout
        self._ssl = ssl_context
        self._idle: list[list[tuple[_Conn, float]]] = [[] for _ in endpoints.all]
        auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
        self._head = [f"Host: {e.host_header}\r\n{auth}".encode("latin-1") for e in endpoints.all]
        self._lingering: set[asyncio.Task[Any]] = set()  # background(): given-up waits, leases given back, releases

    async def close(self) -> None:
        lingering = list(self._lingering)
        for t in lingering:
            t.cancel()  # as the Go client's Close stops its background work
        idle, self._idle = self._idle, [[] for _ in self.endpoints.all]
        for conns in idle:
            for (_, w), _ in conns:
                w.close()
        if lingering:
            # Ended, and their connections closed, when close() returns.
            await asyncio.wait(lingering)

    async def connect(self, i: int, timeout: float) -> _Conn:
        ep = self.endpoints.all[i]
        ctx: ssl.SSLContext | None = None
        if ep.tls:
            ctx = self._ssl if self._ssl is not None else ssl.create_default_context()
        try:
            return await _within(
                asyncio.open_connection(ep.host, ep.port, ssl=ctx, server_hostname=ep.host if ctx else None), timeout
            )
        except (OSError, asyncio.TimeoutError) as e:
            raise Failed(e, True) from e

    def _get(self, i: int) -> _Conn | None:
        pool = self._idle[i]
        now = time.monotonic()
        while pool:
            c, since = pool.pop()
            if now - since < IDLE_KEEP and not c[0].at_eof() and not spoke_unasked(c[1].get_extra_info("socket")):
                return c
            c[1].close()
        return None

    def _request_bytes(self, i: int, method: str, path: str, body: bytes | None, accept: str) -> bytes:
        ep = self.endpoints.all[i]
        head = f"{method} {ep.path}{path} HTTP/1.1\r\nAccept: {accept}\r\n".encode("utf-8") + self._head[i]
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        if path == RENEW_BATCH_PATH:
            head += _PREFER_MINIMAL
        return head + b"\r\n" + (body or b"")

    async def _once(
        self, i: int, method: str, path: str, body: bytes | None, timeout: float, late: Late | None = None
    ) -> _Answer:
        c = self._get(i)
        if c is None:
            c = await self.connect(i, timeout)
        r, w = c
        ok = False
        try:
            w.write(self._request_bytes(i, method, path, body, "application/json"))
            if late is None:
                a = await _within(self._answer(r), timeout)
            else:
                a = await self._answer_or_linger(r, w, timeout, late)
            self.endpoints.check_store(i, a.store)
            ok = True
        except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            raise Failed(e, False) from e
        except asyncio.CancelledError:
            ok = late is not None  # _answer_or_linger closed the connection, or lingers on it
            raise
        finally:
            if not ok:
                w.close()  # also on cancellation: the server sees the hang-up
        if a.close:
            w.close()
        else:
            self._idle[i].append((c, time.monotonic()))
        return a

    async def _answer_or_linger(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, timeout: float, late: Late) -> _Answer:
        """The answer, read by a task of its own that a cancellation does not
        end: the caller is cancelled at once, and the connection lingers,
        half-closed, in the background until the answer comes, which is
        handed to late (a grant that crossed the hang-up, given back). Where
        the connection cannot be half-closed (TLS) it is closed, and the
        outcome is unknown, as in the Go client."""
        reading = asyncio.ensure_future(self._answer(r))
        try:
            return await _within(asyncio.shield(reading), timeout)
        except asyncio.CancelledError:
            answered = reading.done() and not reading.cancelled() and reading.exception() is None
            if answered:
                self._linger(reading, w, late)  # read, but not used: late has it
                raise
            if reading.done() or not w.can_write_eof():
                reading.cancel()
                w.close()
                raise
            try:
                w.write_eof()
            except OSError:
                reading.cancel()
                w.close()
                raise
            self._linger(reading, w, late)
            raise
        except BaseException:
            reading.cancel()
            raise

    def _linger(self, reading: asyncio.Future[_Answer], w: asyncio.StreamWriter, late: Late) -> None:
        async def wait() -> None:
            try:
                a = await _within(reading, self.timeout)
            except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError, LeaseError):
                return
            finally:
                w.close()
            await late(a)

        self.background(wait())

    def background(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Runs work in a task of its own that close() cancels, as the Go
        client's Close stops its background work. Its error counts as seen:
        a caller that wants it awaits the task."""
        t = asyncio.get_running_loop().create_task(work, name="leasehq-lease-background")
        self._lingering.add(t)
        t.add_done_callback(self._lingering.discard)
        t.add_done_callback(_seen)
        return t

    async def _answer(self, r: asyncio.StreamReader) -> _Answer:
        status, headers = await _read_head(r)
        body, close = await _read_body(r, headers)
        return _Answer(status, body, close or headers.get("connection", "").lower() == "close", headers.get(STORE_HEADER.lower()))

    async def request(
        self, method: str, path: str, body: bytes | None = None, *, repeatable: bool, timeout: float | None = None,
        late: Late | None = None, until: float | None = None,
    ) -> _Answer:
        """Sends a request by the multi-endpoint rules and returns a 2xx answer;
        an error answer raises its class, a request that got none an
        UnavailableError. late, if given, gets the answer of a request
        cancelled while it waited for it (see _answer_or_linger). until
        (time.monotonic()) ends the tries, as in the sync Transport.request."""
        plan = Plan(len(self.endpoints.all), repeatable, until)
        t = self.timeout if timeout is None else timeout
        while True:
            i = self.endpoints.current()
            try:
                a = await self._once(i, method, path, body, plan.timeout(t), late)
            except Failed as f:
                self.endpoints.move_on(i)
                pause = plan.again(f.never_left)
                if pause is None:
                    url = self.endpoints.all[i].url
                    raise unanswered(method, path, url, f.cause, f.never_left, repeatable) from f.cause
                await asyncio.sleep(pause)
                continue
            if a.status < 300:
                return a
            err = error_from_answer(a.status, a.body)
            if a.status == 503:
                self.endpoints.move_on(i)
                pause = plan.again(False)
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
            raise err

    async def renew(self, path: str, body: bytes, ttl: float, *, timeout: float, until: float | None = None) -> _Answer:
        """As the sync Transport.renew: on several endpoints, a renewal still
        unanswered after hedge_after(ttl) is also sent to the next, the first
        outcome taken standing and the other request cancelled."""
        if len(self.endpoints.all) < 2:
            return await self.request("POST", path, body, repeatable=True, timeout=timeout, until=until)

        def send() -> asyncio.Task[_Answer]:
            return asyncio.get_running_loop().create_task(
                self.request("POST", path, body, repeatable=True, timeout=timeout, until=until), name="leasehq-lease-renewal"
            )

        first = self.endpoints.current()
        runs = [send()]
        try:
            done, _ = await asyncio.wait(runs, timeout=hedge_after(ttl))
            if done:
                return runs[0].result()
            self.endpoints.move_on(first)  # unanswered so far: later requests go to the next
            runs.append(send())
            pending = set(runs)
            while True:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for r in done:
                    if taken(r.exception()):
                        return r.result()
                if not pending:
                    return done.pop().result()  # both failed
                # The first to end failed: the other's outcome stands.
        finally:
            for r in runs:
                r.cancel()  # the request not taken: its connection is closed
            await asyncio.wait(runs)
            for r in runs:
                if not r.cancelled():
                    r.exception()  # seen, not logged as never retrieved

    async def stream(self, path: str, timeout: float) -> tuple[_Conn, dict[str, str], int]:
        plan = Plan(len(self.endpoints.all), True)
        while True:
            i = self.endpoints.current()
            try:
                c = await self.connect(i, timeout)
                try:
                    c[1].write(self._request_bytes(i, "GET", path, None, "text/event-stream"))
                    status, headers = await _within(_read_head(c[0]), timeout)
                    self.endpoints.check_store(i, headers.get(STORE_HEADER.lower()))
                except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                    c[1].close()
                    raise Failed(e, False) from e
                except BaseException:
                    # Cancelled: hang up, or the connection, registered with
                    # the loop, stays open until the loop closes (and the
                    # server counts the stream meanwhile).
                    c[1].close()
                    raise
            except Failed as f:
                self.endpoints.move_on(i)
                pause = plan.again(True)
                if pause is None:
                    raise unopened(self.endpoints.all[i].url, f.cause) from f.cause
                await asyncio.sleep(pause)
                continue
            if status == 200:
                return c, headers, i
            try:
                a, _ = await _within(_read_body(c[0], headers), timeout)
            except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                a = b""
            finally:
                c[1].close()
            err = error_from_answer(status, a)
            if status == 503:
                self.endpoints.move_on(i)
                pause = plan.again(False)
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
            raise watch_refused(err, status, headers.get("retry-after"))


class _LossEvent(asyncio.Event):
    """The hold's lost event. is_set judges the deadline itself, so that a
    step that blocked the event loop past it (CPU-bound work, a blocking
    call), which kept the deadline's timer from running, sees the loss at
    once (I5), as the sync hold's lost event does."""

    def __init__(self, hold: AsyncHold) -> None:
        super().__init__()
        self._hold = hold

    def is_set(self) -> bool:
        self._hold._judge()
        return super().is_set()


class AsyncHold(HoldBase):
    """A lease the asyncio client holds and renews in the background (one task
    per client renewing all its holds, batched). ``lost`` is an asyncio.Event
    set at the I5 deadline or when the server says the lease is gone; inside
    ``async with`` the loss also cancels the task running the block, which
    then ends with LeaseLostError (from the CancelledError, which the caller
    can await and catch). ``check()`` raises LeaseLostError once the lease may
    be gone. The end of the block releases the lease (quietly after a loss)."""

    def __init__(self, renewer: _Renewer, g: Granted, sent: float, ttl: float, margin: DriftMargin) -> None:
        super().__init__(g, sent, ttl, margin)
        self._renewer = renewer
        self._timer: asyncio.TimerHandle | None = None
        self._scope: asyncio.Task[Any] | None = None
        self._cancelled = False
        self._cancelling = 0  # the scope's cancel requests pending when the block began
        self._sending: asyncio.Task[_Answer] | None = None  # the release request, once sent
        self.lost: asyncio.Event = _LossEvent(self)
        """Set when the lease may be gone."""
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(self._state.deadline, self._judge)

    def _lose(self, why: str) -> None:
        s = self._state
        if s.ended is not None:
            return
        s.ended = s.lost_error(why)
        self._renewer.holds.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        self.lost.set()
        if self._scope is not None and not self._scope.done():
            self._cancelled = True
            self._scope.cancel(str(s.ended))

    def _renewed(self, g: Granted, sent: float) -> None:
        if self._state.ended is None:
            self._state.renewed(g, sent)
            self._arm()

    async def release(self) -> None:
        """As Hold.release: stops renewal, marks the hold released and releases
        the lease on the server; raises the LeaseLostError, sending nothing,
        if it had been lost. Calling it again does nothing. Calls from several
        tasks at once send one release: the first says what happened, and the
        others return once it has ended. A caller cancelled meanwhile is
        cancelled at once, and the release goes on in a task of its own (within
        the bounds of a release; the client's close() ends it), rather than
        leave the lease held, renewed by nobody, until its TTL."""
        if self._released:
            sending = self._sending
            if sending is not None and not sending.done():
                # Waited for, not awaited: a cancellation of this caller
                # leaves the first's release alone.
                await asyncio.wait((sending,))
            return
        task = asyncio.current_task()
        before = task.cancelling() if task is not None else 0
        sending = self._start_release()
        try:
            await asyncio.shield(sending)
        except asyncio.CancelledError:
            if sending.cancelled() and task is not None and task.cancelling() <= before:
                # Not this caller's cancellation: the client's close() ended
                # the release on its way.
                raise UnavailableError(
                    f"lease: release {json.dumps(self.key)} (token {self.token}): the client was closed before it was answered"
                ) from None
            raise

    def _start_release(self) -> asyncio.Task[_Answer]:
        """release()'s first half, which no cancellation can cut: marks the hold
        released, stops its renewal and starts the release request in a task
        of its own; raises the LeaseLostError, sending nothing, if it had been
        lost."""
        self._released = True
        self._judge()
        s = self._state
        lost = s.ended if isinstance(s.ended, LeaseLostError) else None
        if s.ended is None:
            s.ended = LeaseReleasedError(self.key, self.token)
        if self._timer is not None:
            self._timer.cancel()
        self._renewer.holds.discard(self)
        if lost is not None:
            raise lost  # as Hold.release: too late to matter
        t = self._renewer.transport
        self._sending = t.background(
            t.request(
                "POST", key_path(self.key, "release"), release_body(s.granted), repeatable=True,
                timeout=RELEASE_TIMEOUT, until=release_until(s),
            )
        )
        return self._sending

    def _give_back(self) -> None:
        """Releases a hold that never reached its caller (an Elector's or a
        Semaphore's acquire cancelled after the grant), in a task of its own:
        left alone, the client renewed it for as long as it ran."""
        if self._released:
            return
        try:
            self._start_release()
        except LeaseError:
            pass  # lost already: nothing to give back

    async def __aenter__(self) -> Self:
        self._scope = asyncio.current_task()
        self._cancelling = self._scope.cancelling() if self._scope is not None else 0
        self._judge()
        if self._state.ended is not None:
            self._scope = None
            raise self._state.ended
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        scope, self._scope = self._scope, None
        try:
            await self.release()
        except LeaseError:
            pass  # a loss is told below or was told by lost/check(); an unreleased lease expires at its TTL
        if self._cancelled and scope is not None:
            # The loss's cancel request is taken back whatever the block made
            # of it, as asyncio.timeout() does: left counted, it made the
            # task look cancelled (and every later asyncio.timeout() of the
            # task raise CancelledError, on Python 3.11). Only a block that
            # ended by that CancelledError, with no request made since it
            # began pending, ends with LeaseLostError.
            self._cancelled = False
            if scope.uncancel() <= self._cancelling and isinstance(e, asyncio.CancelledError):
                ended = self._state.ended
                assert isinstance(ended, LeaseLostError)
                raise ended from e


RENEW_EACH_IN_FLIGHT: Final = 8
"""How many renewals of a batch refused whole are asked again at once."""


class _Renewer:
    """One task per client renewing every hold, batched through POST /v1/renew."""

    def __init__(self, transport: _Transport) -> None:
        self.transport = transport
        self.holds: set[AsyncHold] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._wake_at = float("inf")

    def add(self, h: AsyncHold) -> None:
        self.holds.add(h)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="leasehq-lease-renewer")
        elif h._state.renew_at < self._wake_at:
            self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while self.holds:
            now = time.monotonic()
            due = [h for h in due_now(self.holds, now) if isinstance(h, AsyncHold)]
            if not due:
                self._wake_at = min(h._state.renew_at for h in self.holds)
                self._wake.clear()
                try:
                    await _within(self._wake.wait(), max(0.0, self._wake_at - now))
                except asyncio.TimeoutError:
                    pass
                continue
            self._wake_at = float("-inf")
            due.sort(key=lambda h: h._state.renew_at)
            await asyncio.gather(*(self._renew(due[i : i + MAX_RENEW_BATCH]) for i in range(0, len(due), MAX_RENEW_BATCH)))

    async def _renew(self, batch: list[AsyncHold]) -> None:
        sent = time.monotonic()
        granted = [h._state.granted for h in batch]
        body = renew_batch_body([(g, h._state.ttl) for g, h in zip(granted, batch)])
        until = min(h._state.deadline for h in batch)
        timeout = max(0.01, until - sent)
        try:
            ttl = min(h._state.effective_ttl() for h in batch)
            a = await self.transport.renew(RENEW_BATCH_PATH, body, ttl, timeout=timeout, until=until)
            results = renew_results(a.body, granted)
        except LeaseError as e:
            if refused_whole(e, len(batch)):
                slots = asyncio.Semaphore(RENEW_EACH_IN_FLIGHT)

                async def alone(h: AsyncHold) -> None:
                    async with slots:
                        await self._renew([h])

                await asyncio.gather(*(alone(h) for h in batch))
                return
            now = time.monotonic()
            for h in batch:
                h._state.retry_soon(now)
            return
        now = time.monotonic()
        for h, g, r in zip(batch, granted, results):
            if isinstance(r, Granted):
                if not same_lease(g, r):
                    h._lose(f"the renewal was answered with another lease (token {r.lease.token})")
                elif now >= h._state.deadline:
                    h._lose("the renewal's answer came after the safe deadline")
                else:
                    h._renewed(r, sent)
            elif r == "not_held":
                h._lose("the server no longer holds it")
            else:
                h._state.retry_soon(now)


class _Acquiring:
    """What AsyncLeaseClient.acquire returns: await it for the hold, or use it
    with ``async with`` to hold the lease for the block."""

    def __init__(self, make: Callable[[], Coroutine[Any, Any, AsyncHold]]) -> None:
        self._make = make
        self._hold: AsyncHold | None = None

    def __await__(self) -> Generator[Any, None, AsyncHold]:
        return self._make().__await__()

    async def __aenter__(self) -> AsyncHold:
        self._hold = await self._make()
        return await self._hold.__aenter__()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        assert self._hold is not None
        await self._hold.__aexit__(et, e, tb)


class AsyncLeaseClient(ClientBase):
    """The asyncio client, with LeaseClient's arguments and methods as coroutines
    (see LeaseClient). Make it inside the event loop that uses it."""

    def __init__(
        self,
        servers: str | Sequence[str],
        *,
        owner: str | None = None,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        drift_margin: DriftMargin = DriftMargin(),
        heartbeat: float = DEFAULT_HEARTBEAT,
        missed_heartbeats: int = MISSED_HEARTBEATS,
    ) -> None:
        super().__init__(
            servers, owner=owner, token=token, ssl_context=ssl_context, timeout=timeout,
            drift_margin=drift_margin, heartbeat=heartbeat, missed_heartbeats=missed_heartbeats,
        )
        self._transport = _Transport(self._endpoints, token, ssl_context, self._timeout)
        self._renewer = _Renewer(self._transport)

    async def close(self) -> None:
        """Stops renewing (holds then run to their deadlines) and closes the pooled connections."""
        await self._renewer.close()
        await self._transport.close()

    async def __aenter__(self) -> AsyncLeaseClient:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    def acquire(self, key: str, ttl: float = 10.0, *, wait: float | None = None, owner: str | None = None) -> _Acquiring:
        """Waits until it holds key (see LeaseClient.acquire): ``hold = await
        client.acquire(key)``, or ``async with client.acquire(key) as hold:``,
        whose block is cancelled if the lease is lost. Cancelling the wait
        half-closes its connection: the server releases a lease granted at
        that moment, and one granted just before, whose answer crossed the
        hang-up, is read in the background and released."""
        ttl, owner = self._check(key, ttl, owner)
        return _Acquiring(functools.partial(self._acquire_wait, key, ttl, WaitPlan(wait), owner))

    async def _acquire_wait(self, key: str, ttl: float, plan: WaitPlan, owner: str) -> AsyncHold:
        while True:
            chunk = plan.chunk()
            try:
                g = await self._acquire(key, owner, ttl, chunk, plan)
            except HeldError:
                pause = plan.held()
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                continue
            h = await self._hold(g, plan.sent, ttl)
            if h is not None:
                return h

    def try_acquire(self, key: str, ttl: float = 10.0, *, owner: str | None = None) -> _Acquiring:
        """Tries once: a held key raises HeldError at once. Await it, or use it with ``async with``."""
        ttl, owner = self._check(key, ttl, owner)
        return _Acquiring(functools.partial(self._try, key, ttl, owner))

    async def _try(self, key: str, ttl: float, owner: str) -> AsyncHold:
        sent = time.monotonic()
        g = await self._acquire(key, owner, ttl, 0.0)
        h = await self._hold(g, sent, ttl)
        if h is None:
            raise UnavailableError(f"lease: {json.dumps(key)} was granted (token {g.lease.token}) but expired before its answer could be used")
        return h

    async def _acquire(self, key: str, owner: str, ttl: float, wait: float, plan: WaitPlan | None = None) -> Granted:
        path, body, timeout = self._acquire_request(key, owner, ttl, wait, plan)

        async def late(a: _Answer) -> None:
            # Cancelled as the server granted it: the grant crossed the
            # hang-up (the server releases one it grants after seeing it,
            # answering 499), so give it back.
            if a.status == 200:
                try:
                    g = self._granted(a.body, key)
                except LeaseError:
                    return
                await self._give_back(g)

        a = await self._transport.request("POST", path, body, repeatable=False, timeout=timeout, late=late)
        return self._granted(a.body, key)

    async def _hold(self, g: Granted, sent: float, ttl: float) -> AsyncHold | None:
        """As LeaseClient._hold."""
        if time.monotonic() - sent >= ttl / 3:
            again = time.monotonic()
            try:
                a = await self._transport.renew(key_path(g.lease.key, "renew"), renew_body(g, ttl), ttl, timeout=ttl)
                r = granted_of(loads_object(a.body, "renew"), "renew")
                if not same_lease(g, r):
                    raise UnavailableError("lease: renewal answered with another lease")
            except NotHeldError:
                return None
            except LeaseError:
                await self._give_back(g)
                raise
            except asyncio.CancelledError:
                # The caller is cancelled at once; the lease it will never
                # hold is given back in the background.
                self._transport.background(self._give_back(g))
                raise
            g, sent = r, again
        h = AsyncHold(self._renewer, g, sent, ttl, self.drift_margin)
        if time.monotonic() >= h.deadline:
            await self._give_back(g)
            raise UnavailableError(
                f"lease: {json.dumps(g.lease.key)} was granted (token {g.lease.token}), but the answer came "
                f"past the safe deadline of a {ttl} s lease; released it"
            )
        self._renewer.add(h)
        return h

    async def _give_back(self, g: Granted) -> None:
        try:
            await self._transport.request("POST", key_path(g.lease.key, "release"), release_body(g), repeatable=True)
        except LeaseError:
            pass

    async def get(self, key: str) -> Lease | None:
        """The unexpired lease on key, or None."""
        check_name("key", key)
        try:
            a = await self._transport.request("GET", key_path(key), repeatable=True)
        except NotFoundError:
            return None
        return self._got(a.body, key)

    async def list(self, prefix: str = "", *, limit: int | None = None, after: str = "") -> LeasePage:
        """One page of the leases under prefix (see LeaseClient.list)."""
        if prefix:
            check_name("prefix", prefix)
        a = await self._transport.request("GET", list_path(prefix, limit, after), repeatable=True)
        return page_of(a.body)

    async def all(self, prefix: str = "", *, limit: int | None = None) -> AsyncGenerator[Lease, None]:
        """Walks every page of list: ``async for lease in client.all("jobs/")``."""
        after = ""
        while True:
            page = await self.list(prefix, limit=limit, after=after)
            for lease in page.leases:
                yield lease
            if not page.next:
                return
            if page.next == after:
                raise UnavailableError(f"lease: list {prefix!r}: the server's next did not move past {after!r}")
            after = page.next

    def watch(self, prefix: str = "", *, reconnect: bool = True) -> AsyncWatch:
        """``async for ev in client.watch(prefix)``; see LeaseClient.watch."""
        if prefix:
            check_name("prefix", prefix)
        return AsyncWatch(self, prefix, reconnect)

    def holding(
        self, key: str, ttl: float = 10.0, *, wait: float | None = None
    ) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Coroutine[Any, Any, T]]]:
        """A decorator: the coroutine runs only while holding key, gets the hold as
        its ``hold`` keyword argument, and is cancelled if the lease is lost
        (the call then raises LeaseLostError), as ``lease run`` stops its
        command. The lease is released when it returns."""
        check_name("key", key)

        def wrap(f: Callable[..., Awaitable[T]]) -> Callable[..., Coroutine[Any, Any, T]]:
            @functools.wraps(f)
            async def run(*args: Any, **kwargs: Any) -> T:
                async with self.acquire(key, ttl, wait=wait) as hold:
                    return await f(*args, hold=hold, **kwargs)

            return run

        return wrap


class AsyncWatch:
    """One watch (AsyncLeaseClient.watch): an async iterator of WatchEvents; aclose() or ``async with`` ends it."""

    def __init__(self, client: AsyncLeaseClient, prefix: str, reconnect: bool) -> None:
        self.prefix = prefix
        self._client = client
        self._reconnect = reconnect
        self._closed = False
        self._writer: asyncio.StreamWriter | None = None  # the stream's connection, while open
        self._stop = asyncio.Event()  # set by aclose(): ends a pause before the stream is opened again
        self._gen = self._run()

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        """Ends the watch, and its iteration, also in a task iterating it now
        (as Watch.close from another thread): that task's read ends with the
        stream's connection, and its ``async for`` with it. Closing an async
        generator another task is running raised RuntimeError instead, and
        left that task reading."""
        self._closed = True
        self._stop.set()
        w = self._writer
        if w is not None:
            w.close()
        if not self._gen.ag_running:
            await self._gen.aclose()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[WatchEvent, None]:
        pause = RESUME_FIRST
        broke: LeaseError | None = None
        while not self._closed:
            got_any = False
            try:
                # Closed here, not by the garbage collector's hook in a task
                # of its own, so that the connection is closed when aclose()
                # returns.
                async with contextlib.aclosing(self._stream()) as stream:
                    async for ev in stream:
                        if broke is not None:
                            yield WatchEvent(RESET, error=broke)
                            broke = None
                        got_any = True
                        yield ev
            except (UnavailableError, TooManyWatchersError) as e:
                if self._closed:
                    return
                if not self._reconnect or not (isinstance(e, UnavailableError) or self._client._refused_by_own_stream(e)):
                    raise
                broke = e
                if got_any:
                    pause = RESUME_FIRST
                # A rate limit's 429 (busy) is watched again after its
                # Retry-After at least, as Go's lease.Follow does; aclose()
                # ends the pause.
                busy = e.retry_after if isinstance(e, UnavailableError) else 0.0
                try:
                    await _within(self._stop.wait(), max(jittered(pause), busy))
                except TimeoutError:
                    pass
                pause = min(pause * 2, RESUME_MAX)

    async def _stream(self) -> AsyncGenerator[WatchEvent, None]:
        c = self._client
        t = c._transport
        path, silence = c._watch(self.prefix)
        (r, w), headers, used = await t.stream(path, min(silence, t.timeout))
        if self._closed:
            w.close()
            return
        self._writer = w
        try:
            silence = c._silence(headers.get("content-type"), headers.get(HEARTBEAT_HEADER.lower()))
        except LeaseError:
            self._writer = None
            w.close()
            raise
        what = f"watch {json.dumps(self.prefix)}"
        chunks = _Chunks(r) if headers.get("transfer-encoding", "").lower() == "chunked" else None
        parser = EventStreamParser()
        try:
            while True:
                try:
                    chunk = await _within(r.read(65536) if chunks is None else chunks.read(65536), silence)
                except asyncio.TimeoutError:
                    t.endpoints.move_on(used)
                    c._gave_up += 1
                    raise UnavailableError(
                        f"lease: {what}: the stream broke: silent for {c.missed_heartbeats} heartbeats ({silence:g} s)"
                    ) from None
                except (OSError, ValueError, asyncio.IncompleteReadError) as e:  # ValueError: a line past the reader's limit
                    if self._closed:
                        return
                    t.endpoints.move_on(used)
                    raise UnavailableError(f"lease: {what}: the stream broke: {e!r}") from e
                if not chunk:
                    if self._closed:
                        return
                    t.endpoints.move_on(used)
                    raise UnavailableError(f"lease: {what}: the stream broke: the server ended it without saying why")
                for m in parser.feed(chunk):
                    try:
                        ev = decode(self.prefix, m)
                    except UnavailableError:
                        t.endpoints.move_on(used)
                        raise
                    yield ev
        finally:
            self._writer = None
            w.close()


class AsyncTerm(AsyncHold):
    """A won election (AsyncElector.campaign): an AsyncHold with the leader's value."""

    value: str

    async def resign(self) -> None:
        """Ends the term at once."""
        await self.release()


class AsyncElector:
    """Elector on the asyncio client (see Elector)."""

    def __init__(self, client: AsyncLeaseClient, ttl: float = 10.0) -> None:
        self.client = client
        self.ttl = check_ttl(ttl)

    async def campaign(self, key: str, value: str, *, wait: float | None = None) -> AsyncTerm:
        """Waits until elected leader of key, announcing value."""
        h = await self.client.acquire(key, self.ttl, wait=wait, owner=value)
        h.__class__ = AsyncTerm
        assert isinstance(h, AsyncTerm)
        h.value = value
        return h

    async def leader(self, key: str) -> Leader | None:
        lease = await self.client.get(key)
        return None if lease is None else leader_of(lease)

    async def observe(self, key: str) -> AsyncGenerator[Leader, None]:
        """As Elector.observe."""
        check_name("key", key)
        f = Follower(key)
        w = self.client.watch(key)
        # The watch is read by a task of its own, so that the leader's expiry
        # is reported on time however silent the watch is (as Go's Observe:
        # never a leader past its expiry), and what it read meanwhile is
        # taken before a lapse is judged. Bounded as the socket was: a
        # caller that stops iterating stops the reading.
        q: asyncio.Queue[WatchEvent | BaseException | None] = asyncio.Queue(maxsize=1024)

        async def pump() -> None:
            try:
                async for ev in w:
                    await q.put(ev)
                await q.put(None)
            except Exception as e:  # handed to the reader
                await q.put(e)

        reader = asyncio.get_running_loop().create_task(pump(), name=f"leasehq-lease-observe-{key}")
        try:
            while True:
                try:
                    item = await _within(q.get(), f.until_lapse())
                except TimeoutError:
                    leader = f.lapsed_now()
                    if leader is not None:
                        yield leader
                    continue
                if item is None or isinstance(item, UnsupportedError):
                    break
                if isinstance(item, BaseException):
                    raise item
                leader = f.feed(item)
                if leader is not None:
                    yield leader
        finally:
            reader.cancel()
            await asyncio.wait((reader,))
            await w.aclose()
        pause = POLL_FIRST
        while True:
            leader = f.polled(await self.leader(key) or Leader(key))
            if leader is not None:
                pause = POLL_FIRST
                yield leader
            await asyncio.sleep(jittered(pause))
            pause = min(pause * 2, POLL_MAX)

    async def run(
        self,
        key: str,
        value: str,
        lead: Callable[[AsyncTerm], Awaitable[None]],
        *,
        requeue: bool = False,
        on_new_leader: Callable[[Leader], None] | None = None,
    ) -> None:
        """The leader runner: campaigns for key and runs lead(term) while leader,
        inside the term's scope, so that a loss cancels it at once (no callback
        races the loss: lead's task is the one cancelled). It resigns when lead
        returns. With requeue it campaigns again after each term, until the
        caller cancels run. on_new_leader hears every leader observed meanwhile,
        this one's included; an exception it raises is logged (the
        "leasehq_lease" logger, with its traceback), and the next leader is
        told all the same. If observing ends with an error observing again
        cannot mend (a refused credential, the server's limit of watchers
        reached), as Go's OnNewLeader it is told "no leader known" (a zero
        Leader) last, if it was told of a leader, and hears no more; the
        error is logged, and run goes on."""
        watcher: asyncio.Task[None] | None = None
        if on_new_leader is not None:
            tell_one = on_new_leader

            def told(leader: Leader) -> None:
                try:
                    tell_one(leader)
                except Exception:
                    # Not the run's to end, nor the observing's: it
                    # ended both silently (the exception was kept by a
                    # task nobody asked), and no later leader was told.
                    logger.exception("lease: election %s: on_new_leader(%r) raised; the next leader is told all the same", json.dumps(key), leader)

            async def tell() -> None:
                last = Leader(key)
                try:
                    async for leader in self.observe(key):
                        told(leader)
                        last = leader
                except LeaseError:
                    # The task ended with it, which nobody asked: on_new_leader
                    # believed in the last leader past its term, and nothing
                    # said why.
                    logger.exception("lease: election %s: observing ended; on_new_leader is told no leader from here on", json.dumps(key))
                    if last.token != 0:
                        told(Leader(key))

            watcher = asyncio.get_running_loop().create_task(tell())
        try:
            while True:
                term = await self.campaign(key, value)
                try:
                    async with term:
                        await lead(term)
                except LeaseLostError:
                    if not requeue:
                        raise
                if not requeue:
                    return
        finally:
            if watcher is not None:
                # Waited for, so that its watch is closed when run returns:
                # left to finish on its own, it was still open then.
                watcher.cancel()
                await asyncio.wait((watcher,))


class AsyncSlot(AsyncHold):
    """One of a semaphore's slots, held; number is 0 to N-1."""

    number: int


class AsyncSemaphore(SemaphoreBase):
    """Semaphore on the asyncio client (see Semaphore): it follows the server's
    watch of the slots to know when one frees, and polls where it cannot watch."""

    def __init__(self, client: AsyncLeaseClient, name: str, n: int, ttl: float = 10.0) -> None:
        super().__init__(name, n, ttl)
        self.client = client

    async def try_acquire(self) -> AsyncSlot:
        slot, _ = await self._try_all()
        if slot is None:
            raise self._all_held()
        return slot

    async def _try_all(self) -> tuple[AsyncSlot | None, float]:
        soonest = float("inf")
        for i in self._order():
            try:
                h = await self.client.try_acquire(self.slot_key(i), self.ttl)
            except HeldError as e:
                soonest = self._until_free(e, soonest)
                continue
            h.__class__ = AsyncSlot
            assert isinstance(h, AsyncSlot)
            h.number = i
            return h, 0.0
        return None, soonest

    async def acquire(self) -> AsyncSlot:
        """Waits in line (the queue lease NAME/queue, first come first served),
        then, at the head of the line, tries the slots whenever the watch says
        one freed. Cancel it (asyncio.timeout) to stop waiting; the turn's
        loss ends it with LeaseLostError."""
        got: list[AsyncSlot] = []  # the slot taken, until the caller has it
        try:
            async with self.client.acquire(self.queue_key, self.ttl):
                try:
                    # Watched again after a break (told by a reset, then a new
                    # picture and its synced), as Go's semaphore follows it: a
                    # break ended the wait with UnavailableError.
                    w = self.client.watch(self.name + "/slots/")
                    try:
                        async for ev in w:
                            if ev.kind in (EVENT_SYNCED, "released", "expired"):
                                slot, _ = await self._try_all()
                                if slot is not None:
                                    got.append(slot)
                                    return slot
                    finally:
                        await w.aclose()
                except UnsupportedError:
                    pass
                pause = POLL_FIRST
                while True:
                    slot, soonest = await self._try_all()
                    if slot is not None:
                        got.append(slot)
                        return slot
                    await asyncio.sleep(min(jittered(pause), soonest))
                    pause = min(pause * 2, POLL_MAX)
        except BaseException:
            # Cancelled on the way out (the watch's close, the turn's
            # release): the slot reached nobody, and was renewed for as
            # long as the client ran.
            for slot in got:
                slot._give_back()
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def holders(self) -> list[Lease]:
        """The slots held now, in key order: its own slots only, not other
        leases under NAME/slots/."""
        return [lease async for lease in self.client.all(self.name + "/slots/") if self.is_slot(lease.key)]
