"""The sync client's transport: http.client connections kept alive in a pool
per server, the multi-endpoint rules (_endpoints), and error answers as
their classes. Imported when the first LeaseClient is made, not with the
package: http.client and ssl cost more to import than the rest of it."""

from __future__ import annotations

import functools
import http.client
import queue
import socket
import ssl
import struct
import threading
import time
from typing import TYPE_CHECKING, Callable, Final

from ._endpoints import (
    MAX_ANSWER, STORE_HEADER, Endpoints, Failed, Plan, TooLarge, hedge_after, spoke_unasked, taken, unanswered, unopened,
    watch_refused,
)
from ._errors import LeaseError, error_from_answer
from ._wire import PREFER_MINIMAL, RENEW_BATCH_PATH

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

IDLE_KEEP: Final = 60.0
"""A pooled connection idle this long is closed rather than reused: well
inside lease serve's 2 min idle timeout, so the server never closes one a
request is about to be sent on."""


class Answer:
    __slots__ = ("status", "body")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


class Abandoned(Exception):
    """A request ended by its Abandon: it says nothing about the server, and moves nothing."""


class Abandon:
    """Ends the requests another thread makes with it (a hedged renewal's
    request not taken): abandon() shuts their connections down, which wakes
    a read or a write blocked on them, and no try starts after it. (A
    connection still being made is not cut: it ends by its timeout.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._conns: set[http.client.HTTPConnection] = set()

    def abandon(self) -> None:
        with self._lock:
            self._done = True
            # Under the lock: a connection is left (leave) before it is
            # closed, so that the descriptor shut down is still its own.
            for c in self._conns:
                if c.sock is not None:
                    try:
                        c.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def check(self) -> None:
        if self._done:
            raise Abandoned()

    def enter(self, c: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conns.add(c)
        self.check()

    def leave(self, c: http.client.HTTPConnection) -> bool:
        """Stops watching c; whether its request was abandoned (c then closed)."""
        with self._lock:
            self._conns.discard(c)
            done = self._done
        if done:
            c.close()
        return done


class Late:
    """The answer to a request whose caller an interruption in its own thread
    (KeyboardInterrupt, a signal handler's exception, raised wherever the
    thread is) may leave behind: an acquire's grant that crossed it, given
    back by take, in a thread of its own, so that the interruption goes on at
    once. The thread is not a daemon: a process that ends on the interruption
    still finishes the give-back, which is bounded in time (the client's
    timeout to read the answer, RELEASE_TIMEOUT to release it)."""

    def __init__(self, take: Callable[[Answer], None]) -> None:
        self.take = take
        self.answer: Answer | None = None
        """The answer, once read: the caller's to use, or to hand over by interrupted()."""

    def interrupted(self) -> None:
        """Called by the interrupted caller: hands an answer already read to take."""
        a = self.answer
        if a is not None:
            self.answer = None
            background(functools.partial(self.take, a))


def background(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="leasehq-lease-give-back").start()


class _TimedSocket(socket.socket):
    """A blocking socket whose kernel timeouts (SO_RCVTIMEO, SO_SNDTIMEO;
    _set_timeout) end a receive as TimeoutError. Python's socket file takes
    their EAGAIN for a non-blocking socket's "nothing yet" and returns None:
    http.client then read a timed-out answer's head as the server's close
    (RemoteDisconnected, a request past its bound told as a hang-up) and
    handed the None of a late body on (a TypeError out of get(), and out of
    the renewer thread, which died with it: no hold of its client was
    renewed again)."""

    __slots__ = ()

    def recv_into(self, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0) -> int:
        try:
            return super().recv_into(buffer, nbytes, flags)
        except BlockingIOError:
            raise TimeoutError("timed out") from None


