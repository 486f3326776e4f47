"""Hold, a lease the sync client holds, and the one renewer thread per client
that keeps every hold of that client alive through POST /v1/renew."""

from __future__ import annotations

import os
import threading
import time
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Final, Iterable

from ._errors import (
    ForbiddenError,
    InvalidError,
    LeaseError,
    LeaseLostError,
    LeaseReleasedError,
    NotHeldError,
    quote,
)
from ._wire import (
    MAX_RENEW_BATCH,
    RENEW_BATCH_PATH,
    DriftMargin,
    Granted,
    Lease,
    jittered,
    key_path,
    release_body,
    renew_batch_body,
    renew_results,
    same_lease,
)

if TYPE_CHECKING:
    from ._http import Transport

RELEASE_TIMEOUT: Final = 10.0
"""Seconds a release may take, retries included, and never past the hold's
safe deadline (release_until): past it the lease expires at its TTL anyway."""
IDLE_EXIT: Final = 30.0
"""Seconds the renewer thread waits without holds before it ends (a new hold starts another)."""
MIN_IDLE_TICK: Final = 0.05
"""The shortest pause of an idle renewer thread between looks for new holds."""


class HoldState:
    """What the sync and asyncio holds share: the lease, its I5 deadline and
    renewal schedule on the monotonic clock, and whether it ended."""

    def __init__(self, g: Granted, sent: float, ttl: float, margin: DriftMargin) -> None:
        self.granted = g
        self.ttl = ttl  # asked for; every renewal asks for it again
        self.margin = margin
        self.deadline = 0.0
        self.renew_at = 0.0
        self.ended: LeaseError | None = None  # LeaseLostError or LeaseReleasedError
        self.renewed(g, sent)

    def effective_ttl(self) -> float:
        """The TTL the lease is judged by: the server's when shorter than the one asked for."""
        g = self.granted.lease.ttl
        return g if 0 < g < self.ttl else self.ttl

    def renewed(self, g: Granted, sent: float) -> None:
        """A grant or renewal g answered to a request sent at sent (I5: the send time counts)."""
        self.granted = g
        ttl = self.effective_ttl()
        self.deadline = sent + ttl - self.margin.of(ttl)
        self.renew_at = sent + jittered(ttl / 3)

    def retry_soon(self, now: float) -> None:
        self.renew_at = now + jittered(self.effective_ttl() / 10)

    def lost_error(self, why: str) -> LeaseLostError:
        lease = self.granted.lease
        return LeaseLostError(lease.key, lease.token, f"lease: lost {quote(lease.key)} (token {lease.token}): {why}")


def release_until(s: HoldState) -> float:
    """When the tries of a release end (time.monotonic()): RELEASE_TIMEOUT from
    now, or the hold's safe deadline if sooner, past which the server lets
    the lease go within the drift margin anyway (and release() would not
    send at all). A hung server held the end of a with block for 3 tries of
    RELEASE_TIMEOUT (20 s measured, for a 2 s lease)."""
    return min(time.monotonic() + RELEASE_TIMEOUT, s.deadline)


def due_now(holds: Iterable[HoldBase], now: float) -> list[HoldBase]:
    """The holds to renew at now: none unless one is due; then also those due
    within a sixth of their TTL, which costs nothing and lets holds due at
    about the same time share a request. (A renewal that failed is retried
    at its own time, never early, or a dead server would be asked in a
    tight loop.)"""
    live = [h for h in holds if h._state.ended is None]
    if not any(h._state.renew_at <= now for h in live):
        return []
    return [h for h in live if h._state.renew_at <= now + h._state.effective_ttl() / 6]


