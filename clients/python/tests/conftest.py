"""Real servers for the tests: ``lease serve`` (the binary the Go test built,
$LEASE_TEST_BINARY, or one built here with ``go build``), each on a free
loopback port in a temporary directory, stopped when its test ends; and the
PostgreSQL the Go test started ($LEASE_TEST_POSTGRES_URL).

Run them with ``go test ./clients/python`` (make test does), which builds the
wheel, installs it into a fresh venv and runs pytest there."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Final, Iterator, Sequence

import pytest

if TYPE_CHECKING:
    from leasehq_lease import AsyncHold, Hold

REPO = Path(__file__).resolve().parents[3]
_built: dict[str, str] = {}


def lease_binary() -> str:
    given = os.environ.get("LEASE_TEST_BINARY")
    if given:
        return given
    if "lease" not in _built:
        out = Path(tempfile.mkdtemp(prefix="lease-py-bin-")) / "lease"
        subprocess.run(["go", "build", "-o", str(out), "./cmd/lease"], cwd=REPO, check=True)
        _built["lease"] = str(out)
    return _built["lease"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A running lease serve; stop() ends it (SIGCONT first, in case it is paused)."""

    def __init__(self, args: list[str], data_dir: str, port: int) -> None:
        self.data_dir = data_dir
        self.args = args
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = ""
        found = threading.Event()
        self.url = ""

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log += line
                m = re.search(r"msg=listening addr=(\S+)", line)
                if m and not found.is_set():
                    self.url = "http://" + m.group(1)
                    found.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not found.wait(30):
            self.stop()
            raise RuntimeError(f"lease serve did not listen within 30 s:\n{self.log}")
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The log's pipe ends with the process (a child it left holding it
        # aside): read to its end, then closed rather than left to the
        # garbage collector.
        self._reader.join(15)
        if self.proc.stderr is not None and not self._reader.is_alive():
            self.proc.stderr.close()

    def metric(self, name: str, labels: str = "") -> float:
        """A metric's value from /metrics (0 if absent)."""
        text = urllib.request.urlopen(self.url + "/metrics").read().decode()
        m = re.search("^" + re.escape(name + labels) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0


StartServer = Callable[..., Server]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """start_server(tokens=None, port=0, data_dir=None, args=()) starts lease serve until the test ends."""
    running: list[Server] = []

    def start(tokens: list[str] | None = None, port: int = 0, data_dir: str | None = None, args: tuple[str, ...] = ()) -> Server:
        d = data_dir or str(tmp_path / f"data-{len(running)}")
        argv = [lease_binary(), "serve", "--addr", f"127.0.0.1:{port}", "--data-dir", d, "--shutdown-timeout", "2s", *args]
        if tokens is not None:
            f = tmp_path / f"tokens-{len(running)}"
            f.write_text("\n".join(tokens) + "\n")
            f.chmod(0o600)
            argv += ["--auth-tokens-file", str(f)]
        s = Server(argv, d, port)
        running.append(s)
        return s

    yield start
    for s in running:
        s.stop()


@pytest.fixture
def server(start_server: StartServer) -> Server:
    return start_server()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    until = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > until:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.005)


