"""The multi-endpoint rules (DESIGN.md, Multi-endpoint clients) with a
replica that takes requests and never answers them, as one cut from its
etcd by a link that drops everything: two Proxies in front of one lease
serve stand for two replicas of one store, the first frozen."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

import pytest

from conftest import Proxy, Server, past_first_ttl, renewed_past, renewed_past_async, run_either, unique
from leasehq_lease import AsyncLeaseClient, LeaseClient, UnavailableError

TTL = 3.0
"""The TTL of the holds here: a renewal is due a third of it after the last,
and a hold is lost about two thirds after that."""

modes = pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])


@modes
def test_renewals_move_on_from_a_replica_that_never_answers(
    server: Server, proxy_to: Callable[[Server], Proxy], asynchronous: bool
) -> None:
    # Each renewal waited for the silent replica until the hold's safe
    # deadline, and the hold was lost though the second replica could
    # renew it. A renewal unanswered after a third of the TTL is now also
    # sent to the next replica.
    a, b = proxy_to(server), proxy_to(server)
    key = unique("silent-replica")

    def sync() -> None:
        with LeaseClient([a.url, b.url], owner="worker-a") as c:
            h = c.try_acquire(key, TTL)
            assert c.server == a.url
            a.frozen.set()
            renewed_past(h, past_first_ttl(h))  # raises the loss, if lost first
            assert c.server == b.url
            h.release()

    async def asyncio_() -> None:
        async with AsyncLeaseClient([a.url, b.url], owner="worker-a") as c:
            h = await c.try_acquire(key, TTL)
            assert c.server == a.url
            a.frozen.set()
            await renewed_past_async(h, past_first_ttl(h))
            assert c.server == b.url
            await h.release()

    try:
        run_either(asynchronous, sync, asyncio_)
    finally:
        a.frozen.clear()


@modes
def test_a_late_grant_s_renewal_moves_on_from_a_replica_that_never_answers(
    server: Server, proxy_to: Callable[[Server], Proxy], asynchronous: bool
) -> None:
    # A grant that comes a third of its TTL or more after its request is
    # renewed at once, on its own. The first replica answers the acquire
    # late and then falls silent: that renewal waited there for the TTL,
    # and its answer through the second replica came past the safe
    # deadline, so the acquire failed (the lease given back) though the
    # second replica could renew it at once.
    a, b = proxy_to(server), proxy_to(server)
    key = unique("late-grant")
    a.slow = 0.5 * TTL  # the acquire's answer comes past a third of the TTL
    # real time: frozen while the grant's answer is held back, so the grant
    # still comes and the renewal after it does not.
    freeze = threading.Timer(0.2 * TTL, a.frozen.set)

    def sync() -> None:
        with LeaseClient([a.url, b.url], owner="worker-a") as c:
            freeze.start()
            with c.try_acquire(key, TTL) as h:
                h.check()
            assert c.server == b.url

    async def asyncio_() -> None:
        async with AsyncLeaseClient([a.url, b.url], owner="worker-a") as c:
            freeze.start()
            async with c.try_acquire(key, TTL) as h:
                h.check()
            assert c.server == b.url

    try:
        run_either(asynchronous, sync, asyncio_)
    finally:
        freeze.cancel()
        a.frozen.clear()


@modes
def test_slow_renewals_still_count(server: Server, proxy_to: Callable[[Server], Proxy], asynchronous: bool) -> None:
    # Every replica answers after 40% of the TTL: the renewal is also sent
    # to the next after a third of it, but the first goes on and is answered
    # in time. One server alone, as slow, is never cut short either. (A
    # renewal is sent when the one before is answered, if it is due by
    # then: answers that take half the TTL or more lose the lease, as they
    # must, the second renewal answered past the deadline the first set.)
    a, b, alone = proxy_to(server), proxy_to(server), proxy_to(server)
    keys = unique("slow-pair"), unique("slow-alone")

    def sync() -> None:
        with LeaseClient([a.url, b.url]) as pair, LeaseClient(alone.url) as one:
            holds = pair.try_acquire(keys[0], TTL), one.try_acquire(keys[1], TTL)
            for p in (a, b, alone):
                p.slow = 0.4 * TTL
            for h in holds:
                renewed_past(h, past_first_ttl(h))

    async def asyncio_() -> None:
        async with AsyncLeaseClient([a.url, b.url]) as pair, AsyncLeaseClient(alone.url) as one:
            holds = await pair.try_acquire(keys[0], TTL), await one.try_acquire(keys[1], TTL)
            for p in (a, b, alone):
                p.slow = 0.4 * TTL
            await asyncio.gather(*(renewed_past_async(h, past_first_ttl(h)) for h in holds))

    run_either(asynchronous, sync, asyncio_)


@modes
def test_a_release_past_its_bound_moves_on(server: Server, proxy_to: Callable[[Server], Proxy], asynchronous: bool) -> None:
    # A release is bounded by the hold's safe deadline, shorter than the
    # client's timeout: passing it unanswered is a timeout, as the client's
    # own, and the next request goes to the next replica. (A caller bounding
    # its requests so stayed for good on a replica that never answered, in
    # the Go client.)
    a, b = proxy_to(server), proxy_to(server)
    key = unique("bounded-release")

    def sync() -> None:
        with LeaseClient([a.url, b.url], timeout=30.0) as c:
            h = c.try_acquire(key, TTL)
            a.frozen.set()
            with pytest.raises(UnavailableError):
                h.release()
            assert c.server == b.url
            t0 = time.monotonic()
            c.get(key)  # through b (the lease may have expired meanwhile)
            assert time.monotonic() - t0 < 1.0

    async def asyncio_() -> None:
        async with AsyncLeaseClient([a.url, b.url], timeout=30.0) as c:
            h = await c.try_acquire(key, TTL)
            a.frozen.set()
            with pytest.raises(UnavailableError):
                await h.release()
            assert c.server == b.url
            t0 = time.monotonic()
            await c.get(key)
            assert time.monotonic() - t0 < 1.0

    try:
        run_either(asynchronous, sync, asyncio_)
    finally:
        a.frozen.clear()


def test_a_cancelled_call_does_not_move_on(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    # A cancellation says nothing about the server, asyncio.timeout()'s
    # included (the client cannot tell it from any other): the next request
    # goes to the same one. The client's own timeout, and the bounds it puts
    # on a release or a renewal, are what judge a server silent.
    a, b = proxy_to(server), proxy_to(server)

    async def run() -> None:
        async with AsyncLeaseClient([a.url, b.url]) as c:
            await c.get("warm")
            a.frozen.set()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await c.get(unique("cancelled"))
            assert c.server == a.url

    try:
        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        a.frozen.clear()