class Transport:
    def __init__(self, endpoints: Endpoints, token: str | None, ssl_context: ssl.SSLContext | None, timeout: float) -> None:
        self.endpoints = endpoints
        self.timeout = timeout
        self._ssl = ssl_context
        self._idle: list[list[tuple[http.client.HTTPConnection, float]]] = [[] for _ in endpoints.all]
        self._lock = threading.Lock()
        self._closed = False  # close(): a connection used since is closed, not pooled
        self.get_headers: dict[str, str] = {}
        if token is not None:
            self.get_headers["Authorization"] = "Bearer " + token
        self.headers = dict(self.get_headers, **{"Content-Type": "application/json"})
        self.renew_batch_headers = dict(self.headers, Prefer=PREFER_MINIMAL)

    def forked(self) -> None:
        """In a forked child: the pooled connections are the parent's; forget them."""
        self._lock = threading.Lock()
        self._idle = [[] for _ in self.endpoints.all]

    def close(self) -> None:
        """Closes the pooled connections; those of requests made since (a hold's
        renewal or release, a give-back) are closed after their answers."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, [[] for _ in self.endpoints.all]
        for conns in idle:
            for c, _ in conns:
                c.close()

    def connect(self, i: int, timeout: float) -> http.client.HTTPConnection:
        ep = self.endpoints.all[i]
        c: http.client.HTTPConnection
        if ep.tls:
            ctx = self._ssl if self._ssl is not None else ssl.create_default_context()
            c = http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=ctx)
        else:
            c = http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)
        try:
            c.connect()
        except (OSError, http.client.HTTPException) as e:
            c.close()
            raise Failed(e, True) from e
        except BaseException:
            c.close()
            raise
        if type(c.sock) is socket.socket:  # TLS reports the kernel's timeout itself (SSLWantReadError)
            c.sock.__class__ = _TimedSocket
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Blocking, with the kernel's timeouts rather than Python's: a Python
        # timeout costs a poll before every send and receive.
        c.sock.settimeout(None)
        _set_timeout(c, timeout)
        return c

    def _get(self, i: int, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        now = time.monotonic()
        c: http.client.HTTPConnection | None = None
        with self._lock:
            pool = self._idle[i]
            while pool:
                old, since = pool.pop()
                if now - since < IDLE_KEEP and not spoke_unasked(old.sock):
                    c = old
                    break
                old.close()
        if c is not None:
            _set_timeout(c, timeout)
            return c, True
        return self.connect(i, timeout), False

    def _headers(self, path: str, body: bytes | None) -> dict[str, str]:
        """A request's headers: POST /v1/renew's ask for the minimal answer (renew_results)."""
        if body is None:
            return self.get_headers
        return self.renew_batch_headers if path == RENEW_BATCH_PATH else self.headers

    def _put(self, i: int, c: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                self._idle[i].append((c, time.monotonic()))
                return
        c.close()

    def _once(
        self, i: int, method: str, path: str, body: bytes | None, timeout: float, abandon: Abandon | None = None,
        late: Late | None = None,
    ) -> Answer:
        c, reused = self._get(i, timeout)
        ep = self.endpoints.all[i]
        r: http.client.HTTPResponse | None = None
        if late is not None:
            late.answer = None  # a try's before this one (a 503) is not this one's
        try:
            if abandon is not None:
                abandon.enter(c)
            c.request(method, ep.path + path, body, self._headers(path, body))
            r = c.getresponse()
            self.endpoints.check_store(i, r.getheader(STORE_HEADER))
            a = Answer(r.status, _read(r))
            if late is not None:
                late.answer = a
        except (OSError, http.client.HTTPException) as e:
            if abandon is not None and abandon.leave(c):
                _close(c, r)
                raise Abandoned() from e
            _close(c, r)
            # A pooled connection the server had closed fails at once; the
            # request may not have been read, but nobody can tell.
            raise Failed(e, False) from e
        except BaseException:
            # Interrupted (KeyboardInterrupt, a signal handler's exception):
            # hang up now, not when the exception is let go, so that the
            # server ends a wait (it would grant the lease to nobody) and
            # releases a lease it grants at that moment.
            if abandon is not None:
                abandon.leave(c)
            if late is not None and late.answer is None:
                self._linger(c, r, late)
            else:
                _close(c, r)
            raise
        if abandon is not None and abandon.leave(c):
            r.close()  # answered as it was abandoned: the answer is nobody's, the connection closed
        elif r.will_close:
            _close(c, r)
        else:
            self._put(i, c)
        return a

    def _linger(self, c: http.client.HTTPConnection, r: http.client.HTTPResponse | None, late: Late) -> None:
        """After an interruption of the request on c, sent or partly sent, whose
        answer had not been read (r, if its head had): hangs up this side of
        the connection (a TCP half-close), so that the server ends a wait and
        releases a lease it grants from then on (answering 499), and reads
        the last answer in a thread of its own, within the timeout, for
        late.take: a grant sent before the server saw the hang-up crossed it.
        A connection that cannot be half-closed (TLS) is closed, and the
        outcome is unknown, as in the Go and asyncio clients."""
        sock = c.sock
        if r is None:
            if sock is None or isinstance(sock, ssl.SSLSocket):
                c.close()
                return
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                c.close()
                return
        _set_timeout(c, self.timeout)

        def read() -> None:
            resp = r
            try:
                # An interrupted getresponse() left the connection waiting
                # for the answer's head, which a new one reads.
                if resp is None:
                    resp = c.getresponse()
                a = Answer(resp.status, _read(resp))
            except (OSError, http.client.HTTPException, ValueError):
                return  # no answer, or a head cut by the interruption: unknown
            finally:
                _close(c, resp)
            late.take(a)

        background(read)

    def request(
        self, method: str, path: str, body: bytes | None = None, *, repeatable: bool, timeout: float | None = None,
        until: float | None = None, abandon: Abandon | None = None, late: Late | None = None,
    ) -> Answer:
        """Sends a request by the multi-endpoint rules and returns a 2xx answer;
        an error answer raises its class, a request that got none an
        UnavailableError. until (time.monotonic()) ends the tries, retries
        included: nothing is sent past it, and each try's timeout stops at
        it; passing it unanswered is a timeout, and moves the endpoint on.
        abandon, if given, ends the request from another thread (Abandoned).
        late, if given, gets the answer of a try interrupted in this thread
        before the answer was read (_linger), and keeps the answer read
        (late.answer) for the caller's late.interrupted()."""
        n = len(self.endpoints.all)
        plan = Plan(n, repeatable, until)
        t = self.timeout if timeout is None else timeout
        while True:
            i = self.endpoints.current()
            try:
                if abandon is not None:
                    abandon.check()
                a = self._once(i, method, path, body, plan.timeout(t), abandon, late)
            except Failed as f:
                self.endpoints.move_on(i)
                pause = plan.again(f.never_left)
                if pause is None:
                    url = self.endpoints.all[i].url
                    raise unanswered(method, path, url, f.cause, f.never_left, repeatable) from f.cause
                if pause:
                    time.sleep(pause)
                continue
            if a.status < 300:
                return a
            err = error_from_answer(a.status, a.body)
            if a.status == 503:
                self.endpoints.move_on(i)
                pause = plan.again(False)
                if pause is not None:
                    if pause:
                        time.sleep(pause)
                    continue
            raise err

    def renew(self, path: str, body: bytes, ttl: float, *, timeout: float, until: float | None = None) -> Answer:
        """A renewal of ttl (the shortest of a batch's), sent as request does;
        on a list of several endpoints, also sent to the next if still
        unanswered after hedge_after(ttl), the first outcome taken (taken)
        standing and the other request abandoned."""
        if len(self.endpoints.all) < 2:
            return self.request("POST", path, body, repeatable=True, timeout=timeout, until=until)
        abandon = Abandon()
        ended: queue.SimpleQueue[tuple[Answer | None, BaseException | None]] = queue.SimpleQueue()

        def send() -> None:
            try:
                ended.put((self.request("POST", path, body, repeatable=True, timeout=timeout, until=until, abandon=abandon), None))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                ended.put((None, e))

        def start() -> None:
            threading.Thread(target=send, name="leasehq-lease-renewal", daemon=True).start()

        first = self.endpoints.current()
        start()
        try:
            try:
                a, e = ended.get(timeout=hedge_after(ttl))
            except queue.Empty:
                self.endpoints.move_on(first)  # unanswered so far: later requests go to the next
                start()
                a, e = ended.get()
                if not taken(e):
                    a, e = ended.get()  # the first to end failed: the other's outcome stands
        finally:
            abandon.abandon()
        if e is not None:
            raise e
        assert a is not None
        return a

    def stream(self, path: str, timeout: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, socket.socket, int]:
        """Opens an event stream on a connection of its own (never pooled), by
        the same rules; every failure to open it is repeatable. The socket is
        returned too: an answer without a length (read to the close) takes it
        from the connection, whose sock is None from then on."""
        plan = Plan(len(self.endpoints.all), True)
        headers = dict(self.get_headers, Accept="text/event-stream")
        while True:
            i = self.endpoints.current()
            ep = self.endpoints.all[i]
            err: LeaseError | None = None
            try:
                c = self.connect(i, timeout)
                sock = c.sock
                r: http.client.HTTPResponse | None = None
                try:
                    c.request("GET", ep.path + path, None, headers)
                    r = c.getresponse()
                    self.endpoints.check_store(i, r.getheader(STORE_HEADER))
                except (OSError, http.client.HTTPException) as e:
                    _close(c, r)
                    raise Failed(e, False) from e
                except BaseException:
                    _close(c, r)
                    raise
            except Failed as f:
                self.endpoints.move_on(i)
                pause = plan.again(True)
                if pause is None:
                    raise unopened(ep.url, f.cause) from f.cause
                time.sleep(pause)
                continue
            if r.status == 200:
                return c, r, sock, i
            try:
                body = _read(r)
            except (OSError, http.client.HTTPException):
                body = b""
            finally:
                _close(c, r)
            err = error_from_answer(r.status, body)
            if r.status == 503:
                self.endpoints.move_on(i)
                pause = plan.again(False)
                if pause is not None:
                    time.sleep(pause)
                    continue
            raise watch_refused(err, r.status, r.getheader("Retry-After"))


