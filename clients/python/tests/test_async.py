"""AsyncLeaseClient: the sync API's names on asyncio; a loss cancels the
block that holds the lease, which ends with LeaseLostError."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Callable

import pytest

from leasehq_lease import (
    AsyncElector,
    AsyncLeaseClient,
    AsyncSemaphore,
    FencedResource,
    HeldError,
    Leader,
    LeaseLostError,
    LeaseReleasedError,
    StaleTokenError,
    UnauthorizedError,
    UnavailableError,
)

from conftest import RENEWED_TTL, Proxy, Server, StartServer, check_minimal_renewals, free_port, past_first_ttl, renewed_past_async, unique


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_acquire_renew_release(server: Server) -> None:
    async def main() -> None:
        async with AsyncLeaseClient(server.url, owner="aa") as c:
            key = unique("a")
            async with c.acquire(key, RENEWED_TTL) as h:
                assert h.owner == "aa" and h.held
                past = past_first_ttl(h)
                await renewed_past_async(h, past)  # by the client's one task
                h.check()
                got = await c.get(key)
                assert got is not None and got.token == h.token and got.expires_at >= past
                with pytest.raises(HeldError):
                    await c.try_acquire(key, 1.0)
            assert await c.get(key) is None
            with pytest.raises(LeaseReleasedError):
                h.check()
            h2 = await c.acquire(key, 1.0)  # awaited, not a block
            assert h2.token > h.token
            await h2.release()

    run(main())


def test_renew_batches_get_the_minimal_answer_and_holds_keep_renewing(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # As the sync client's: the renewer task asks for the minimal answer,
    # and the holds renew from each lease's TTL and expiry alone.
    import json

    async def main() -> None:
        async with AsyncLeaseClient(server.url, owner="minimal") as c:
            t = c._transport
            real = t.renew
            answers: list[Any] = []

            async def renew(path: str, *args: Any, **kwargs: Any) -> Any:
                a = await real(path, *args, **kwargs)
                if path == "/v1/renew":
                    answers.append(json.loads(a.body))
                return a

            monkeypatch.setattr(t, "renew", renew)
            holds = [await c.try_acquire(unique("minimal"), RENEWED_TTL) for _ in range(3)]
            first = [(h.key, h.owner, h.token) for h in holds]
            for h, past in [(h, past_first_ttl(h)) for h in holds]:
                await renewed_past_async(h, past)
            check_minimal_renewals(holds, first, answers)
            for h in holds:
                await h.release()

    run(main())


def test_a_loss_cancels_the_block(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    net = proxy_to(server)
    resource: FencedResource[str] = FencedResource("initial")

    async def main() -> None:
        c = AsyncLeaseClient(net.url, timeout=0.5)
        b = AsyncLeaseClient(server.url)
        key = unique("loss")
        reached = False
        t0 = time.monotonic()
        with pytest.raises(LeaseLostError) as e:
            async with c.acquire(key, 0.5) as h:
                net.frozen.set()
                await asyncio.sleep(10)  # cancelled at the deadline
                reached = True
        assert not reached and h.lost.is_set() and time.monotonic() - t0 < 2
        assert isinstance(e.value.__cause__, asyncio.CancelledError)
        while await b.get(key) is not None:
            await asyncio.sleep(0.01)
        async with b.acquire(key, 5.0) as hb:
            resource.write(hb.token, "written-by-b")
            with pytest.raises(StaleTokenError):
                resource.write(h.token, "written-by-a-late")
        net.frozen.clear()
        await c.close()
        await b.close()

    run(main())
    assert resource.read().value == "written-by-b"


def test_a_cancellation_from_outside_stays_a_cancellation(server: Server) -> None:
    async def main() -> None:
        c = AsyncLeaseClient(server.url)
        key = unique("cancel")

        async def body() -> None:
            async with c.acquire(key, 5.0):
                await asyncio.sleep(10)

        t = asyncio.get_running_loop().create_task(body())
        await asyncio.sleep(0.2)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert await c.get(key) is None  # released on the way out
        await c.close()

    run(main())


def test_holding_runs_only_while_holding(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    net = proxy_to(server)

    async def main() -> None:
        c = AsyncLeaseClient(net.url, timeout=0.5)
        key = unique("holding")
        seen: list[int] = []

        @c.holding(key, ttl=0.5)
        async def job(n: int, *, hold: Any) -> int:
            seen.append(hold.token)
            if n == 2:
                net.frozen.set()
                await asyncio.sleep(10)
            return n * 10

        assert await job(1) == 10
        with pytest.raises(LeaseLostError):
            await job(2)
        net.frozen.clear()
        assert len(seen) == 2 and seen[1] > seen[0]
        await c.close()

    run(main())


def test_waiting_acquire_and_its_cancellation(server: Server) -> None:
    async def main() -> None:
        c = AsyncLeaseClient(server.url)
        key = unique("wait")
        h = await c.acquire(key, 5.0)
        with pytest.raises(HeldError):
            await c.acquire(key, 5.0, wait=0.2)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await c.acquire(key, 5.0)
        waiter = asyncio.get_running_loop().create_task(_wait(c, key))
        await asyncio.sleep(0.2)
        await h.release()
        h2 = await waiter
        assert h2.token > h.token
        await h2.release()
        await c.close()

    async def _wait(c: AsyncLeaseClient, key: str) -> Any:
        return await c.acquire(key, 5.0, wait=10)

    run(main())


def test_errors_and_several_servers(start_server: StartServer) -> None:
    s = start_server(tokens=["t0ken-for-everything-0123456789 *"])

    async def main() -> None:
        async with AsyncLeaseClient(s.url) as refused:
            with pytest.raises(UnauthorizedError):
                await refused.get("k")
        dead = f"http://127.0.0.1:{free_port()}"
        c = AsyncLeaseClient([dead, s.url], token="t0ken-for-everything-0123456789")
        async with c.acquire(unique("m"), 1.0):
            assert c.server == s.url
        async with AsyncLeaseClient([dead]) as none:
            with pytest.raises(UnavailableError):
                await none.get("k")
        await c.close()

    run(main())


def test_list_all_and_watch(server: Server) -> None:
    async def main() -> None:
        c = AsyncLeaseClient(server.url)
        prefix = unique("l") + "/"
        holds = [await c.try_acquire(f"{prefix}{i}", 5.0) for i in range(5)]
        assert [x.key async for x in c.all(prefix, limit=2)] == [f"{prefix}{i}" for i in range(5)]
        page = await c.list(prefix, limit=3)
        assert len(page.leases) == 3 and page.next
        async with c.watch(prefix) as w:
            kinds = []
            async for ev in w:
                kinds.append(ev.kind)
                if ev.kind == "synced":
                    await holds[0].release()
                if ev.kind == "released":
                    break
        assert kinds == ["held"] * 5 + ["synced", "released"]
        for h in holds[1:]:
            await h.release()
        await c.close()

    run(main())


def test_missed_heartbeats_break_an_async_watch(start_server: StartServer, proxy_to: Callable[[Server], Proxy]) -> None:
    # The client's own heartbeat is the 15 s default: only the server's
    # Lease-Heartbeat-Ms (100 ms) can make it notice a frozen link in time.
    s = start_server(args=("--watch-heartbeat", "100ms"))
    net = proxy_to(s)

    async def main() -> None:
        c = AsyncLeaseClient(net.url)
        w = c.watch(reconnect=False)
        assert (await w.__anext__()).kind == "synced"
        net.frozen.set()
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match="heartbeats"):
            await w.__anext__()
        assert time.monotonic() - t0 < 10
        net.frozen.clear()
        await c.close()

    run(main())


def test_async_election_and_semaphore(server: Server) -> None:
    async def main() -> None:
        c = AsyncLeaseClient(server.url)
        e = AsyncElector(c, ttl=2.0)
        key = unique("elect")
        seen: list[Any] = []

        async def observe() -> None:
            async for leader in e.observe(key):
                seen.append(leader)

        obs = asyncio.get_running_loop().create_task(observe())
        t1 = await e.campaign(key, "node-1")
        assert t1.value == "node-1"
        leader = await e.leader(key)
        assert leader is not None and leader.value == "node-1" and leader.token == t1.token
        second = asyncio.get_running_loop().create_task(e.campaign(key, "node-2"))
        await asyncio.sleep(0.2)
        assert not second.done()
        await t1.resign()
        t2 = await second
        assert t2.token > t1.token
        await asyncio.sleep(0.3)
        await t2.resign()
        await asyncio.sleep(0.3)
        obs.cancel()
        values = [x.value for x in seen]
        assert values[:1] == [None] or values[0] == "node-1"
        assert "node-1" in values and "node-2" in values and values[-1] is None
        tokens = [x.token for x in seen if x.token]
        assert tokens == sorted(tokens)

        # The runner: lead runs inside the term and is cancelled by its loss.
        ran: list[int] = []

        async def lead(term: Any) -> None:
            ran.append(term.token)

        await e.run(unique("runner"), "node-3", lead)
        assert len(ran) == 1
        # With on_new_leader, its observation ends with run: no task is left.
        heard: list[Leader] = []
        before = asyncio.all_tasks()
        await e.run(unique("runner"), "node-3", lead, on_new_leader=heard.append)
        assert len(ran) == 2 and asyncio.all_tasks() <= before

        # A term and a slot are their own context managers, typed as
        # themselves (mypy --strict checks it): AsyncHold.__aenter__ said an
        # AsyncHold, which has neither value nor number.
        async with await e.campaign(unique("block"), "node-4") as term:
            assert term.value == "node-4" and term.held

        sem = AsyncSemaphore(c, unique("sem"), 2, ttl=2.0)
        s1, s2 = await sem.try_acquire(), await sem.try_acquire()
        assert {s1.number, s2.number} == {0, 1}
        with pytest.raises(HeldError):
            await sem.try_acquire()
        waiting = asyncio.get_running_loop().create_task(sem.acquire())
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await s1.release()
        s3 = await waiting
        assert s3.number == s1.number and s3.token > s1.token
        assert len(await sem.holders()) == 2
        async with await AsyncSemaphore(c, unique("sem"), 1, ttl=2.0).acquire() as slot:
            assert slot.number == 0 and slot.held
        await s2.release()
        await s3.release()
        await c.close()

    run(main())


def test_a_loss_the_block_swallowed_leaves_no_cancellation_behind(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    # A block that catches the CancelledError of its loss and goes on (or
    # turns it into another error) ends without LeaseLostError, as a block
    # under asyncio.timeout() ends without TimeoutError; but the loss's
    # cancel request was left counted on the task (Task.cancelling() 1), so
    # that every asyncio.timeout() the task entered afterwards raised
    # CancelledError instead of TimeoutError on Python 3.11, and a
    # TaskGroup or the asyncio.Runner took the task for cancelled.
    net = proxy_to(server)

    async def main() -> None:
        async with AsyncLeaseClient(net.url, timeout=0.5) as c:
            task = asyncio.current_task()
            assert task is not None
            stopped = False
            for convert in (False, True):
                try:
                    async with c.acquire(unique("swallow"), 0.5):
                        net.frozen.set()
                        try:
                            await asyncio.sleep(10)  # cancelled at the deadline
                        except asyncio.CancelledError:
                            stopped = True  # swallowed, or told as another error
                            if convert:
                                raise ValueError("stopped")
                except ValueError:
                    assert convert
                net.frozen.clear()
                assert stopped and task.cancelling() == 0
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await asyncio.sleep(1)

    run(main())


def test_a_watch_closed_from_another_task_ends_its_iteration(server: Server) -> None:
    # As Watch.close() from another thread: aclose() while a task iterates
    # the watch raised RuntimeError ("asynchronous generator is already
    # running") and left that task reading for as long as the stream
    # lasted.
    async def main() -> None:
        async with AsyncLeaseClient(server.url) as c:
            w = c.watch(unique("closed") + "/")
            kinds: list[str] = []

            async def follow() -> None:
                async for ev in w:
                    kinds.append(ev.kind)

            t = asyncio.get_running_loop().create_task(follow())
            while not kinds:
                await asyncio.sleep(0.005)
            await w.aclose()
            await asyncio.wait_for(t, 5)  # ended, without an error
            assert kinds == ["synced"]
            with pytest.raises(StopAsyncIteration):
                await w.__anext__()

    run(main())


def test_lost_is_judged_however_long_the_loop_was_blocked(server: Server) -> None:
    # I5 for asyncio: a step that blocks the event loop past the deadline
    # (CPU-bound work, a blocking call) keeps the deadline's timer from
    # running. h.held and h.check() judged the deadline themselves, but
    # h.lost.is_set() said False until the loop ran the timer: the hold
    # reported held past its deadline. It judges, as the sync hold's does.
    async def main() -> None:
        async with AsyncLeaseClient(server.url) as c:
            h = await c.acquire(unique("blocked"), 1.0)
            assert not h.lost.is_set()
            time.sleep(1.2)  # real time: the loop blocked past the 1 s deadline
            assert h.lost.is_set()
            assert not h.held
            with pytest.raises(LeaseLostError):
                await h.release()

    run(main())


def test_a_wait_cancelled_as_it_is_granted_stays_cancelled(server: Server) -> None:
    # Python 3.11's asyncio.wait_for, cancelled in the turn its read
    # finished, returned the read and dropped the cancellation: a waiting
    # acquire cancelled as the grant came back returned the hold to a task
    # that was cancelled, which then went on with it, the lease renewed for
    # as long as that task lived (22 of 150 such cancellations here).
    rng = random.Random(7)

    async def main() -> None:
        async with AsyncLeaseClient(server.url, owner="a") as a, AsyncLeaseClient(server.url, owner="b") as b:
            for i in range(60):
                key = unique("granted-as-cancelled")
                h = await a.acquire(key, 3.0)

                async def wait_then_keep() -> None:
                    async with b.acquire(key, 3.0, wait=10):
                        await asyncio.sleep(3600)

                t = asyncio.get_running_loop().create_task(wait_then_keep())
                await asyncio.sleep(rng.random() * 0.02)  # real time: the wait reaches the server, or not yet
                release = asyncio.get_running_loop().create_task(h.release())
                await asyncio.sleep(rng.random() * 0.005)  # real time: the cancellation lands about as the grant does
                t.cancel()
                await release
                done, _ = await asyncio.wait((t,), timeout=5)
                assert done, f"the cancelled wait {i} went on (the cancellation was dropped)"
                t0 = time.monotonic()
                while await a.get(key) is not None:  # no lease left held for the cancelled task
                    assert time.monotonic() - t0 < 2, f"{key} still held after wait {i} was cancelled"
                    await asyncio.sleep(0.01)

    run(main())


def test_timeouts_hold_in_a_task_that_kept_a_cancellation(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    # A task that caught a CancelledError and went on without uncancel()
    # keeps the request counted (cancelling() 1). Python 3.11's
    # asyncio.timeout() then raises CancelledError, not TimeoutError, when
    # it expires (it asks for a count of 0, not the count it began with):
    # a request to a stalled server must still end as UnavailableError,
    # as it did under asyncio.wait_for.
    net = proxy_to(server)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            pass  # kept: no uncancel()
        assert task.cancelling() == 1
        async with AsyncLeaseClient(net.url, timeout=0.3) as c:
            await c.get("warm")
            net.frozen.set()
            try:
                with pytest.raises(UnavailableError):
                    await c.get("k")
            finally:
                net.frozen.clear()
        task.uncancel()

    run(main())


def test_an_acquire_does_not_go_out_on_a_connection_closed_under_the_pool(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    # The pool asked the StreamReader whether an idle connection had been
    # closed, and it knows only what the event loop last read: a close that
    # came since (a server's restart, a cut, its idle timeout) while the loop
    # was busy elsewhere went unseen, and the acquire written to the dead
    # connection failed with an unknown outcome. Here the close comes with no
    # turn of the loop between it and the acquire.
    net = proxy_to(server)

    async def main() -> None:
        async with AsyncLeaseClient(net.url) as c:
            for _ in range(3):
                await (await c.try_acquire(unique("pooled"), 5.0)).release()
            net.cut()  # synchronous: the loop has not read the close
            h = await c.try_acquire(unique("after-cut"), 5.0)
            await h.release()

    run(main())


def test_a_waiting_semaphore_outlives_a_watch_break(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    # AsyncSemaphore.acquire follows the slots' watch to know when one
    # frees. It opened it with reconnect=False, so that a break (a server
    # restart, a cut connection, missed heartbeats) ended the wait with
    # UnavailableError, its place in line lost; Go's semaphore watches
    # again and the waiter does not fail.
    net = proxy_to(server)

    async def main() -> None:
        async with AsyncLeaseClient(server.url) as direct, AsyncLeaseClient(net.url) as c:
            name = unique("sem-break")
            held = await AsyncSemaphore(direct, name, 1, ttl=5.0).try_acquire()
            watchers = server.metric("lease_watchers")
            waiting = asyncio.get_running_loop().create_task(AsyncSemaphore(c, name, 1, ttl=5.0).acquire())
            while server.metric("lease_watchers") <= watchers:  # its watch of the slots is open
                assert not waiting.done(), waiting
                await asyncio.sleep(0.01)
            # The watch's connection only: a cut of the try that follows its
            # first picture, on its way, would end the wait with an unknown
            # outcome, as it ends Go's.
            net.cut(b"GET /v1/watch")
            while server.metric("lease_watchers") > watchers:
                await asyncio.sleep(0.01)
            await held.release()
            slot = await asyncio.wait_for(waiting, 10)
            assert slot.number == 0 and slot.token > held.token
            await slot.release()

    run(main())


def test_two_tasks_releasing_one_hold_send_one_release(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # AsyncHold.release() from two tasks at once: the second returned at
    # once, the first's release still on its way, so that its caller went
    # on while the server held the lease. The second now returns once the
    # first's release has ended, and only the first sends one (as the sync
    # Hold's since session 22).
    async def main() -> None:
        async with AsyncLeaseClient(server.url) as c:
            key = unique("release-twice")
            h = await c.acquire(key, 60.0)
            t = c._transport
            real = t.request
            sent: list[str] = []

            async def request(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
                if path.endswith("/release"):
                    sent.append(path)
                    await go.wait()
                return await real(method, path, *args, **kwargs)

            go = asyncio.Event()
            monkeypatch.setattr(t, "request", request)
            first = asyncio.get_running_loop().create_task(h.release())
            for _ in range(5):
                await asyncio.sleep(0)  # the first is on its way
            assert sent, "the first release was not sent"
            second = asyncio.get_running_loop().create_task(h.release())
            for _ in range(5):  # steps enough for a second that need not wait
                await asyncio.sleep(0)
            assert not second.done(), "the second release returned before the first had ended"
            go.set()
            await second
            assert first.done() and first.result() is None
            assert await c.get(key) is None
            assert sent == [f"/v1/leases/{key}/release"]
            with pytest.raises(LeaseReleasedError):
                h.check()

    run(main())
