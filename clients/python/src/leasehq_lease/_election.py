"""Election and semaphores over the HTTP API, as Go's election and semaphore
packages do them on any backend: no storage of their own, so they inherit
I1-I5 from the leases they are made of.

A term is a lease on the election's key whose owner is the leader's value;
its token fences the leader's writes. A semaphore of N slots is N leases
(NAME/slots/0 ... NAME/slots/N-1) and a queue lease (NAME/queue) that waiters
take first, so that only the head of the line looks for a slot."""

from __future__ import annotations

import queue
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Final, Generator, NamedTuple

from ._errors import HeldError, InvalidError, UnsupportedError
from ._events import EVENT_SYNCED, RESET, WatchEvent
from ._wire import Lease, check_name, check_ttl, jittered

if TYPE_CHECKING:
    from datetime import datetime

    from ._client import LeaseClient
    from ._hold import Hold

MAX_SLOTS: Final = 1024
"""The most slots a semaphore may have."""
POLL_FIRST: Final = 0.005
POLL_MAX: Final = 0.5
"""Polling backs off from 5 to 500 ms, as Go's internal/wait does."""


class Leader(NamedTuple):
    """A term as others see it; value None and token 0 when there is no leader."""

    key: str
    value: str | None = None
    token: int = 0
    expires_at: datetime | None = None


def leader_of(lease: Lease) -> Leader:
    return Leader(lease.key, lease.owner, lease.token, lease.expires_at)


class Follower:
    """Follows one key's leadership through a watch of it, as Go's
    election.Observe does: feed() takes each event and returns the leader to
    report, or None. Renewals are not changes; the end of a term already
    superseded is skipped; a reset forgets the picture; nothing is reported
    before the picture is complete (synced), nor the same leader twice."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.cur = Leader(key)
        self.last: Leader | None = None
        self.synced = False
        self.lapsed = False  # cur's expiry passed with no renewal seen, and was reported

    def feed(self, ev: WatchEvent) -> Leader | None:
        key = self.key
        if ev.kind == RESET:
            self.cur, self.synced, self.lapsed = Leader(key), False, False
            return None
        if ev.kind == EVENT_SYNCED:
            self.synced = True
        elif ev.lease is None or ev.lease.key != key:
            return None  # a prefix watch also sees keys that extend key
        elif ev.kind in ("held", "acquired"):
            self.cur, self.lapsed = leader_of(ev.lease), False
        elif ev.kind == "renewed":
            if ev.lease.token != self.cur.token:
                return None
            # Not a change, but it moves the expiry; after a lapse, the
            # leader is back.
            self.cur, self.lapsed = leader_of(ev.lease), False
        elif ev.lease.token == self.cur.token:  # released, expired: the end of this term
            self.cur, self.lapsed = Leader(key), False
        else:
            return None  # the end of a term already superseded
        return self.polled(self.cur) if self.synced else None

    def until_lapse(self) -> float | None:
        """Seconds until the current leader's expiry on this machine's clock
        (0 once passed), or None when no leader is known or its lapse was
        reported: how long to wait for news before lapsed()."""
        cur = self.cur
        if not self.synced or self.lapsed or cur.token == 0 or cur.expires_at is None:
            return None
        return max(0.0, cur.expires_at.timestamp() - time.time())

    def lapsed_now(self) -> Leader | None:
        """The leader's expiry passed with no renewal seen (it died, or the watch
        went silent): "no leader known", to report if not reported already.
        A renewal of that term seen later reports it again."""
        self.lapsed = True
        return self.polled(Leader(self.key))

    def polled(self, cur: Leader) -> Leader | None:
        """cur, read by polling, if it differs from the last reported."""
        if self.last is not None and (cur.token, cur.value) == (self.last.token, self.last.value):
            return None
        self.last = cur
        return cur


class _HoldView:
    """A Hold under another name (a Term, a Slot): what a Hold shows (as
    AsyncTerm and AsyncSlot, which are AsyncHolds), its check and release."""

    def __init__(self, hold: Hold) -> None:
        self.hold = hold
        self.key = hold.key
        self.token = hold.token
        self.owner = hold.owner
        self.lost = hold.lost

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={self.key!r} token={self.token} held={self.held}>"

    @property
    def held(self) -> bool:
        return self.hold.held

    @property
    def lease(self) -> Lease:
        """The lease as its last grant or renewal answered it."""
        return self.hold.lease

    @property
    def deadline(self) -> float:
        """The safe deadline on time.monotonic()'s clock (Hold.deadline)."""
        return self.hold.deadline

    def check(self) -> None:
        self.hold.check()

    def release(self) -> None:
        self.hold.release()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.hold.__exit__(et, e, tb)


