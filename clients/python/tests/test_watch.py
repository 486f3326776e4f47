"""client.watch: the event stream parsed as the HTML standard reads it, the
server's events, reconnects after a break, and a stream silent for N
heartbeats taken as broken."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import urllib.request
from typing import Callable

import pytest

from leasehq_lease import AsyncLeaseClient, LeaseClient, TooManyWatchersError, UnavailableError, UnexpectedAnswerError, WatchEvent
from leasehq_lease._events import EventStreamParser, Message

from conftest import Proxy, Server, StartServer, unique, wait_for


def test_parser_reads_chunks_cut_anywhere() -> None:
    stream = "\ufeffretry: 1000\r\n: ping\r\nid: 1\r\nevent: held\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n" \
        ": ping\n\nevent: synced\ndata: {}\n\nid: 3\revent: x\rdata: ü\r\r"
    raw = stream.encode()
    want = [Message("held", '{"a":\n1}', "1"), Message("synced", "{}", "1"), Message("x", "ü", "3")]
    for _ in range(200):
        p = EventStreamParser()
        got: list[Message] = []
        i = 0
        while i < len(raw):
            n = random.randint(1, 7)
            got += p.feed(raw[i : i + n])
            i += n
        assert got == want
        assert p.retry == 1.0



def test_only_ascii_digits_are_numbers() -> None:
    # str.isdigit() holds for "²" (and other Unicode digits), which int()
    # refuses: a retry field or a Lease-Heartbeat-Ms header of one raised a
    # bare ValueError out of the watch. The standard's retry is ASCII digits
    # only; anything else is ignored. A heartbeat header that is not a whole
    # number of milliseconds in [10, 3600000] is refused, as the Go and
    # TypeScript clients refuse it (tests/test_hostile.py).
    c = LeaseClient("http://127.0.0.1:1", heartbeat=2.0, missed_heartbeats=3)
    assert c._silence("text/event-stream", None) == 6.25
    assert c._silence("text/event-stream", "1000") == 3.25
    # By default a stream is broken after the silence the Go and TypeScript
    # clients allow: 2 heartbeats + 250 ms (leasehttp.MissedHeartbeats,
    # SilenceSlack), 30.25 s without the header.
    d = LeaseClient("http://127.0.0.1:1")
    assert d._silence("text/event-stream", None) == 30.25
    assert d._silence("text/event-stream", "1000") == 2.25
    for value in ("²", "1²", "١٠٠٠"):
        p = EventStreamParser()
        assert p.feed(f"retry: {value}\nevent: synced\ndata: {{}}\n\n".encode()) == [Message("synced", "{}", "")]
        assert p.retry is None
        with pytest.raises(UnexpectedAnswerError):
            c._silence("text/event-stream", value)


def collect(w: object, until: Callable[[list[WatchEvent]], bool], timeout: float = 10.0) -> list[WatchEvent]:
    got: list[WatchEvent] = []
    t0 = time.monotonic()
    for ev in w:  # type: ignore[attr-defined]
        got.append(ev)
        if until(got) or time.monotonic() - t0 > timeout:
            break
    return got


def kinds(evs: list[WatchEvent]) -> list[str]:
    return [e.kind for e in evs]


def test_the_picture_then_the_changes(server: Server, proxy_to: Callable[[Server], Proxy]) -> None:
    c = LeaseClient(server.url)
    prefix = unique("w") + "/"
    h1 = c.try_acquire(prefix + "a", 5.0)
    with c.watch(prefix) as w:
        first = collect(w, lambda g: g[-1].kind == "synced")
        assert kinds(first) == ["held", "synced"] and first[0].lease is not None and first[0].lease.token == h1.token
        h1.release()
        net = proxy_to(server)
        other = LeaseClient(net.url, timeout=0.5)
        h2 = other.try_acquire(prefix + "b", 0.3)
        net.frozen.set()  # no renewal arrives: the server expires it
        evs = collect(w, lambda g: g[-1].kind == "expired")
        ks = kinds(evs)
        assert ks[0] == "released" and "acquired" in ks and ks[-1] == "expired"
        assert evs[-1].lease is not None and evs[-1].lease.key == prefix + "b" and evs[-1].lease.token == h2.token
        net.frozen.clear()
    c.close()
    other.close()


def test_a_restarted_server_is_a_reset_and_a_new_picture(start_server: StartServer) -> None:
    s = start_server()
    c = LeaseClient(s.url)
    prefix = unique("r") + "/"
    with c.try_acquire(prefix + "a", 10.0):
        with c.watch(prefix) as w:
            assert kinds(collect(w, lambda g: g[-1].kind == "synced")) == ["held", "synced"]
            s.stop()
            start_server(port=s.port, data_dir=s.data_dir)
            evs = collect(w, lambda g: g[-1].kind == "synced")
            assert kinds(evs) == ["reset", "held", "synced"]
            assert isinstance(evs[0].error, UnavailableError)
    c.close()


def test_without_reconnect_a_break_raises(start_server: StartServer) -> None:
    s = start_server()
    w = LeaseClient(s.url).watch(reconnect=False)
    assert kinds(collect(w, lambda g: g[-1].kind == "synced")) == ["synced"]
    s.stop()
    with pytest.raises(UnavailableError):
        next(w)


def test_a_frozen_link_breaks_at_the_servers_heartbeat(start_server: StartServer, proxy_to: Callable[[Server], Proxy]) -> None:
    # The client's own heartbeat is the 15 s default: only the server's
    # Lease-Heartbeat-Ms (100 ms) can make it notice a frozen link in time.
    s = start_server(args=("--watch-heartbeat", "100ms"))
    net = proxy_to(s)
    w = LeaseClient(net.url).watch(reconnect=False)
    assert kinds(collect(w, lambda g: g[-1].kind == "synced")) == ["synced"]
    net.frozen.set()
    t0 = time.monotonic()
    with pytest.raises(UnavailableError, match="heartbeats"):
        next(w)
    assert time.monotonic() - t0 < 10
    net.frozen.clear()
    w.close()


def test_heartbeats_keep_a_quiet_stream_alive(start_server: StartServer) -> None:
    # The negative control: the same client, a server that sends heartbeats.
    s = start_server(args=("--watch-heartbeat", "50ms"))
    w = LeaseClient(s.url, heartbeat=0.1, missed_heartbeats=3).watch(reconnect=False)
    assert kinds(collect(w, lambda g: g[-1].kind == "synced")) == ["synced"]
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in w:
                pass
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            errors.append(e)

    t = threading.Thread(target=read)
    t.start()
    time.sleep(1.0)
    w.close()
    t.join(5)
    assert not errors or not isinstance(errors[0], UnavailableError) or "heartbeats" not in str(errors[0]), errors


def test_too_many_watchers(start_server: StartServer) -> None:
    s = start_server(args=("--max-watchers", "1"))
    c = LeaseClient(s.url)
    with c.watch() as w1:
        collect(w1, lambda g: g[-1].kind == "synced")
        with pytest.raises(TooManyWatchersError):
            next(c.watch())
    c.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])
def test_a_429_after_a_stream_given_up_for_silence_is_a_break(
    start_server: StartServer, proxy_to: Callable[[Server], Proxy], asynchronous: bool
) -> None:
    # The server cannot tell a stream whose path died without closing from
    # a sound one until its writes fail (minutes of TCP retransmissions;
    # never behind a proxy that takes the bytes), and counts it meanwhile:
    # with the token at --max-watchers, the watch opened again is refused by
    # the client's own dead stream. That is a break, not the end of the watch.
    s = start_server(args=("--watch-heartbeat", "100ms", "--max-watchers", "1"))
    net = proxy_to(s)
    prefix = unique("s") + "/"

    async def run_async(strand: Callable[[], None]) -> list[WatchEvent]:
        async with AsyncLeaseClient(net.url) as c:
            async with c.watch(prefix) as w:
                got: list[WatchEvent] = []
                async for ev in w:
                    got.append(ev)
                    if ev.kind == "synced":
                        if len(got) == 1:
                            strand()
                        else:
                            return got
                return got

    def strand() -> None:
        net.strand()
        # Once the watch has been refused at least once (its 429), the
        # stranded stream ends, as TCP ends it at last; the slot is free.
        def later() -> None:
            t0 = time.monotonic()
            while net_refusals() == 0 and time.monotonic() - t0 < 10:
                time.sleep(0.01)  # real time: polling the server's own count of 429s
            LeaseClient(s.url).try_acquire(prefix + "a", 30.0)
            net.cut_stranded()

        threading.Thread(target=later, daemon=True).start()

    def net_refusals() -> int:
        with urllib.request.urlopen(s.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith("lease_http_request_duration_seconds_count{") and 'code="429"' in line
        )

    if asynchronous:
        evs = asyncio.run(asyncio.wait_for(run_async(strand), 30))
    else:
        with LeaseClient(net.url).watch(prefix) as w:
            evs = []
            for ev in w:
                evs.append(ev)
                if ev.kind == "synced":
                    if len(evs) == 1:
                        strand()
                    else:
                        break
    assert kinds(evs) == ["synced", "reset", "held", "synced"], evs
    assert isinstance(evs[1].error, TooManyWatchersError), evs[1]


def test_a_watch_closed_from_another_thread_ends_a_read_on_a_quiet_stream(start_server: StartServer) -> None:
    # Watch.close() from another thread closed the connection object, but
    # the socket stayed open under the read blocked in it (the answer's
    # file keeps it; over keep-alive, closing the answer waited for that
    # read): the reading thread, and the server's stream, went on until the
    # next event or heartbeat came, or the stream's silence broke it (here
    # 3 x 10 s). The socket is now shut down, which ends the read at once.
    s = start_server(args=("--watch-heartbeat", "10s"))
    watchers = s.metric("lease_watchers")
    with LeaseClient(s.url) as c:
        w = c.watch(unique("quiet") + "/")
        got: list[object] = []
        reading = threading.Thread(target=lambda: got.extend(w), daemon=True)
        reading.start()
        wait_for("the picture", lambda: kinds(got) == ["synced"])  # type: ignore[arg-type]
        wait_for("the stream to be counted", lambda: s.metric("lease_watchers") > watchers)
        time.sleep(0.1)  # real time: the reader is back in its read of the quiet stream
        t0 = time.monotonic()
        w.close()
        assert time.monotonic() - t0 < 1.0, "close() waited for the read"
        reading.join(2.0)
        assert not reading.is_alive(), "the read went on after close()"
        wait_for("the server to see the hang-up", lambda: s.metric("lease_watchers") <= watchers, timeout=2.0)
