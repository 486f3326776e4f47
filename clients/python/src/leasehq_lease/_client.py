"""LeaseClient, the sync client: acquire and try_acquire (holds renewed by one
thread), get, list and all, watch, and the helper that runs a function only
while holding a key."""

from __future__ import annotations

import functools
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterator, Sequence, TypeVar

from ._base import DEFAULT_HEARTBEAT, MISSED_HEARTBEATS, RESUME_FIRST, RESUME_MAX, ClientBase, WaitPlan
from ._errors import HeldError, LeaseError, NotFoundError, NotHeldError, TooManyWatchersError, UnavailableError, quote
from ._events import HEARTBEAT_HEADER, RESET, EventStreamParser, WatchEvent, decode
from ._hold import RELEASE_TIMEOUT, Hold, Renewer
from ._wire import (
    DriftMargin,
    Granted,
    Lease,
    LeasePage,
    check_name,
    granted_of,
    jittered,
    key_path,
    list_path,
    loads_object,
    page_of,
    release_body,
    renew_body,
    same_lease,
)

if TYPE_CHECKING:
    import http.client
    import socket
    import ssl

    from ._http import Answer, Transport

T = TypeVar("T")



class LeaseClient(ClientBase):
    """Acquires leases from a lease server (``lease serve``) and reads them.

    ``servers`` is a URL (``http://127.0.0.1:7420``; a path prefix is kept), a
    comma-separated list or a list of URLs of several servers in front of one
    backend, used by DESIGN.md's multi-endpoint rules. ``token`` is the bearer
    token of the server's --auth-tokens-file; ``ssl_context`` verifies an
    https server (default: the system's CAs). ``owner`` (default HOSTNAME-PID)
    is shown to other contenders and proves nothing. ``timeout`` bounds each
    request in seconds (a waiting acquire gets its wait on top).
    ``drift_margin`` is how much earlier than the server the client gives a
    lease up (default 1% + 2 ms, the Go client's). ``heartbeat`` is the
    server's --watch-heartbeat for a server that does not say it (servers
    say it in each watch answer's Lease-Heartbeat-Ms header, which wins): a
    watch silent for ``missed_heartbeats`` of them is broken.

    The client may be shared between threads; ``close()`` (or ``with``) closes
    its pooled connections."""

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
        from ._http import Transport

        super().__init__(
            servers, owner=owner, token=token, ssl_context=ssl_context, timeout=timeout,
            drift_margin=drift_margin, heartbeat=heartbeat, missed_heartbeats=missed_heartbeats,
        )
        self._transport = Transport(self._endpoints, token, ssl_context, self._timeout)
        self._renewer = Renewer(self._transport)

    def close(self) -> None:
        """Closes the pooled connections, and ends the renewer thread once no
        hold is left. Holds still renew and release (each request on a new
        connection, closed after its answer, as nothing is pooled any more)."""
        self._renewer.close()
        self._transport.close()

    def __enter__(self) -> LeaseClient:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def acquire(self, key: str, ttl: float = 10.0, *, wait: float | None = None, owner: str | None = None) -> Hold:
        """Waits until it holds key for ttl seconds, up to wait seconds (default:
        for ever), first come first served, and returns the Hold, which renews
        itself; ``with client.acquire(key) as hold:`` releases it at the end.
        A key still held when the wait runs out raises HeldError naming the
        holder; any other error ends the wait at once. owner overrides the
        client's for this lease."""
        ttl, owner = self._check(key, ttl, owner)
        plan = WaitPlan(wait)
        while True:
            chunk = plan.chunk()
            try:
                _, h = self._take(key, owner, ttl, chunk, plan.sent, plan)
            except HeldError:
                pause = plan.held()
                if pause is None:
                    raise
                time.sleep(pause)
                continue
            if h is not None:
                return h
            # It expired before we could use it: queue again.

    def try_acquire(self, key: str, ttl: float = 10.0, *, owner: str | None = None) -> Hold:
        """Tries once: a held key raises HeldError at once, naming the holder when the server knows."""
        ttl, owner = self._check(key, ttl, owner)
        g, h = self._take(key, owner, ttl, 0.0, time.monotonic())
        if h is None:
            raise UnavailableError(f"lease: {quote(key)} was granted (token {g.lease.token}) but expired before its answer could be used")
        return h

    def _take(self, key: str, owner: str, ttl: float, wait: float, sent: float, plan: WaitPlan | None = None) -> tuple[Granted, Hold | None]:
        """One acquire request, sent at sent, and the Hold of its grant (_hold).
        An interruption of this thread (KeyboardInterrupt, a signal handler's
        exception) after the server granted the lease, its answer on the way
        or read but no Hold returned, gives the lease back in a thread of its
        own (Late), as the Go and asyncio clients do, and goes on: the lease
        stayed held, renewed by nobody, until its TTL."""
        from ._http import Late  # imported by __init__ already

        path, body, timeout = self._acquire_request(key, owner, ttl, wait, plan)
        late = Late(functools.partial(self._give_back_answer, key))
        try:
            g = self._granted(self._transport.request("POST", path, body, repeatable=False, timeout=timeout, late=late).body, key)
            return g, self._hold(g, sent, ttl)
        except LeaseError:
            raise  # what the server answered, or _hold's own give-back: told and dealt with
        except BaseException:
            late.interrupted()
            raise

    def _give_back_answer(self, key: str, a: Answer) -> None:
        """Releases the lease an acquire of key was answered with, if it was granted."""
        if a.status != 200:
            return  # 499: the server saw the hang-up first, and holds nothing for it
        try:
            g = self._granted(a.body, key)
        except LeaseError:
            return
        self._give_back(g)

    def _hold(self, g: Granted, sent: float, ttl: float) -> Hold | None:
        """A Hold of g, granted to a request sent at sent. A grant that came long
        after its request (a wait) is renewed at once, so that its deadline,
        counted from the send time, is worth having; None means it was gone by
        then. A grant whose safe deadline had passed when it arrived is
        released and raises UnavailableError: a lease the client cannot vouch
        for is no lease."""
        if time.monotonic() - sent >= ttl / 3:
            again = time.monotonic()
            try:
                r = self._renew(g, ttl)
            except NotHeldError:
                return None
            except LeaseError:
                self._give_back(g)
                raise
            g, sent = r, again
        h = Hold(self._renewer, g, sent, ttl, self.drift_margin)
        if time.monotonic() >= h.deadline:
            self._give_back(g)
            raise UnavailableError(
                f"lease: {quote(g.lease.key)} was granted (token {g.lease.token}), but the answer came "
                f"{time.monotonic() - sent:.3f} s after the request, past the safe deadline of a {ttl} s lease; released it"
            )
        self._renewer.add(h)
        return h

    def _renew(self, g: Granted, ttl: float) -> Granted:
        a = self._transport.renew(key_path(g.lease.key, "renew"), renew_body(g, ttl), ttl, timeout=ttl)
        r = granted_of(loads_object(a.body, "renew"), "renew")
        if not same_lease(g, r):
            raise UnavailableError("lease: renewal answered with another lease")
        return r

    def _give_back(self, g: Granted) -> None:
        """Releases g, a grant no Hold was made of, within RELEASE_TIMEOUT; an error leaves it to its TTL."""
        try:
            self._transport.request(
                "POST", key_path(g.lease.key, "release"), release_body(g), repeatable=True, until=time.monotonic() + RELEASE_TIMEOUT
            )
        except LeaseError:
            pass

    def get(self, key: str) -> Lease | None:
        """The unexpired lease on key, or None if there is none."""
        check_name("key", key)
        try:
            a = self._transport.request("GET", key_path(key), repeatable=True)
        except NotFoundError:
            return None
        return self._got(a.body, key)

    def list(self, prefix: str = "", *, limit: int | None = None, after: str = "") -> LeasePage:
        """One page of the unexpired leases whose keys start with prefix, in byte
        order of their keys: at most limit (default 1000, at most 10000), after
        the cursor after (the next of the page before; "" on the last page)."""
        if prefix:
            check_name("prefix", prefix)
        a = self._transport.request("GET", list_path(prefix, limit, after), repeatable=True)
        return page_of(a.body)

    def all(self, prefix: str = "", *, limit: int | None = None) -> Iterator[Lease]:
        """Walks every page of list: a lease held throughout the walk is seen exactly once."""
        after = ""
        while True:
            page = self.list(prefix, limit=limit, after=after)
            yield from page.leases
            if not page.next:
                return
            if page.next == after:
                raise UnavailableError(f"lease: list {prefix!r}: the server's next did not move past {after!r}")
            after = page.next

    def watch(self, prefix: str = "", *, reconnect: bool = True) -> Watch:
        """Watches the leases whose keys start with prefix: iterate it for a held
        event per lease, then synced, then each change. A stream that breaks
        (the connection lost, the server closing, missed heartbeats) is opened
        again (after 100 ms doubling to 5 s) and told as a "reset" event before
        the new picture; with reconnect=False it raises UnavailableError
        instead. A refusal (UnauthorizedError, ForbiddenError,
        TooManyWatchersError, UnsupportedError) raises, but for a
        TooManyWatchersError after this client gave a stream up for silence:
        the server may count that dead stream still, so it is a break too. So
        is any other 429, such as one without the API's error body (a rate
        limit in front of the server: busy), an UnavailableError whose ``retry_after`` (the answer's
        Retry-After, at most a minute) the pause lasts at least, as in the Go
        and TypeScript clients. close() or ``with`` ends it, a pause
        included."""
        if prefix:
            check_name("prefix", prefix)
        return Watch(self, prefix, reconnect)

    def holding(self, key: str, ttl: float = 10.0, *, wait: float | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """A decorator: the function runs only while holding key, and gets the
        Hold as its ``hold`` keyword argument (its token for the writes, its
        lost event and check() for the loss). The lease is released when the
        function returns. A sync function cannot be stopped from outside: it
        must call hold.check() (or pass hold.token to a guard) before each
        write; the asyncio client's version cancels the coroutine instead."""
        check_name("key", key)

        def wrap(f: Callable[..., T]) -> Callable[..., T]:
            @functools.wraps(f)
            def run(*args: Any, **kwargs: Any) -> T:
                with self.acquire(key, ttl, wait=wait) as hold:
                    return f(*args, hold=hold, **kwargs)

            return run

        return wrap


class Watch:
    """One watch of the leases under a prefix (LeaseClient.watch): an iterator
    of WatchEvents read from the server's event stream."""

    def __init__(self, client: LeaseClient, prefix: str, reconnect: bool) -> None:
        self.prefix = prefix
        self._client = client
        self._reconnect = reconnect
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None  # the stream's socket, while open (the answer may own it)
        self._closed = False
        self._stop = threading.Event()  # set by close(): ends a pause before the stream is opened again
        self._gen = self._run()

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        return next(self._gen)

    def close(self) -> None:
        """Closes the stream; iteration then ends, also in a thread iterating
        it now."""
        self._closed = True
        self._stop.set()
        c = self._conn
        if c is not None:
            # Shut down first: a read blocked in another thread ends at once,
            # and the iteration with it. Closing alone left the socket open
            # under that read (the answer's file keeps it), and closing the
            # answer of a keep-alive stream waited for the read to end: both
            # until the next event or heartbeat.
            sock = self._sock
            if sock is not None:
                import socket  # imported by the transport already

                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            c.close()
        try:
            self._gen.close()
        except ValueError:
            pass  # the generator is running in another thread, which the closed connection ends

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _run(self) -> Generator[WatchEvent, None, None]:
        pause = RESUME_FIRST
        broke: LeaseError | None = None
        while not self._closed:
            got_any = False
            try:
                for ev in self._stream():
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
                # Retry-After at least, as Go's lease.Follow does; close()
                # ends the pause.
                busy = e.retry_after if isinstance(e, UnavailableError) else 0.0
                self._stop.wait(max(jittered(pause), busy))
                pause = min(pause * 2, RESUME_MAX)

    def _stream(self) -> Iterator[WatchEvent]:
        c = self._client
        path, silence = c._watch(self.prefix)
        t = c._transport
        conn, resp, sock, used = t.stream(path, min(silence, t.timeout))
        self._sock = sock
        self._conn = conn
        if self._closed:
            # close() came while the stream opened, and found no connection
            # to close (it sets _closed before it looks at _conn).
            self._conn = self._sock = None
            conn.close()
            resp.close()
            return
        try:
            silence = c._silence(resp.getheader("Content-Type"), resp.getheader(HEARTBEAT_HEADER))
        except LeaseError:
            self._conn = self._sock = None
            conn.close()
            resp.close()
            raise
        what = f"watch {quote(self.prefix)}"
        try:
            sock.settimeout(silence)  # also when the answer, read to the close, took it from conn
            parser = EventStreamParser()
            while True:
                try:
                    chunk = resp.read1(65536)
                except TimeoutError:
                    t.endpoints.move_on(used)
                    c._gave_up += 1
                    raise UnavailableError(
                        f"lease: {what}: the stream broke: silent for {c.missed_heartbeats} heartbeats ({silence:g} s)"
                    ) from None
                except (OSError, ValueError, AttributeError) as e:  # http.client raises these on a closed connection
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
            self._conn = None
            self._sock = None
            conn.close()
            resp.close()  # an answer that closes the connection keeps the socket open until closed itself