def _close(c: http.client.HTTPConnection, r: http.client.HTTPResponse | None) -> None:
    """Closes c and its response r: an answer that closes the connection
    (Connection: close, or no length) is let go by c, and keeps the socket
    open until it is closed itself, or collected."""
    c.close()
    if r is not None:
        r.close()


def _read(r: http.client.HTTPResponse) -> bytes:
    """r's body, at most MAX_ANSWER bytes of it; a longer one raises TooLarge."""
    if r.length is not None and r.length > MAX_ANSWER:
        raise TooLarge()
    data = r.read(MAX_ANSWER + 1)
    if len(data) > MAX_ANSWER:
        raise TooLarge()
    if not r.isclosed():
        r.read()  # the end of a chunked body (its last chunk), so that the connection can be reused
    return data


def _set_timeout(c: http.client.HTTPConnection, timeout: float) -> None:
    """Sets the kernel's send and receive timeouts of c's socket (SO_SNDTIMEO,
    SO_RCVTIMEO), which then fail a stalled request with EAGAIN, an OSError.
    Only a change costs a call."""
    if c.sock is None or getattr(c, "_lease_timeout", None) == timeout:
        return
    sec = int(timeout)
    tv = struct.pack("ll", sec, max(1, int((timeout - sec) * 1e6)) if sec == 0 else int((timeout - sec) * 1e6))
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    c._lease_timeout = timeout  # type: ignore[attr-defined]
