"""Leases with fencing tokens from a ``lease serve`` server, and the guards that
make a resource refuse the late write of a holder whose lease has passed to
someone else.

Sync: LeaseClient (acquire, try_acquire, get, list, all, watch, holding),
Hold, Elector and Semaphore. asyncio: AsyncLeaseClient and its kin, imported
on first use. Guards: FencedResource in process; leasehq_lease.pg on
psycopg 3 (the tables of Go's pgfence). Standard library only; importing the
package does no I/O and leaves http.client, ssl and asyncio unimported until
a client is made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._client import LeaseClient, Watch
from ._election import Elector, Leader, Semaphore, Slot, Term
from ._errors import (
    MAX_TOKEN,
    ForbiddenError,
    HeldError,
    Holder,
    InvalidError,
    LeaseError,
    LeaseLostError,
    LeaseReleasedError,
    NotFoundError,
    NotHeldError,
    StaleTokenError,
    TooManyWatchersError,
    UnauthorizedError,
    UnavailableError,
    UnexpectedAnswerError,
    UnsupportedError,
)
from ._events import WatchEvent
from ._fenced import FencedResource, Snapshot
from ._hold import Hold
from ._wire import DriftMargin, Lease, LeasePage

if TYPE_CHECKING:
    from ._aio import AsyncElector, AsyncHold, AsyncLeaseClient, AsyncSemaphore, AsyncSlot, AsyncTerm, AsyncWatch

_ASYNC = frozenset({"AsyncLeaseClient", "AsyncHold", "AsyncWatch", "AsyncElector", "AsyncTerm", "AsyncSemaphore", "AsyncSlot"})


def __getattr__(name: str) -> Any:
    # The asyncio client imports asyncio, which costs more than the rest of
    # the package: only on first use.
    if name in _ASYNC:
        from . import _aio

        return getattr(_aio, name)
    raise AttributeError(f"module 'leasehq_lease' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The asyncio names too, which __getattr__ gives on first use: dir() and
    # a REPL's completion left them out.
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "MAX_TOKEN",
    "AsyncElector",
    "AsyncHold",
    "AsyncLeaseClient",
    "AsyncSemaphore",
    "AsyncSlot",
    "AsyncTerm",
    "AsyncWatch",
    "DriftMargin",
    "Elector",
    "FencedResource",
    "ForbiddenError",
    "HeldError",
    "Hold",
    "Holder",
    "InvalidError",
    "Leader",
    "Lease",
    "LeaseClient",
    "LeaseError",
    "LeaseLostError",
    "LeasePage",
    "LeaseReleasedError",
    "NotFoundError",
    "NotHeldError",
    "Semaphore",
    "Slot",
    "Snapshot",
    "StaleTokenError",
    "Term",
    "TooManyWatchersError",
    "UnauthorizedError",
    "UnavailableError",
    "UnexpectedAnswerError",
    "UnsupportedError",
    "Watch",
    "WatchEvent",
]
