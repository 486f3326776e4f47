"""The Python side of BenchmarkComparePython (bench_test.go): reads one job per
line on stdin, {"impl", "server" | "redis", "clients", "n"}, runs n
acquire+release pairs spread over `clients` threads (each on a key of its
own) and answers {"ns": elapsed} or {"error": ...} on stdout.

    http-pair   two raw http.client round trips doing the same acquire and
                release (JSON parsed, nothing checked): the HTTP floor
    py          LeaseClient.try_acquire + Hold.release
    redis-lock  redis-py's Lock: acquire + release (no fencing token)
    import      times `import leasehq_lease` in fresh interpreters: answers
                {"ns": best of n}
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from typing import Callable
from urllib.parse import urlsplit

from leasehq_lease import LeaseClient


def http_pair(server: str) -> Callable[[str], Callable[[], None]]:
    u = urlsplit(server)
    assert u.hostname is not None and u.port is not None

    def per_thread(key: str) -> Callable[[], None]:
        conn = http.client.HTTPConnection(u.hostname or "", u.port)
        headers = {"Content-Type": "application/json"}
        acquire = json.dumps({"owner": "bench", "ttl_ms": 10000, "wait_ms": 0}).encode()
        path = f"/v1/leases/{key}"

        def op() -> None:
            conn.request("POST", path + "/acquire", acquire, headers)
            r = conn.getresponse()
            got = json.loads(r.read())
            conn.request("POST", path + "/release", json.dumps({"id": got["id"], "token": got["token"]}).encode(), headers)
            r = conn.getresponse()
            json.loads(r.read())

        return op

    return per_thread


def py(server: str) -> Callable[[str], Callable[[], None]]:
    client = LeaseClient(server, owner="bench")

    def per_thread(key: str) -> Callable[[], None]:
        def op() -> None:
            client.try_acquire(key, 10.0).release()

        return op

    return per_thread


def redis_lock(addr: str) -> Callable[[str], Callable[[], None]]:
    import redis  # type: ignore[import]  # Debian's python3-redis ships no type information

    host, _, port = addr.rpartition(":")
    r = redis.Redis(host=host, port=int(port), max_connections=64)

    def per_thread(key: str) -> Callable[[], None]:
        lock = r.lock(key, timeout=10.0, blocking=False)

        def op() -> None:
            if not lock.acquire():
                raise RuntimeError(f"redis-lock: {key} held")
            lock.release()

        return op

    return per_thread


def import_time(n: int) -> int:
    """The best of n fresh interpreters' cumulative import time of the package, in ns (-X importtime)."""
    best: int | None = None
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "from leasehq_lease import LeaseClient, FencedResource, StaleTokenError, LeaseLostError"],
            capture_output=True, text=True, check=True,
        ).stderr
        m = re.search(r"^import time:\s+\d+ \|\s+(\d+) \| leasehq_lease$", out, re.M)
        if m is None:
            raise RuntimeError(f"no leasehq_lease line in -X importtime's output:\n{out}")
        us = int(m.group(1))
        best = us if best is None else min(best, us)
    assert best is not None
    return best * 1000


_makers: dict[tuple[str, str], Callable[[str], Callable[[], None]]] = {}
_ops: dict[tuple[str, str, int], Callable[[], None]] = {}


def run(job: dict[str, object]) -> int:
    impl, clients, n = str(job["impl"]), int(str(job["clients"])), int(str(job["n"]))
    if impl == "import":
        return import_time(n)
    target = str(job.get("server") or job.get("redis"))
    # Clients, connections and keys are kept from job to job, so that a
    # batch measures pairs, not connection set-up.
    if (impl, target) not in _makers:
        _makers[impl, target] = {"http-pair": http_pair, "py": py, "redis-lock": redis_lock}[impl](target)
    make = _makers[impl, target]
    ops = []
    for i in range(clients):
        if (impl, target, i) not in _ops:
            _ops[impl, target, i] = make(f"bench-{impl}-{uuid.uuid4().hex[:8]}-{i}")
        ops.append(_ops[impl, target, i])
    if clients == 1:  # in this thread: no thread start or barrier in the time
        op = ops[0]
        t0 = time.perf_counter_ns()
        for _ in range(n):
            op()
        return time.perf_counter_ns() - t0
    counts = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)

    def loop(op: Callable[[], None], k: int) -> None:
        start.wait()
        try:
            for _ in range(k):
                op()
        except BaseException as e:  # noqa: BLE001 - answered to the Go side
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(op, k)) for op, k in zip(ops, counts)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter_ns()
    for t in threads:
        t.join()
    elapsed = time.perf_counter_ns() - t0
    if errors:
        raise errors[0]
    return elapsed


def main() -> None:
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    for line in sys.stdin:
        try:
            print(json.dumps({"ns": run(json.loads(line))}), flush=True)
        except Exception as e:  # noqa: BLE001 - answered to the Go side
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
