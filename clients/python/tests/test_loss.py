"""The seed's problem with a real pause: worker A (its own process) holds the
lease, is stopped with SIGSTOP past the TTL, B acquires and writes; A wakes,
its hold reports the loss at once, and the PostgreSQL guard refuses A's late
write. Without the guard the late write lands (the negative control)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from leasehq_lease import LeaseClient
from leasehq_lease.pg import update_row

from conftest import Server, postgres_url, unique, wait_for

WORKER = str(Path(__file__).with_name("stall_worker.py"))


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced-control"])
def test_a_stopped_worker_wakes_lost_and_its_late_write_is_refused(server: Server, pg: Any, fenced: bool) -> None:
    table = unique("jobs").replace("-", "_")
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, value text NOT NULL, fencing_token bigint)".encode())
    pg.execute(f"INSERT INTO {table} VALUES (1, 'initial', NULL)".encode())
    key = unique("seed")
    ttl = 1.0
    a = subprocess.Popen(
        [sys.executable, WORKER, server.url, key, str(ttl), postgres_url(), table],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    assert a.stdin is not None and a.stdout is not None
    try:
        token_a = json.loads(a.stdout.readline())["token"]
        os.kill(a.pid, signal.SIGSTOP)
        b = LeaseClient(server.url, owner="worker-b")
        t0 = time.monotonic()
        wait_for("A's lease to expire on the server", lambda: b.get(key) is None, timeout=10)
        assert time.monotonic() - t0 >= ttl * 0.5  # A's renewals kept it while A ran
        with b.acquire(key, 5.0) as hb:
            assert hb.token > token_a
            update_row(pg, table, 1, {"value": "written-by-b"}, hb.token)
            os.kill(a.pid, signal.SIGCONT)
            a.stdin.write(("fenced" if fenced else "unfenced") + " written-by-a-late\n")
            a.stdin.flush()
            said = json.loads(a.stdout.readline())
            # A's hold reports the loss as soon as A runs again.
            assert said["lost"] is True and said["check"] == "LeaseLostError"
            row = pg.execute(f"SELECT value, fencing_token FROM {table} WHERE id = 1".encode()).fetchone()
            if fenced:
                assert said["written"] is False and said["highest"] == hb.token
                assert row == ("written-by-b", hb.token)
            else:
                # Without the guard A's late write overwrites B's.
                assert said["written"] is True and row[0] == "written-by-a-late"
    finally:
        os.kill(a.pid, signal.SIGCONT)
        a.kill()
        a.wait()