class Term(_HoldView):
    """A won election: the lease on the key, renewed until resign() or its loss."""

    def __init__(self, hold: Hold, value: str) -> None:
        super().__init__(hold)
        self.value = value

    def resign(self) -> None:
        """Ends the term at once, so the next candidate is elected without waiting for the TTL."""
        self.hold.release()

    def __enter__(self) -> Term:
        return self


class Elector:
    """Campaigns for and observes elections through a LeaseClient; terms last ttl seconds between renewals."""

    def __init__(self, client: LeaseClient, ttl: float = 10.0) -> None:
        self.client = client
        self.ttl = check_ttl(ttl)

    def campaign(self, key: str, value: str, *, wait: float | None = None) -> Term:
        """Waits until it is elected leader of key, announcing value (checked as an owner is)."""
        h = self.client.acquire(key, self.ttl, wait=wait, owner=value)
        try:
            return Term(h, value)
        except BaseException:
            h._give_back()  # interrupted on its way to the caller
            raise

    def leader(self, key: str) -> Leader | None:
        """Key's leader now, or None."""
        lease = self.client.get(key)
        return None if lease is None else leader_of(lease)

    def observe(self, key: str) -> Generator[Leader, None, None]:
        """Key's leadership: the leader now (value None when there is none), then
        each change, a new term or the end of one. Renewals are not changes;
        tokens of successive leaders only rise. It follows the server's watch
        (opened again when it breaks), or reads the leader at a pace where the
        server cannot watch."""
        check_name("key", key)
        f = Follower(key)
        w = self.client.watch(key)
        # The watch is read by a thread of its own, so that the leader's
        # expiry is reported on time however silent the watch is (as Go's
        # Observe: never a leader past its expiry).
        # Bounded as the socket was: a caller that stops iterating stops the
        # reading, and the server cuts the stream off as before.
        q: queue.Queue[WatchEvent | BaseException | None] = queue.Queue(maxsize=1024)
        # Set when the caller stops: the thread puts nothing more, so that
        # the one put the drain below frees is its last (blocked on a full
        # queue, it stayed so for good, its connection open).
        stopped = threading.Event()

        def pump() -> None:
            try:
                for ev in w:
                    if stopped.is_set():
                        return
                    q.put(ev)
                item: WatchEvent | BaseException | None = None
            except BaseException as e:  # noqa: BLE001 - handed to the reader
                item = e
            if not stopped.is_set():
                q.put(item)

        threading.Thread(target=pump, name=f"lease-observe-{key}", daemon=True).start()
        try:
            while True:
                try:
                    item = q.get(timeout=f.until_lapse())
                except queue.Empty:
                    leader = f.lapsed_now()
                    if leader is not None:
                        yield leader
                    continue
                if item is None:
                    break
                if isinstance(item, UnsupportedError):
                    break
                if isinstance(item, BaseException):
                    raise item
                leader = f.feed(item)
                if leader is not None:
                    yield leader
        finally:
            stopped.set()
            w.close()
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        pause = POLL_FIRST
        while True:
            leader = f.polled(self.leader(key) or Leader(key))
            if leader is not None:
                pause = POLL_FIRST
                yield leader
            time.sleep(jittered(pause))
            pause = min(pause * 2, POLL_MAX)

    def run(
        self,
        key: str,
        value: str,
        lead: Callable[[Term], None],
        *,
        requeue: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        """The leader runner: campaigns for key, calls lead(term) while leader and
        resigns when it returns or raises (quietly after a loss, which
        term.lost and term.check() tell lead). With requeue it campaigns again
        until stop is set. lead must watch term.lost or call term.check()
        before each write, and pass term.token to the guard; a sync function
        cannot be stopped from outside (AsyncElector.run cancels it)."""
        while stop is None or not stop.is_set():
            with self.campaign(key, value) as term:  # no step between the term and its with
                lead(term)
            if not requeue:
                return


class Slot(_HoldView):
    """One of a semaphore's slots, held."""

    def __init__(self, hold: Hold, number: int) -> None:
        super().__init__(hold)
        self.number = number
        """The slot's number, 0 to N-1."""

    def __enter__(self) -> Slot:
        return self


class SemaphoreBase:
    """What Semaphore and AsyncSemaphore share: the name, the slots' keys and
    the order and hints of a try of every slot."""

    def __init__(self, name: str, n: int, ttl: float) -> None:
        check_name("semaphore name", name + "/slots/" + str(MAX_SLOTS))
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SLOTS:
            raise InvalidError(f"lease: semaphore {name!r}: n must be 1 to {MAX_SLOTS}, got {n!r}")
        self.name = name
        self.n = n
        self.ttl = check_ttl(ttl)

    def slot_key(self, i: int) -> str:
        return f"{self.name}/slots/{i}"

    def is_slot(self, key: str) -> bool:
        """Whether key is one of the semaphore's slots under any limit:
        NAME/slots/I as slot_key spells it, I below MAX_SLOTS. Other keys under
        the prefix (a semaphore named NAME/slots/gpu, its line, any lease there)
        are not its holders."""
        prefix = self.name + "/slots/"
        if not key.startswith(prefix):
            return False
        rest = key[len(prefix) :]
        return rest.isascii() and rest.isdigit() and str(int(rest)) == rest and int(rest) < MAX_SLOTS

    @property
    def queue_key(self) -> str:
        return self.name + "/queue"

    def _order(self) -> list[int]:
        """The slots in the order to try them: from a random one on, so that
        callers do not all contend for slot 0."""
        import random

        start = random.randrange(self.n)
        return [(start + j) % self.n for j in range(self.n)]

    @staticmethod
    def _until_free(e: HeldError, soonest: float) -> float:
        """soonest, or the seconds until e's holder expires if sooner (on the server's clock)."""
        if e.holder is None:
            return soonest
        from datetime import datetime, timezone

        return min(soonest, max(0.0, (e.holder.expires_at - datetime.now(timezone.utc)).total_seconds()))

    def _all_held(self) -> HeldError:
        return HeldError(f"lease: semaphore {self.name!r}: all {self.n} slots are held")


class Semaphore(SemaphoreBase):
    """At most n holders at once under name: n leases name/slots/0..n-1, each
    with its own fencing token, held for ttl seconds between renewals."""

    def __init__(self, client: LeaseClient, name: str, n: int, ttl: float = 10.0) -> None:
        super().__init__(name, n, ttl)
        self.client = client

    def try_acquire(self) -> Slot:
        """Takes a free slot at once, or raises HeldError when all are held. It
        tries the slots from a random one on, so that callers do not all
        contend for slot 0."""
        slot, _ = self._try_all()
        if slot is None:
            raise self._all_held()
        return slot

    def _try_all(self) -> tuple[Slot | None, float]:
        """A slot, or None and the seconds until the earliest holder's expiry (inf if unknown)."""
        soonest = float("inf")
        for i in self._order():
            try:
                h = self.client.try_acquire(self.slot_key(i), self.ttl)
            except HeldError as e:
                soonest = self._until_free(e, soonest)
                continue
            try:
                return Slot(h, i), 0.0
            except BaseException:
                h._give_back()  # interrupted on its way to the caller
                raise
        return None, soonest

    def acquire(self, *, wait: float | None = None) -> Slot:
        """Waits in line for a slot, up to wait seconds (default: for ever): it
        takes the queue lease first (first come, first served), then only it
        looks for a slot, at the earliest holder's expiry or a backoff from 5
        to 500 ms, whichever is sooner. The turn's loss ends the search with
        LeaseLostError (the next in line may have the turn by then)."""
        until = float("inf") if wait is None else time.monotonic() + wait
        slot: Slot | None = None
        try:
            with self.client.acquire(self.queue_key, self.ttl, wait=wait) as turn:
                pause = POLL_FIRST
                while True:
                    turn.check()
                    slot, soonest = self._try_all()
                    if slot is not None:
                        # The turn's release on the way out takes a request:
                        # an interruption then left the slot held by nobody.
                        return slot
                    left = until - time.monotonic()
                    if left <= 0:
                        raise HeldError(f"lease: semaphore {self.name!r}: all {self.n} slots still held after the wait")
                    time.sleep(max(0.0, min(jittered(pause), soonest, left)))
                    pause = min(pause * 2, POLL_MAX)
        except BaseException:
            if slot is not None:
                slot.hold._give_back()
            raise

    def holders(self) -> list[Lease]:
        """The slots held now, in key order (every page of the list): its own
        slots only, not other leases under NAME/slots/."""
        return [lease for lease in self.client.all(self.name + "/slots/") if self.is_slot(lease.key)]