class _LossEvent(threading.Event):
    """The hold's lost event. is_set and wait judge the deadline themselves, so
    a process that wakes from a pause (SIGSTOP, swap) past it sees the loss at
    once, before the renewer thread has run."""

    def __init__(self, hold: Hold) -> None:
        super().__init__()
        self._hold = hold

    def is_set(self) -> bool:
        self._hold._judge()
        return super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self._hold._judge()
            if super().is_set():
                return True
            now = time.monotonic()
            left = self._hold._state.deadline - now
            if self._hold._state.ended is not None:
                left = 3600.0  # released: only a loss sets it, which cannot come now
            if end is not None:
                if now >= end:
                    return False
                left = min(left, end - now)
            super().wait(max(left, 0.0005))


class HoldBase:
    """What Hold and AsyncHold share: the lease, its token, and the judgement
    of its deadline, which the hold makes itself whenever asked."""

    def __init__(self, g: Granted, sent: float, ttl: float, margin: DriftMargin) -> None:
        self._state = HoldState(g, sent, ttl, margin)
        self._released = False
        self.key: str = g.lease.key
        self.token: int = g.lease.token
        """The fencing token; renewal never changes it."""
        self.owner: str = g.lease.owner

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r} token={self.token} held={self.held}>"

    @property
    def lease(self) -> Lease:
        """The lease as its last grant or renewal answered it (without its id)."""
        return self._state.granted.lease

    @property
    def deadline(self) -> float:
        """The safe deadline on time.monotonic()'s clock (the event loop's): the latest instant the client still counts the lease held."""
        return self._state.deadline

    @property
    def held(self) -> bool:
        """Whether the lease is still held: not lost, not released."""
        self._judge()
        return self._state.ended is None

    def check(self) -> None:
        """Raises LeaseLostError if the lease may be gone (LeaseReleasedError after release())."""
        self._judge()
        if self._state.ended is not None:
            raise self._state.ended

    def _judge(self) -> None:
        s = self._state
        if s.ended is None and time.monotonic() >= s.deadline:
            self._lose("no successful renewal before the safe deadline")

    def _lose(self, why: str) -> None:
        raise NotImplementedError


class Hold(HoldBase):
    """A lease the client holds and renews in the background (one thread per
    client, renewing its holds together at about a third of their TTLs).

    ``lost`` is a threading.Event set as soon as the client can no longer be
    sure it holds the lease: when the server says it is gone, or when the safe
    deadline (send time of the last successful acquire or renew + TTL - drift
    margin, on this process's monotonic clock; I5) passes without a renewal.
    Both come before the server could give the lease to anyone else.
    ``check()`` raises LeaseLostError then. Pass ``token`` with every write to
    the protected resource.

    ``with`` releases the hold at the end of the block, quietly if it was lost
    (``lost`` and ``check()`` already said so); ``release()`` says what
    happened."""

    def __init__(self, renewer: Renewer, g: Granted, sent: float, ttl: float, margin: DriftMargin) -> None:
        super().__init__(g, sent, ttl, margin)
        self._renewer = renewer
        self._lost: _LossEvent | None = None  # made when first asked for: most holds never are
        # Held by release() until it has ended, so that a call from another
        # thread meanwhile waits for it rather than return with the lease
        # still held (or send a release of its own). Reentrant, for a signal
        # handler that releases in a thread interrupted in release().
        self._releasing = threading.RLock()

    @property
    def lost(self) -> threading.Event:
        """Set when the lease may be gone (see the class)."""
        ev = self._lost
        if ev is None:
            with self._renewer._cond:
                if self._lost is None:
                    self._lost = _LossEvent(self)
                    if isinstance(self._state.ended, LeaseLostError):
                        threading.Event.set(self._lost)
                ev = self._lost
        return ev

    def _lose(self, why: str) -> None:
        self._renewer.lose(self, why)

    def release(self) -> None:
        """Stops renewal, marks the hold released (check() then raises
        LeaseReleasedError) and releases the lease on the server. If the lease
        had been lost it raises that LeaseLostError and sends nothing;
        calling it again does nothing. A lease the server no longer holds
        raises NotHeldError. Calls from several threads at once send one
        release: the first says what happened, and the others return once it
        has ended."""
        with self._releasing:
            if self._released:
                return
            self._released = True
            self._judge()
            lost = self._renewer.end(self)
            if lost is not None:
                # The server lets it go within the drift margin of the deadline
                # (or has already): a release would arrive too late to matter.
                raise lost
            try:
                self._send_release()
            except LeaseError:
                raise
            except BaseException:
                # Interrupted in this thread (KeyboardInterrupt, a signal
                # handler's exception): the release was cut, and the lease
                # stayed held, renewed by nobody, until its TTL. It is sent
                # again in a thread of its own, as a grant that crossed an
                # interruption is given back (_http.Late), and the
                # interruption goes on at once.
                from ._http import background  # imported by the client that made the hold

                def again() -> None:
                    try:
                        self._send_release()
                    except LeaseError:
                        pass  # it expires at its TTL

                background(again)
                raise

    def _send_release(self) -> None:
        self._renewer.transport.request(
            "POST", key_path(self.key, "release"), release_body(self._state.granted),
            repeatable=True, timeout=RELEASE_TIMEOUT, until=release_until(self._state),
        )

    def _give_back(self) -> None:
        """Releases a hold that never reached its caller (an Elector's or a
        Semaphore's acquire interrupted after the grant: KeyboardInterrupt, a
        signal handler's exception), in a thread of its own, as a grant that
        crossed an interruption is given back (_http.Late): left alone, the
        renewer kept it for as long as the process ran."""
        from ._http import background  # imported by the client that made the hold

        def release() -> None:
            try:
                self.release()
            except LeaseError:
                pass  # lost, or the release failed: it expires at its TTL, renewed by nobody

        background(release)

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.release()
        except LeaseError:
            pass  # a loss was told by lost/check(); an unreleased lease expires at its TTL