def run_either(asynchronous: bool, sync: Callable[[], None], asyncio_: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Runs a test's sync body, or its asyncio body in an event loop of its own
    for 60 s at most: the two flavours of one test."""
    if asynchronous:
        asyncio.run(asyncio.wait_for(asyncio_(), 60))
    else:
        sync()


RENEWED_TTL: Final = 2.0
"""The TTL of a hold whose renewals a test watches against a real server.
Each renewal has two thirds of it to be sent and answered, and the process
must not pause longer than that (I5: a hold that misses its safe deadline
is lost, as it must be). At 0.2 s that was about 130 ms, and pytest's
process, beside a CPU hog on 2 cores, paused for 200 ms in a collection of
the garbage of its own large heap: the hold was rightly lost, in 1-10% of
runs. Two seconds leave 1.3 s, and a test waits about one TTL."""


def past_first_ttl(h: Hold | AsyncHold) -> datetime:
    """The server's expiry that only renewals can reach: h's first expiry plus its TTL."""
    return h.lease.expires_at + timedelta(seconds=h.lease.ttl)


def renewed_past(h: Hold, expires: datetime, timeout: float = 30.0) -> None:
    """Waits until a renewal has moved h's expiry (the server's, as the
    renewal's answer said it) to expires or later; raises h's LeaseLostError
    if it is lost first."""
    until = time.monotonic() + timeout
    while h.lease.expires_at < expires:
        h.check()
        if time.monotonic() > until:
            raise AssertionError(f"{h!r} not renewed to expire at {expires} within {timeout} s (it expires at {h.lease.expires_at})")
        time.sleep(0.005)


async def renewed_past_async(h: AsyncHold, expires: datetime, timeout: float = 30.0) -> None:
    """renewed_past for an asyncio hold, waiting on the event loop."""
    until = time.monotonic() + timeout
    while h.lease.expires_at < expires:
        h.check()
        if time.monotonic() > until:
            raise AssertionError(f"{h!r} not renewed to expire at {expires} within {timeout} s (it expires at {h.lease.expires_at})")
        await asyncio.sleep(0.005)


def check_minimal_renewals(holds: Sequence[Hold] | Sequence[AsyncHold], first: list[tuple[str, str, int]], answers: list[object]) -> None:
    """Checks that holds, whose key, owner and token were first, kept them
    through renewals answered minimally (Prefer: return=minimal): each of
    answers, the bodies of POST /v1/renew, holds only TTLs and expiries."""
    for h in holds:
        h.check()
    assert [(h.lease.key, h.lease.owner, h.lease.token) for h in holds] == first
    assert all(abs(h.lease.ttl - RENEWED_TTL) < 1e-9 for h in holds)
    assert answers
    for a in answers:
        assert isinstance(a, dict)
        for r in a["results"]:
            assert sorted(r) == ["expires_at", "ttl_ms"], a


class Proxy:
    """A TCP proxy on loopback that can freeze: while frozen it forwards
    nothing, as a stalled network does (DESIGN.md's problem, step 2)."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.frozen = threading.Event()
        self.refuse = threading.Event()
        """While set, every new connection is closed at once (and counted in refused)."""
        self.refused = 0
        self.slow = 0.0
        """Seconds each piece of the server's answers is held back, as by a server slow to answer."""
        self.answers_held = threading.Event()
        """While set, the server's answers are held back (requests still pass), as on a link that
        lost them for a while: a test acts between the server's answer and its arrival."""
        self.half_close = False
        """Whether a hang-up of one side is passed on as TCP passes it: a half-close (the other
        way still carries what is sent), not the end of both ways."""
        self._ls = socket.socket()
        self._ls.bind(("127.0.0.1", 0))
        self._ls.listen(64)
        self.port = self._ls.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._socks: list[socket.socket] = []
        self._stranded = 0  # the connections open at strand(): _socks[: 2 * _stranded]
        self._asked: dict[int, bytes] = {}  # connection i: the first bytes the client sent on it
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            if self.refuse.is_set():
                self.refused += 1
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            i = len(self._socks) // 2
            self._socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b, i, a is u), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, i: int, answers: bool) -> None:
        try:
            while True:
                data = a.recv(65536)
                if i < self._stranded:
                    if not data:
                        return  # the hang-up is not passed on either
                    continue  # taken, as a peer's kernel takes it, and never delivered
                if not data:
                    if self.half_close:
                        b.shutdown(socket.SHUT_WR)
                        return
                    break
                if not answers:
                    self._asked.setdefault(i, data)
                while (self.frozen.is_set() or answers and self.answers_held.is_set()) and not self._closed:
                    time.sleep(0.005)
                if answers and self.slow:
                    time.sleep(self.slow)  # real time: the delay is what it simulates
                b.sendall(data)
        except OSError:
            pass
        if i >= self._stranded:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._ls.close()
        for s in self._socks:
            s.close()

    def strand(self) -> None:
        """Cuts the connections open now off for good without closing them,
        while new ones pass: what either side sends is taken and never
        delivered, a hang-up included, as on a path that died under an
        established connection (a NAT or proxy that lost it, a client that
        moved networks). Neither side learns of it until cut_stranded()."""
        self._stranded = len(self._socks) // 2

    def cut_stranded(self) -> None:
        """Closes the stranded connections, as the kernel at last does to a
        connection whose peer acknowledges nothing."""
        for s in self._socks[: 2 * self._stranded]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self, asking: bytes = b"") -> None:
        """Closes every connection open now, or those whose first request
        began with asking (b"GET /v1/watch": the watches, and not a request
        that may be on its way)."""
        for i, s in enumerate(self._socks):
            if not self._asked.get(i // 2, b"").startswith(asking):
                continue
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def proxy_to() -> Iterator[Callable[[Server], Proxy]]:
    made: list[Proxy] = []

    def make(s: Server) -> Proxy:
        p = Proxy(s.port)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def postgres_url() -> str:
    u = os.environ.get("LEASE_TEST_POSTGRES_URL")
    if not u:
        pytest.fail("LEASE_TEST_POSTGRES_URL is not set: run these tests with `go test ./clients/python`, which starts PostgreSQL")
    return u


@pytest.fixture
def pg() -> Iterator[Any]:
    import psycopg

    conn = psycopg.connect(postgres_url(), autocommit=True)
    yield conn
    conn.close()


def python_exe() -> str:
    import sys

    return sys.executable


def which(name: str) -> str | None:
    return shutil.which(name)