_renewers: weakref.WeakSet[Renewer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child (a prefork worker pool, multiprocessing) has no renewer
    thread, and the leases its holds name stay with the parent: every hold it
    inherited is lost in the child, and its client starts afresh."""
    for r in list(_renewers):
        r._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Renewer:
    """One thread per client that renews all its holds, batched through POST
    /v1/renew (up to 256 a request), each at about a third of its TTL; it
    also sets each hold's lost event at its deadline. A hold still answers
    for its own deadline (Hold._judge), whatever the thread is doing."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._holds: set[Hold] = set()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._wake_at = float("inf")
        # An idle thread looks for new holds every _idle_tick (a sixth of the
        # last hold's TTL), so that adding a hold that is due later than
        # that need not wake it: a lone caller that takes and frees holds in
        # a loop costs the thread nothing.
        self._idle_tick = IDLE_EXIT
        self._closed = False  # the client was closed: the thread ends once it has no holds
        self.on_lost: Callable[[Hold], None] | None = None
        _renewers.add(self)

    def close(self) -> None:
        """Ends the thread now if it has no holds, else once they end (a new
        hold starts another): it outlived a closed client by 30 s."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _forked(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._thread = None
        self._wake_at = float("inf")
        holds, self._holds = self._holds, set()
        for h in holds:
            s = h._state
            if s.ended is None:
                s.ended = s.lost_error("the process forked: the lease stays with the parent")
            if h._lost is not None:
                h._lost._at_fork_reinit()  # type: ignore[attr-defined]
                threading.Event.set(h._lost)
        self.transport.forked()

    def add(self, h: Hold) -> None:
        with self._cond:
            self._closed = False
            self._holds.add(h)
            self._idle_tick = max(MIN_IDLE_TICK, min(IDLE_EXIT, h._state.ttl / 6))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="leasehq-lease-renewer", daemon=True)
                self._wake_at = h._state.renew_at
                self._thread.start()
            elif h._state.renew_at < self._wake_at:
                self._cond.notify()

    def end(self, h: Hold) -> LeaseError | None:
        """Ends h by release: returns the loss if it had been lost first."""
        with self._cond:
            self._holds.discard(h)
            s = h._state
            if s.ended is None:
                s.ended = LeaseReleasedError(h.key, h.token)
                return None
            return s.ended if isinstance(s.ended, LeaseLostError) else None

    def lose(self, h: Hold, why: str) -> None:
        with self._cond:
            s = h._state
            if s.ended is not None:
                return
            s.ended = s.lost_error(why)
            self._holds.discard(h)
            ev = h._lost
        if ev is not None:
            threading.Event.set(ev)
        if self.on_lost is not None:
            self.on_lost(h)

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                if not self._holds:
                    now = time.monotonic()
                    if now - idle_since >= IDLE_EXIT or self._closed:
                        self._thread = None
                        return
                    tick = min(self._idle_tick, idle_since + IDLE_EXIT - now)
                    self._wake_at = now + tick
                    self._cond.wait(tick)
                    continue
                now = idle_since = time.monotonic()
                holds = list(self._holds)
            expired = [h for h in holds if now >= h._state.deadline]
            for h in expired:
                self.lose(h, "no successful renewal before the safe deadline")
            due = due_now(holds, now)
            if not due:
                with self._cond:
                    live = [h._state for h in self._holds]
                    if not live:
                        continue
                    self._wake_at = min(min(s.renew_at, s.deadline) for s in live)
                    left = self._wake_at - time.monotonic()
                    if left > 0:
                        self._cond.wait(left)
                continue
            with self._cond:
                self._wake_at = float("-inf")  # busy: no need to wake it
            due.sort(key=lambda h: h._state.renew_at)
            for i in range(0, len(due), MAX_RENEW_BATCH):
                self._renew([h for h in due[i : i + MAX_RENEW_BATCH] if isinstance(h, Hold)])

    def _renew(self, batch: list[Hold]) -> None:
        sent = time.monotonic()
        granted = [h._state.granted for h in batch]
        body = renew_batch_body([(g, h._state.ttl) for g, h in zip(granted, batch)])
        # An answer after the earliest deadline could not be used by that
        # hold: no try, retries included, waits past it.
        until = min(h._state.deadline for h in batch)
        timeout = max(0.01, until - sent)
        ttl = min(h._state.effective_ttl() for h in batch)
        try:
            a = self.transport.renew(RENEW_BATCH_PATH, body, ttl, timeout=timeout, until=until)
            results = renew_results(a.body, granted)
        except LeaseError as e:
            if refused_whole(e, len(batch)):
                for h in batch:
                    self._renew([h])
                return
            now = time.monotonic()
            with self._cond:
                for h in batch:
                    h._state.retry_soon(now)
            return
        except Exception:
            # Not an answer's: a bug, here or below (http.client raised a
            # TypeError for a late body). It ended the thread, which the
            # client still counted running: no hold of it was renewed again.
            import logging

            logging.getLogger("leasehq_lease").exception("lease: renew: an unexpected error; the renewals are retried")
            now = time.monotonic()
            with self._cond:
                for h in batch:
                    h._state.retry_soon(now)
            return
        now = time.monotonic()
        for h, g, r in zip(batch, granted, results):
            s = h._state
            if isinstance(r, Granted):
                if not same_lease(g, r):
                    self.lose(h, f"the renewal was answered with another lease (token {r.lease.token})")
                elif now >= s.deadline:
                    self.lose(h, "the renewal's answer came after the safe deadline")
                else:
                    with self._cond:
                        if s.ended is None:
                            s.renewed(r, sent)
            elif r == "not_held":
                self.lose(h, "the server no longer holds it")
            else:
                with self._cond:
                    s.retry_soon(now)


def refused_whole(e: LeaseError, n: int) -> bool:
    """Whether a batch of n renewals refused with e is to be asked again one
    renewal each: a refusal of the whole batch (403 for a key the credential no
    longer covers, 400 for one renewal the server will not take) may be for one
    renewal's sake, and would be again each time that renewal rode with the
    others, losing them all."""
    return n > 1 and isinstance(e, (ForbiddenError, InvalidError))
